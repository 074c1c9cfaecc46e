"""Turn a MILP solution into the one plan type, timed by the project's simulator and checked by its validator.

The MO-SOS paper's Algorithm 1 (§2.5) walks the stages: transfers issued, then computes in order, each
followed by the frees Free says. Here:
1. `actions`: the same walk, stage by stage — frees of what S drops, prefetches (P) issued at the stage's
   start, the stage's (re)computes with their impls, each followed by the frees the model's Free allows,
   offloads (O) issued at the stage's end. On a coarsened problem a node expands to its ops, and tensors
   inside a segment are freed after their last reader there.
2. A nominal timeline runs these one after another (one event at a time): a valid plan whenever the
   model's memory accounting holds, and a check of that accounting. A copy freed and made again by a
   zero-time rerun before the clock moves, nothing allocated between them, is kept instead
   (`keep_through_meetings`).
3. `hybrid.swap.from_plan` recovers its data, stream and memory edges, and `hybrid.simulator` re-times them
   with the three streams overlapped: copies may stall computes where the stage windows were optimistic.
   (`milp.api.plan_milp` lays the result out after `meetings_kept`: where the overlapped times bring a
   zero-time rerun to its output's free, that copy is kept too.)
   The MILP objective (compute time) is a lower bound on that makespan.
With `auto=True` (the -Auto baselines) each node takes, when it first runs, the fastest implementation
whose workspace fits the memory the model leaves at that point; its reruns reuse it where it fits, else the
leanest.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hybrid.errors import HybridError
from hybrid.plan import Event, Plan, UnconstrainedAllocation
from hybrid.plan.events import EVENT_KINDS
from hybrid.plan.metrics import stall_of
from hybrid.simulator import resimulate
from hybrid.swap.from_plan import from_plan
from hybrid.validator import validate
from milp.model import MilpModel, Values


@dataclass(frozen=True)
class Action:
    kind: str                 # compute | swap_in | swap_out | free
    ref: int                  # op index (compute) or tensor index
    impl: int = 0             # impl index into the op's implementations (compute)
    recompute: bool = False


def actions(model: MilpModel, values: Values, auto: bool = False,
            runs_out: dict[tuple[int, int], int] | None = None) -> list[Action]:
    """The paper's decoding walk (module docstring, step 1). `runs_out` collects (stage, node) -> the impl
    each run took (Auto's choice, with auto)."""
    pb = model.problem
    g = pb.graph
    nodes = pb.nodes
    n = pb.n
    budget = pb.device.usable_bytes
    run_at: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for (t, q, v) in values.R:
        run_at[t].append((q, v))
    for lst in run_at:
        lst.sort()
    # managed tensors with a complete (or landing) device copy; managed persistent ones may start there
    on_device: set[int] = {j for j in pb.persistent if (0, j) in values.S}
    landing: dict[int, int] = {}           # prefetched tensor -> last stage its copy is in flight
    leaving: dict[int, int] = {}           # offloaded tensor -> last stage its copy is in flight (model memory)
    chosen: dict[int, int] = {}            # node -> impl its first run took (auto)
    out: list[Action] = []

    def free(i: int) -> None:
        on_device.discard(i)
        out.append(Action("free", i))

    for t in range(n):
        for j in [j for j, e in leaving.items() if e < t]:
            del leaving[j]
        for j in [j for j, e in landing.items() if e < t]:
            del landing[j]
        for i in sorted(on_device):
            if i not in landing and (t, i) not in values.S:
                free(i)
        for (x, j) in sorted(values.P):
            if x == t:
                out.append(Action("swap_in", j))
                on_device.add(j)
                landing[j] = model.sf_pre[x, j]
        for (x, j) in sorted(values.Pb):  # blocking: the stage's computes wait for it (data edges)
            if x == t:
                out.append(Action("swap_in", j))
                on_device.add(j)
        runs = run_at[t]
        for k, (q, v) in enumerate(runs):
            nd = nodes[q]
            if auto:
                used = pb.fixed_bytes + sum(pb.mem[i] for i in on_device | set(leaving)) + \
                    sum(pb.mem[i] for i in nd.outputs)
                if q in chosen and nd.impls[chosen[q]].workspace <= budget - used:
                    v = chosen[q]
                elif q in chosen:
                    v = nd.leanest
                else:
                    fits = [w for w in range(len(nd.impls)) if nd.impls[w].workspace <= budget - used]
                    v = min(fits, key=lambda w: nd.impls[w].time_s) if fits else nd.leanest
                    chosen[q] = v
            if runs_out is not None:
                runs_out[t, q] = v
            on_device.update(nd.outputs)
            out.extend(_expand(g, nd.ops, nd.impls[v].choice, set(pb.managed), t != q))
            later = {r for r, _ in runs[k + 1:]}
            for i in dict.fromkeys(nd.inputs + nd.outputs):
                if any(r in later for r in pb.readers.get(i, ())):
                    continue
                if (t + 1, i) in values.S or (t, i) in values.O:
                    continue
                free(i)
        for (x, j) in sorted(values.O):
            if x == t:
                out.append(Action("swap_out", j))
                on_device.discard(j)
                leaving[j] = model.sf_off[x, j]
    for i in sorted(on_device):
        if (n, i) not in values.S:  # a persistent tensor resident at the end stays (periodicity)
            free(i)
    return out


def _expand(g: Any, ops: tuple[int, ...], choice: tuple[int, ...], managed: set[int],
            recompute: bool) -> list[Action]:
    """A node's ops in order; tensors that never leave the segment are freed after their last reader in it."""
    a = g.arrays
    out: list[Action] = []
    last: dict[int, int] = {}
    for k, o in enumerate(ops):
        for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]:
            last[int(t)] = k
    for k, o in enumerate(ops):
        out.append(Action("compute", o, choice[k], recompute))
        done = [int(t) for t in a.out_idx[a.out_ptr[o]:a.out_ptr[o + 1]]
                if int(t) not in managed and last.get(int(t), k) <= k]
        done += [int(t) for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]
                 if int(t) not in managed and not a.t_persistent[t] and last[int(t)] == k
                 and int(a.t_producer[t]) in ops and ops.index(int(a.t_producer[t])) < k]
        out.extend(Action("free", t) for t in dict.fromkeys(done))
    return out


