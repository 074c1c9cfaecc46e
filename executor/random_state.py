"""Where a random op's numbers come from, so that a rerun (a plan's recompute) draws what the first run drew.

Two ways, one contract (`RandomSource`: `begin_iteration(step_seed)` on the host before an iteration is issued
or replayed, `start()` when its issue starts, `run(o)` around every run of random op o):

- `HostReplay` (the default; bitwise equal to eager on the CPU): ops draw from the global generator, in
  eager's order; the generator's state is copied to the host before an op's first run in the iteration and
  put back for its rerun. A CUDA graph cannot record that (the copy and the restore are host work).
- `OpSeeds` (graph-safe): every run of random op o in the iteration with step seed s draws from a generator
  state seeded `op_seed(s, o)` at offset 0, whatever ran before it, so a rerun draws exactly the first run's
  numbers, and the draws depend on the step and the op only (not on the schedule). On CUDA each run of an op
  has its own generator state (`clone_state()` of the device's default generator), swapped in and out with
  `graphsafe_set_state` (which a CUDA graph records) and registered with each recorded graph
  (`register_generator_state`); `begin_iteration` reseeds them before each replay, so replay k draws with
  step k's seeds. On the CPU the global generator is reseeded around each run and restored after. The
  numbers differ from eager's (another seed per op), not their distribution.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch

MASK64 = (1 << 64) - 1


def op_seed(step_seed: int, op: int) -> int:
    """A 63-bit seed for random op `op` at the step seeded `step_seed` (splitmix64 of both): every (step, op)
    pair its own stream."""
    z = (int(step_seed) * 0x9E3779B97F4A7C15 + (int(op) + 1) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return (z ^ (z >> 31)) >> 1


def graph_safe_available() -> str:
    """'' where this PyTorch can swap generator states inside a CUDA graph, else why not."""
    if not hasattr(torch.Generator, "graphsafe_set_state") or not hasattr(torch.Generator, "clone_state"):
        return "this PyTorch has no graph-safe generator states (torch.Generator.graphsafe_set_state, 2.4+)"
    if not hasattr(torch.cuda, "CUDAGraph") or not hasattr(torch.cuda.CUDAGraph, "register_generator_state"):
        return "this PyTorch cannot register generator states with a CUDA graph (2.4+)"
    return ""


class HostReplay:
    """The global generator, its state copied to the host before an op's first run and restored for a rerun."""

    graph_safe = False

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._state: dict[int, torch.Tensor] = {}

    def begin_iteration(self, step_seed: int | None) -> None:
        pass   # the global generator: the runtime seeds it (torch.manual_seed) as eager would be

    def start(self) -> None:
        pass

    def _get(self) -> torch.Tensor:
        return torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else torch.get_rng_state()

    def _set(self, state: torch.Tensor) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_rng_state(state, self.device)
        else:
            torch.set_rng_state(state)

    @contextmanager
    def run(self, o: int, rerun: bool, name: str) -> Iterator[None]:
        from hybrid.errors import HybridError

        if not rerun:
            self._state[o] = self._get()
            yield
            return
        if o not in self._state:
            raise HybridError(f"op {name!r} is recomputed before its first run in this iteration")
        now = self._get()
        self._set(self._state[o])
        try:
            yield
        finally:
            self._set(now)


class OpSeeds:
    """Each run of random op o draws from a state seeded `op_seed(step_seed, o)` (see the module docstring).

    `runs`: op -> how many times the op runs in an iteration (its first run and its reruns); on CUDA that many
    generator states are made up front (none may be made while a CUDA graph records). `generator`: the device's
    default generator (tests pass a stand-in with the same methods)."""

    graph_safe = True

    def __init__(self, device: torch.device, runs: dict[int, int], generator: Any = None) -> None:
        self.device = device
        self.step_seed = 0
        self._k: dict[int, int] = {}
        self.cuda = device.type == "cuda" or generator is not None
        if self.cuda:
            gen = generator if generator is not None else torch.cuda.default_generators[device.index or 0]
            self.generator = gen
            self.states = {o: [gen.clone_state() for _ in range(n)] for o, n in runs.items()}
        else:
            self.generator = torch.default_generator
            self.states = {}

    def begin_iteration(self, step_seed: int | None) -> None:
        """Seed every op's states for this step (host work: never while a CUDA graph records)."""
        if step_seed is None:
            step_seed = int(torch.randint(0, 2**62, (1,), generator=None).item())
        self.step_seed = int(step_seed)
        for o, states in self.states.items():
            for s in states:
                s.manual_seed(op_seed(self.step_seed, o))

    def start(self) -> None:
        """The iteration's issue starts: each op's next run is its first."""
        self._k.clear()

    def register(self, graph: Any) -> None:
        """Register every state with a CUDA graph about to record (its replays then read their seeds)."""
        for states in self.states.values():
            for s in states:
                graph.register_generator_state(s)

    @contextmanager
    def run(self, o: int, rerun: bool, name: str) -> Iterator[None]:
        k = self._k.get(o, 0)
        self._k[o] = k + 1
        gen = self.generator
        if self.cuda:
            from hybrid.errors import HybridError

            states = self.states.get(o, [])
            if k >= len(states):
                raise HybridError(f"op {name!r} ran {k + 1} times in one iteration; the program has {len(states)}")
            now = gen.graphsafe_get_state()
            gen.graphsafe_set_state(states[k])
            try:
                yield
            finally:
                gen.graphsafe_set_state(now)
            return
        now = gen.get_state()
        gen.manual_seed(op_seed(self.step_seed, o))
        try:
            yield
        finally:
            gen.set_state(now)
