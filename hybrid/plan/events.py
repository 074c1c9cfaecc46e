"""Event kinds, defined once: the words of the plan format (docs/formats.md) and the integer codes that arrays
(the swap planner's augmented graph, the simulator, the validator, the executor's program) use for them.

A plain module with no imports, so that the Numba kernels and the executor can share the codes without one
importing the other.
"""
from __future__ import annotations

EVENT_KINDS = ("compute", "swap_in", "swap_out", "free")
# Codes: the kind's index in EVENT_KINDS; for the first three also the index of the stream it runs on.
COMPUTE, SWAP_IN, SWAP_OUT, FREE = 0, 1, 2, 3
KIND_CODE = {kind: code for code, kind in enumerate(EVENT_KINDS)}
STREAMS = ("compute", "h2d", "d2h")   # the GPU's streams, indexed by the code of the kind that runs on each
STREAM_OF_KIND = {kind: STREAMS[code] for code, kind in enumerate(EVENT_KINDS[:3])}   # a free takes no stream
CPU_STREAM = "cpu"   # placement plans (docs/formats.md): a compute event run on the host