def _duration(g: Any, device: Any, ac: Action) -> float:
    """Seconds an action takes on the nominal timeline (`_events`)."""
    if ac.kind == "compute":
        return float(g.ops[ac.ref].implementations[ac.impl].time_s)
    if ac.kind == "free":
        return 0.0
    nbytes = int(g.tensors[ac.ref].bytes)
    return float(device.h2d_time(nbytes) if ac.kind == "swap_in" else device.d2h_time(nbytes))


def keep_through_meetings(g: Any, events: list[Event], across_allocations: bool = False) -> list[Event]:
    """`events` (in time order) less each rerun that takes no time and starts at the instant where frees of all
    its op's outputs end, and less those frees: the copies are kept. The model is indifferent (such a rerun
    costs nothing), but the freed copy and the rerun's meet at one instant: an arena (one offset per tensor)
    cannot hold both. They meet on the nominal timeline (a free and the rerun before the clock moves) and,
    though copies lay between them there, on the simulator's overlapped one (`meetings_kept`). A kept copy has
    the rerun's values: reruns come before any in-place update of what they read (`Node.rerun_until`), and an
    op's outputs are never updated in place (only persistent tensors are, and no op makes one).
    A kept copy is live where the model counts it freed: only across frees and offloads, unless
    `across_allocations`. An event between them that allocates (a compute, zero-time ones included, or a
    swap_in) would find it there, and rule 5 counts what each allocation finds in the order the events run:
    the model did not (a free and the stages' zero-time runs at one instant, then the rerun; `meetings_kept`
    checks such a plan with the validator)."""
    tol = 1e-9 * max(1.0, max((e.end_s for e in events), default=0.0))   # the validator's eps on this timeline
    freed: dict[str, int] = {}       # tensor -> index of its free (zero-time, as every free)
    drop: set[int] = set()
    allocated = -1                   # index of the last event kept that allocates (a compute or a swap_in)
    for i, e in enumerate(events):
        if e.kind == "free":
            freed[e.tensor] = i
        elif e.kind == "compute":
            outs = g.ops[g.op_index[e.op]].outputs
            if e.recompute and e.end_s - e.start_s <= tol and outs and all(
                    t in freed and abs(events[freed[t]].end_s - e.start_s) <= tol and
                    (across_allocations or freed[t] > allocated) for t in outs):
                drop.add(i)
                drop.update(freed.pop(t) for t in outs)
                continue
            for t in outs:
                freed.pop(t, None)
            allocated = i
        else:
            freed.pop(e.tensor, None)
            if e.kind == "swap_in":
                allocated = i
    return [e for i, e in enumerate(events) if i not in drop]


