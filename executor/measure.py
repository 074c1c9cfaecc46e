"""What an execution measured, and how it compares with the simulator.

- Iteration time: host wall time per iteration (issue to final synchronize),
  and the device makespan (first to last event; CUDA events on a GPU).
- Per stream (from each node's start/end events): busy time, and stall = the
  gaps between consecutive nodes of that stream, i.e. time it sat waiting on
  another stream's event (or on the host issuing work).
- Measured vs simulated: the plan's makespan (simulated with the graph's op
  times) against the measured makespan, and the augmented graph re-simulated
  with the *measured* node durations, which separates errors in the op-time
  model from errors in the stream model.
- Peak device memory: the pool's own accounting (live device copies: in
  tensor bytes, and as the plan counts them, each rounded up to the device's
  alignment), its buffer, the copy fallback's largest transient, the bytes
  allocated outside the pool (executor.outside: a dispatch-mode counter on the
  CPU, the caching allocator's counters on CUDA), the pool's level with what
  was allocated outside it at the same time (`peak_with_outside_bytes`), and
  on CUDA torch.cuda.max_memory_allocated (everything PyTorch allocated,
  kernels' scratch included).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hybrid.plan import events as E
from hybrid.plan.events import STREAMS
from hybrid.simulator import resimulate

from executor.program import Program
from executor.runtime import IterationRecord


@dataclass
class Summary:
    """A measured run of a plan, set beside the plan's simulation. Times are seconds, sizes bytes; "per
    iteration" figures are one iteration's total (the median over the measured iterations for times, the last
    one for counts), "peak" figures the most held at one instant.

    - iterations: iterations run; measured_from: the first counted (0-based; the first is warm-up when there
      are several).
    - wall_s: median host time per iteration; makespan_s: median device makespan per iteration (of the CUDA
      graph replays when graphed > 0); simulated_s: the plan's makespan; resimulated_s: the plan's augmented
      graph re-timed with the measured node durations (None without node times); ratio: makespan_s / simulated_s.
    - busy_s, stall_s: per stream (compute, h2d, d2h), median seconds per iteration spent running, and idle
      before and between its nodes (of the iterations issued node by node: replays have no node times).
    - op_modes: how many ops wrote their outputs each way ("out", "copy", "inplace", "optimizer", "slot"), in
      the last measured iteration.
    - copy_bytes, copy_s: per iteration, bytes the copy fallback copied and the median time it took;
      transient_peak_bytes: the largest single result the copy fallback held outside the pool (a peak);
      copy_targets: aten target -> why it needed the copy fallback; version_bytes: per iteration, bytes copied
      to start new versions of intermediates (in-place ops).
    - memory: the pool's statistics and the device's own memory figures (executor.api's `memory()`).
    - issue_s: median host time to issue an iteration node by node (NaN when every one was a graph replay);
      graphed: iterations replayed as one CUDA graph; issued_makespan_s: median makespan of the iterations
      issued node by node (None if none).
    - outside_*: allocations outside the pool, from the iteration that allocated most there. counted_by:
      "dispatch" (CPU, per node), "allocator" (CUDA) or "" (not counted); outside_bytes: that iteration's total
      (per iteration, not a peak); outside_peak_bytes: a peak (CPU: the most one node allocated; CUDA: the
      allocator's peak above the iteration's start); outside_beyond_workspace_bytes: what the plan's
      workspaces did not allow for; outside_by_target: bytes per aten target ("runtime" for the executor's own).
    - pool_peak_occupied_bytes: the pool's peak as the plan counts it (each copy rounded up to the device's
      alignment); peak_with_outside_bytes: an instant's peak of the pool plus what was outside it then (exact on
      the CPU; on CUDA, and where uncounted, an upper bound): the figure to set beside the plan's memory;
      peak_beyond_workspace_bytes: of that peak, what the node running then allocated beyond its op's stated
      workspace (CPU; else 0): the share a graph stating those bytes would have planned for.
    """

    iterations: int
    measured_from: int                  # first iteration counted (the first is warm-up when there are several)
    wall_s: float                       # median host time per iteration
    makespan_s: float                   # median device makespan per iteration
    simulated_s: float                  # the plan's makespan
    resimulated_s: float | None         # augmented graph re-timed with the measured durations
    ratio: float                        # makespan_s / simulated_s
    busy_s: dict[str, float] = field(default_factory=dict)
    stall_s: dict[str, float] = field(default_factory=dict)
    op_modes: dict[str, int] = field(default_factory=dict)
    copy_bytes: int = 0
    copy_s: float = 0.0
    transient_peak_bytes: int = 0
    copy_targets: dict[str, str] = field(default_factory=dict)
    version_bytes: int = 0
    memory: dict[str, Any] = field(default_factory=dict)
    issue_s: float = float("nan")       # median host time to issue an iteration (issued node by node)
    graphed: int = 0                    # iterations replayed as one CUDA graph (makespan_s is theirs when > 0)
    issued_makespan_s: float | None = None   # median makespan of the iterations issued node by node
    # allocated outside the pool in the iteration that allocated most there (executor.outside): the copy fallback's
    # results, constants, on CUDA kernels' scratch too; `outside_beyond_workspace_bytes` is what the plan's memory
    # did not allow for
    outside_counted_by: str = ""
    outside_bytes: int = 0
    outside_peak_bytes: int = 0
    outside_beyond_workspace_bytes: int = 0
    outside_by_target: dict[str, int] = field(default_factory=dict)
    # the pool's peak as the plan counts it (each copy rounded up to the device's alignment; memory["pool"]'s
    # `peak_live_bytes` is in tensor bytes)
    pool_peak_occupied_bytes: int = 0
    # that pool's level plus what was allocated outside the pool at the same time, to set beside the plan's
    # memory: on the CPU per node (exact, `outside_counted_by` "dispatch"); on CUDA the pool's peak plus the
    # allocator's peak above the iteration's start; uncounted, plus the copy fallback's largest transient
    # (both upper bounds)
    peak_with_outside_bytes: int = 0
    # CPU: of that peak, what the node running then allocated beyond its op's stated workspace (else 0)
    peak_beyond_workspace_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def frame(self) -> "pd.DataFrame":  # noqa: F821 - pandas, a core dependency
        """The summary as a one-row DataFrame, nested figures flattened with dots (`busy_s.compute`,
        `memory.pool.peak_live_bytes`, `outside_by_target.<aten target>`): `pd.concat` of several runs' frames sets
        them side by side (a column a run lacks is empty)."""
        import pandas as pd

        return pd.json_normalize(self.to_json(), sep=".")


def _stream_of(program: Program) -> np.ndarray:
    return np.array([st.stream for st in program.steps], dtype=np.int64)


def node_durations(records: list[IterationRecord], n: int) -> np.ndarray:
    """Median measured duration per node over the records that have times (0 for frees)."""
    rows = [r.end - r.start for r in records if r.start is not None]
    if not rows:
        return np.zeros(n)
    return np.median(np.nan_to_num(np.vstack(rows), nan=0.0), axis=0)


def stream_times(program: Program, rec: IterationRecord) -> tuple[dict[str, float], dict[str, float]]:
    busy: dict[str, float] = {}
    stall: dict[str, float] = {}
    if rec.start is None or rec.end is None:
        return busy, stall
    streams = _stream_of(program)
    for s, name in enumerate(STREAMS):
        idx = np.nonzero(streams == s)[0]
        if len(idx) == 0:
            busy[name] = stall[name] = 0.0
            continue
        st, en = rec.start[idx], rec.end[idx]
        busy[name] = float(np.sum(en - st))
        prev_end = np.concatenate(([0.0], en[:-1]))
        stall[name] = float(np.sum(np.maximum(0.0, st - prev_end)))
    return busy, stall


def counted(records: list[IterationRecord]) -> list[bool]:
    """Which iterations the summary's medians count: past the first (warm-up) when there are several; where
    some were replayed as CUDA graphs, those replays only, past each graph's first launch (it uploads the graph)
    where later replays exist."""
    first = 1 if len(records) > 1 else 0
    use = list(range(first, len(records)))
    replayed = [k for k in use if records[k].graphed]
    graphed = [k for k in replayed if not records[k].first_replay] or replayed
    keep = set(graphed or use)
    return [k in keep for k in range(len(records))]


def summarize(program: Program, records: list[IterationRecord], memory: dict[str, Any] | None = None) -> Summary:
    first = 1 if len(records) > 1 else 0
    use = records[first:]
    replayed = [r for r in use if r.graphed]
    chosen = [r for r, c in zip(records, counted(records)) if c]   # what the medians count
    # Node times come from the iterations issued node by node (graph replays have none); past the first if any.
    issued = [r for r in records if not r.graphed]
    issued = issued[1:] if len(issued) > 1 else issued
    timed = [r for r in issued if r.start is not None]
    wall = statistics.median(r.wall_s for r in chosen)
    mk = statistics.median(r.makespan_s for r in chosen)
    sim = float(program.plan.makespan_s)
    resim = None
    if timed:
        aug = program.aug
        dur = node_durations(timed, program.n_nodes)
        dur[aug.kind == E.FREE] = 0.0
        _, end = resimulate(aug, durations=dur)
        resim = float(end.max()) if len(end) else 0.0
    busy: dict[str, list[float]] = {}
    stall: dict[str, list[float]] = {}
    for r in timed:
        b, s = stream_times(program, r)
        for k, v in b.items():
            busy.setdefault(k, []).append(v)
        for k, v in s.items():
            stall.setdefault(k, []).append(v)
    last = use[-1].ops
    # Bytes outside the pool: the iteration that allocated the most there (a replayed CUDA graph allocates
    # nothing; its recording, or an issued iteration, did).
    out = max((r.ops.outside for r in records), key=lambda o: (o.peak_bytes, o.bytes), default=last.outside)
    pool = (memory or {}).get("pool", {})
    occupied = int(pool.get("peak_occupied_bytes", 0))
    beyond_at_peak = 0
    if out.counted_by == "dispatch":
        at = max((r.ops.outside for r in records), default=out,
                 key=lambda o: (o.with_pool_peak_bytes, -o.with_pool_peak_beyond_bytes))
        with_outside = max(occupied, at.with_pool_peak_bytes)
        beyond_at_peak = at.with_pool_peak_beyond_bytes if at.with_pool_peak_bytes > occupied else 0
    elif out.counted_by == "allocator":
        with_outside = occupied + out.peak_bytes
    else:
        with_outside = occupied + max((r.ops.transient_peak_bytes for r in records), default=0)
    return Summary(
        iterations=len(records), measured_from=first, wall_s=wall, makespan_s=mk, simulated_s=sim,
        resimulated_s=resim, ratio=(mk / sim) if sim > 0 else float("nan"),
        busy_s={k: statistics.median(v) for k, v in busy.items()},
        stall_s={k: statistics.median(v) for k, v in stall.items()},
        op_modes=dict(last.ops_by_mode), copy_bytes=last.copy_bytes,
        copy_s=statistics.median(r.ops.copy_s for r in (issued or use)),
        transient_peak_bytes=last.transient_peak_bytes,
        copy_targets=dict(last.copy_targets), version_bytes=last.version_bytes, memory=dict(memory or {}),
        issue_s=statistics.median(r.issue_s for r in issued) if issued else float("nan"), graphed=len(replayed),
        issued_makespan_s=statistics.median(r.makespan_s for r in issued) if issued else None,
        outside_counted_by=out.counted_by, outside_bytes=out.bytes,
        outside_peak_bytes=out.peak_bytes, outside_beyond_workspace_bytes=out.beyond_workspace_bytes,
        outside_by_target=dict(out.by_target), pool_peak_occupied_bytes=occupied,
        peak_with_outside_bytes=with_outside, peak_beyond_workspace_bytes=beyond_at_peak,
    )


def to_profile(program: Program, records: list[IterationRecord], backend: str, device_name: str) -> Any:
    """Measured compute times as a hybrid-profile/1 (hybrid.capture.profile), to feed back into capture.

    Entries are keyed by op signature with the median over the op's runs; a
    `cuda` profile sets ops' `time_s` and a `cpu` one their `cpu_time_s` when
    applied with hybrid.capture.profile.apply_profile.
    """
    import torch

    from hybrid.capture.profile import Profile, op_signature

    g = program.graph
    samples: dict[str, list[float]] = {}
    targets: dict[str, str] = {}
    for r in records:
        if r.start is None:
            continue
        for st in program.steps:
            if st.kind != E.COMPUTE:
                continue
            op = g.ops[st.ref]
            sig = op_signature(g, op)
            if sig is None:
                continue
            samples.setdefault(sig, []).append(float(r.end[st.node] - r.start[st.node]))
            targets[sig] = op.extra["aten"]["target"]
    entries = {sig: {"time_s": statistics.median(v), "samples": len(v), "target": targets[sig],
                     "source": "hybrid execute"} for sig, v in samples.items()}
    return Profile(backend, device_name, entries, torch.__version__)


def measured_trace_rows(program: Program, records: list[IterationRecord]) -> tuple[int, list[tuple]]:
    """The last iteration issued node by node (CUDA graph replays have no node times) as Chrome trace rows
    (label, lane, lane, start_s, end_s, args), with its iteration number (counted from 0)."""
    import math

    from hybrid.report.timeline import compute_trace_row, copy_trace_row

    rec = next((r for r in reversed(records) if r.start is not None), records[-1])
    rows: list[tuple] = []
    if rec.start is not None and rec.end is not None:
        g = program.aug.graph
        ran: set[int] = set()
        # named and grouped as the plan's rows are (hybrid.report.timeline's rows); times from the iteration's
        # first event, as the plan's from 0
        t0 = min((float(rec.start[st.node]) for st in program.steps if st.stream >= 0
                  and not math.isnan(float(rec.start[st.node]))), default=0.0)
        for st in program.steps:
            s, e = float(rec.start[st.node]), float(rec.end[st.node])
            if st.stream < 0 or math.isnan(s) or math.isnan(e):
                continue
            lane = STREAMS[st.stream]
            if st.kind == E.COMPUTE:
                op = g.ops[st.ref]
                rerun = st.ref in ran
                ran.add(st.ref)
                rows.append(compute_trace_row(op.id, op.kind, rerun, lane, s - t0, e - t0, node=st.node))
            else:
                t = g.tensors[st.ref]
                rows.append(copy_trace_row(E.EVENT_KINDS[st.kind], t.id, t.bytes, lane, s - t0, e - t0,
                                           node=st.node))
    return rec.iteration, rows