def meetings_kept(g: Any, plan: Plan) -> Plan:
    """`plan` with `keep_through_meetings` applied, where it drops something and the result validates: what
    `milp.api.plan_milp` lays out (the byte-budget plan as decoded is valid as it is; only its arena layout,
    one offset per tensor, cannot hold two copies of one tensor at one instant). A copy may be kept across
    allocations here: the validator says whether it fits."""
    events = keep_through_meetings(g, plan.events, across_allocations=True)
    if len(events) == len(plan.events):
        return plan
    kept = dataclasses.replace(plan, events=events, metrics={
        **plan.metrics, "recomputes": sum(1 for e in events if e.kind == "compute" and e.recompute)})
    rep = validate(g, kept)
    if not rep.valid:
        return plan
    kept.metrics["peak_bytes"] = int(rep.peak_bytes)
    return kept


def _events(g: Any, device: Any, acts: list[Action]) -> list[Event]:
    """One event after another, starting at 0 (the nominal timeline, step 2)."""
    cursor = 0.0
    evs: list[Event] = []
    for ac in acts:
        d = _duration(g, device, ac)
        if ac.kind == "compute":
            op = g.ops[ac.ref]
            evs.append(Event("compute", cursor, cursor + d, op=op.id,
                             impl=op.implementations[ac.impl].name if op.impls else None, recompute=ac.recompute))
        else:
            evs.append(Event(ac.kind, cursor, cursor + d, tensor=g.tensors[ac.ref].id))
        cursor += d
    return evs


def resident_at_start(model: MilpModel, values: Values) -> list[int]:
    """Persistent tensors on the device at the start (and the end): the unmanaged ones, and the managed ones
    the solution keeps there."""
    pb = model.problem
    return sorted(set(pb.resident) | {j for j in pb.persistent if (0, j) in values.S})


def _plan(model: MilpModel, events: list[Event], planner: dict[str, Any], metrics: dict[str, Any],
          resident: list[int] | None = None) -> Plan:
    pb = model.problem
    g = pb.graph
    ideal = sum(e.end_s - e.start_s for e in events if e.kind == "compute" and not e.recompute)
    makespan = max((e.end_s for e in events), default=0.0)
    return Plan(graph=g.name, graph_sha256=g.sha256, device=pb.device, planner=dict(planner),
                schedule=[g.ops[int(o)].id for o in pb.order], allocation=UnconstrainedAllocation(),
                resident_at_start=[g.tensors[t].id for t in (sorted(pb.resident) if resident is None else resident)],
                events=events,
                makespan_s=makespan, metrics={"ideal_s": ideal, **metrics})


def retime(g: Any, plan: Plan) -> list[Event]:
    """`plan`'s events re-timed by the simulator with the three streams overlapped, on the edges
    `hybrid.swap.from_plan` recovers from its timeline (data, stream order, memory: each allocation waits for
    the release it reuses, so memory that fitted in `plan`'s order fits in the new times)."""
    aug = from_plan(g, plan)
    start, end = resimulate(aug)
    # from_plan keeps each (kind, tensor-or-op)'s events in plan order: match them back by occurrence.
    slots: dict[tuple[str, str], list[int]] = {}
    for i, e in enumerate(plan.events):
        slots.setdefault((e.kind, e.op or e.tensor or ""), []).append(i)
    seen: dict[tuple[str, str], int] = {}
    timed: list[tuple[float, int, Event]] = []
    for k in range(aug.n_nodes):
        kind = EVENT_KINDS[int(aug.kind[k])]
        ref = g.ops[int(aug.ref[k])].id if kind == "compute" else g.tensors[int(aug.ref[k])].id
        key = (kind, ref)
        idx = slots[key][seen.get(key, 0)]
        seen[key] = seen.get(key, 0) + 1
        e = plan.events[idx]
        s, f = float(start[k]), float(end[k])
        timed.append((s, k, Event(e.kind, s, f, op=e.op, tensor=e.tensor, impl=e.impl, recompute=e.recompute)))
    timed.sort(key=lambda x: (x[0], x[1]))
    return [e for _, _, e in timed]


def auto_plan(g: Any, plan: Plan) -> Plan:
    """"Auto" on any plan: each compute takes the fastest implementation whose workspace fits beside every device
    copy whose lifetime overlaps it in `plan` (a sum that bounds the live bytes at each instant), then the plan is
    re-timed (`retime`) and validated. Returns the new plan when it validates and is no slower, else `plan`.
    Shorter computes on the same edges cannot lengthen the longest path, so it is never slower in practice."""
    dev = plan.device
    budget = dev.usable_bytes
    idx = g.tensor_index
    spans: list[tuple[float, float, int]] = []   # device copies: [alloc, release), occupied bytes
    open_at: dict[int, float] = {idx[t]: 0.0 for t in plan.resident_at_start}
    for e in sorted(plan.events, key=lambda e: e.start_s):
        if e.kind == "compute":
            for t in g.op(e.op).outputs:
                open_at.setdefault(idx[t], e.start_s)
        elif e.kind == "swap_in":
            open_at.setdefault(idx[e.tensor], e.start_s)
        else:
            j = idx[e.tensor]
            end = e.end_s if e.kind == "swap_out" else e.start_s
            if j in open_at:
                spans.append((open_at.pop(j), end, dev.occupied(int(g.tensors[j].bytes))))
    spans += [(s0, float("inf"), dev.occupied(int(g.tensors[j].bytes))) for j, s0 in open_at.items()]
    events = []
    changed = False
    for e in plan.events:
        op = g.op(e.op) if e.kind == "compute" else None
        if op is None or len(op.implementations) < 2:
            events.append(e)
            continue
        live = sum(b for s0, s1, b in spans if s0 < e.end_s and s1 > e.start_s)
        fits = [im for im in op.implementations if live + im.workspace_bytes <= budget]
        best = min(fits, key=lambda im: im.time_s) if fits else None
        if best is None or best.name == (e.impl or op.implementations[op.default_impl].name) or \
                best.time_s >= op.implementations[[im.name for im in op.implementations].index(
                    e.impl or op.implementations[op.default_impl].name)].time_s:
            events.append(e)
            continue
        events.append(Event("compute", e.start_s, e.start_s + best.time_s, op=e.op, impl=best.name,
                            recompute=e.recompute))
        changed = True
    if not changed:
        return plan
    from dataclasses import replace as _replace

    try:
        timed = retime(g, _replace(plan, events=sorted(events, key=lambda e: e.start_s)))
    except HybridError:
        return plan
    ideal = sum(e.end_s - e.start_s for e in timed if e.kind == "compute" and not e.recompute)
    new = _replace(plan, events=timed, makespan_s=max((e.end_s for e in timed), default=0.0),
                   planner={**plan.planner, "auto_impls": True}, metrics={**plan.metrics, "ideal_s": ideal})
    if not validate(g, new).valid or new.makespan_s > plan.makespan_s:
        return plan
    return new


class DecodeError(HybridError):
    """A solution whose decoded plan the validator refuses: the model's accounting missed something (a bug in
    the model or here), not the user's doing, so a caller with a start plan writes that instead."""

    def __init__(self, which: str, rule: int, detail: str) -> None:
        super().__init__(f"milp: the {which} breaks rule {rule}: {detail}")
        self.which = which
        self.rule = rule
        self.detail = detail


def decode(model: MilpModel, values: Values, planner: dict[str, Any] | None = None, auto: bool = False,
           ilp_objective_s: float | None = None) -> Plan:
    """The simulated, validated plan of a solution (module docstring). Raises DecodeError naming the broken
    rule if the nominal or the overlapped plan does not validate (a bug in the model or here)."""
    pb = model.problem
    g = pb.graph
    resident = resident_at_start(model, values)
    nominal = _plan(model, keep_through_meetings(g, _events(g, pb.device, actions(model, values, auto))),
                    planner or {}, {}, resident)
    rep = validate(g, nominal)
    if not rep.valid:
        v = rep.violations[0]
        raise DecodeError("decoded schedule", v.rule, v.message)
    events = retime(g, nominal)
    compute_s = sum(e.end_s - e.start_s for e in events if e.kind == "compute")
    metrics: dict[str, Any] = {
        "compute_s": compute_s,
        "recomputes": sum(1 for e in events if e.kind == "compute" and e.recompute),
        "swaps_out": sum(1 for e in events if e.kind == "swap_out"),
        "swaps_in": sum(1 for e in events if e.kind == "swap_in"),
        "bytes_d2h": sum(int(g.tensor(e.tensor).bytes) for e in events if e.kind == "swap_out"),
        "bytes_h2d": sum(int(g.tensor(e.tensor).bytes) for e in events if e.kind == "swap_in"),
        "nominal_makespan_s": nominal.makespan_s,
    }
    if ilp_objective_s is not None:
        metrics["ilp_objective_s"] = ilp_objective_s
    plan = _plan(model, events, planner or {}, metrics, resident)
    rep = validate(g, plan)
    if not rep.valid:
        v = rep.violations[0]
        raise DecodeError("simulated plan", v.rule, v.message)
    plan.metrics["peak_bytes"] = int(rep.peak_bytes)
    plan.metrics["stall_s"] = stall_of(plan.makespan_s, compute_s)
    return plan


def auto_values(model: MilpModel, values: Values) -> Values:
    """The solution with the impls Auto picks, one per node (a node whose reruns Auto would give another impl
    keeps its leanest): a feasible point of the same stages with implementation choice, i.e. a MIP start
    for MO-SOS that is as fast as the -Auto plan. Auto picks only what fits the model's own memory."""
    runs: dict[tuple[int, int], int] = {}
    actions(model, values, auto=True, runs_out=runs)
    nodes = model.problem.nodes
    per_node: dict[int, set[int]] = {}
    for (t, q), v in runs.items():
        per_node.setdefault(q, set()).add(v)
    pick = {q: next(iter(vs)) if len(vs) == 1 else nodes[q].leanest for q, vs in per_node.items()}
    R = frozenset((t, q, pick[q]) for (t, q) in runs)
    return Values(R, values.S, values.O, values.P, values.Pb)


def impl_names(plan: Plan) -> dict[str, str]:
    """Op -> impl its first run takes (for reports)."""
    return {e.op: e.impl for e in plan.events if e.kind == "compute" and not e.recompute and e.impl}


__all__ = ["Action", "DecodeError", "actions", "auto_plan", "auto_values", "decode", "impl_names",
           "keep_through_meetings", "meetings_kept", "retime"]
