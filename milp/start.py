"""A plan as a MIP start: the Belady plan (or any plan on the same order) read back into the model's variables.

Stage t of the model ends when node t's first run ends (`first_end[t]`); every event of the plan is put in the
stage its instant falls in:
- a compute: R[t, q, v], v the node implementation whose per-op choice the plan's impls make (first runs give
  stage q; a recompute of one op of a segment counts as a rerun of the whole segment);
- S[t, j]: j has a complete device copy at the start of stage t (the end of stage t-1's last first run) and no
  copy out of it has begun; S[0, j] and S[n, j] of a managed persistent tensor: it is resident at the start;
- O[x, j]: a swap_out beginning in stage x (the model issues it at x's end: later, never earlier);
- P[x, j]: a swap_in beginning in stage x (the model issues it at x's start: earlier, never later).
Events the model has no variable for (a copy whose stage window the model does not offer, a tensor it does not
manage) are counted, not mapped. The start goes to the solver as values for every binary variable (the
continuous ones it computes); a start the model's windows or memory accounting reject is dropped by the solver,
and `plan_milp` keeps the start plan whenever it is faster than the MILP's (never worse).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from hybrid.errors import HybridError
from hybrid.plan import Plan
from milp.model import MilpModel, Values


@dataclass(frozen=True)
class StartMap:
    values: Values
    unmapped: int       # plan events (computes, copies) the model has no variable for
    mapped: int


def _impl_index(op, name: str | None) -> int:  # noqa: ANN001 - hybrid.graph.Op
    if name is None or not op.impls:
        return op.default_impl
    for i, im in enumerate(op.implementations):
        if im.name == name:
            return i
    raise HybridError(f"milp --start: op {op.id!r} has no implementation {name!r}")


def values_of_plan(model: MilpModel, plan: Plan) -> StartMap:
    """The model's variables that `plan` sets (module docstring). The plan must run the problem's order."""
    pb = model.problem
    g = pb.graph
    n = pb.n
    if [g.ops[int(o)].id for o in pb.order] != list(plan.schedule):
        raise HybridError("milp --start: the plan's schedule is not the model's stage order; build the problem "
                          "on the plan's schedule")
    node_of: dict[str, tuple[int, int]] = {}
    for q, nd in enumerate(pb.nodes):
        for k, o in enumerate(nd.ops):
            node_of[g.ops[o].id] = (q, k)
    computes = [e for e in plan.events if e.kind == "compute"]
    first_end = [0.0] * n
    first_choice: dict[int, list[int]] = {q: [0] * len(nd.ops) for q, nd in enumerate(pb.nodes)}
    for e in computes:
        if not e.recompute:
            q, k = node_of[e.op]  # type: ignore[index]
            first_end[q] = max(first_end[q], e.end_s)
            first_choice[q][k] = _impl_index(g.op(e.op), e.impl)
    for q in range(1, n):  # a node's first run ends after its predecessor's (the schedule is the order)
        first_end[q] = max(first_end[q], first_end[q - 1])

    def node_impl(q: int, choice: list[int]) -> int:
        nd = pb.nodes[q]
        exact = [v for v, im in enumerate(nd.impls) if list(im.choice) == choice]
        v = exact[0] if exact else max(range(len(nd.impls)),
                                       key=lambda w: sum(a == b for a, b in zip(nd.impls[w].choice, choice)))
        return v if v in model.allowed[q] else model.allowed[q][0]

    R: set[tuple[int, int, int]] = set()
    mapped = unmapped = 0
    for q in range(n):
        R.add((q, q, node_impl(q, first_choice[q])))
    for e in computes:
        if e.recompute:
            q, _ = node_of[e.op]  # type: ignore[index]
            t = min(n - 1, bisect_right(first_end, e.start_s))
            key = (t, q, node_impl(q, first_choice[q]))
            if key in model.R:
                R.add(key)
                mapped += 1
            else:
                unmapped += 1
    mapped += n
    managed = set(pb.managed)
    idx = g.tensor_index
    O: set[tuple[int, int]] = set()
    P: set[tuple[int, int]] = set()
    Pb: set[tuple[int, int]] = set()
    read_in: set[tuple[int, int]] = set()   # (stage, tensor) read by a compute in that stage
    for e in computes:
        t = min(n - 1, bisect_right(first_end, e.start_s)) if e.recompute else node_of[e.op][0]  # type: ignore[index]
        for x in g.op(e.op).inputs:  # type: ignore[arg-type]
            read_in.add((t, idx[x]))
    copies: dict[int, list[tuple[str, float, float]]] = {}
    for e in plan.events:
        if e.kind in ("swap_in", "swap_out"):
            j = idx[e.tensor]  # type: ignore[index]
            copies.setdefault(j, []).append((e.kind, e.start_s, e.end_s))
            if j not in managed:
                unmapped += 1
                continue
            if e.kind == "swap_out":
                key = (min(n - 1, bisect_left(first_end, e.start_s - 1e-12)), j)
                target = model.O
                dst = O
            else:
                key = (min(n - 1, bisect_right(first_end, e.start_s + 1e-12)), j)
                target, dst = model.P, P
                if key in model.Pb and (key in read_in or key not in model.P):
                    target, dst = model.Pb, Pb  # read in the stage it begins in: the stage waits for it
            if key in target:
                dst.add(key)
                mapped += 1
            else:
                unmapped += 1
    # S: a complete device copy at the start of stage t, no copy out of it begun.
    resident = {idx[t] for t in plan.resident_at_start}
    born: dict[int, list[float]] = {}
    gone: dict[int, list[float]] = {}
    for e in plan.events:
        if e.kind == "compute":
            for t in g.op(e.op).outputs:  # type: ignore[arg-type]
                born.setdefault(idx[t], []).append(e.end_s)
        elif e.kind == "swap_in":
            born.setdefault(idx[e.tensor], []).append(e.end_s)  # type: ignore[index]
        elif e.kind == "swap_out":
            gone.setdefault(idx[e.tensor], []).append(e.start_s)  # type: ignore[index]
        elif e.kind == "free":
            gone.setdefault(idx[e.tensor], []).append(e.start_s)  # type: ignore[index]

    def present(j: int, at: float) -> bool:
        last_born = max([b for b in born.get(j, []) if b <= at + 1e-12], default=None)
        if last_born is None and j not in resident:
            return False
        since = last_born if last_born is not None else -1.0
        return not any(since - 1e-12 <= x <= at + 1e-12 for x in gone.get(j, []))

    S: set[tuple[int, int]] = set()
    for (t, j) in model.S:
        if t == 0 or t == n:
            if j in resident:
                S.add((t, j))
        elif present(j, first_end[t - 1]):
            S.add((t, j))
    for (t, j) in Pb:
        S.discard((t, j))  # readable through the blocking copy, not kept from before
    return StartMap(Values(frozenset(R), frozenset(S), frozenset(O), frozenset(P), frozenset(Pb)), unmapped,
                    mapped)


def binary_start(model: MilpModel, values: Values) -> dict[str, float]:
    """Every binary variable's value in `values` (1 for its ones, 0 else): a MIP start the solver completes with
    the continuous variables."""
    out: dict[str, float] = {}
    for d, ones in ((model.R, values.R), (model.S, values.S), (model.O, values.O), (model.P, values.P),
                    (model.Pb, values.Pb)):
        for k, v in d.items():
            out[v.name] = 1.0 if k in ones else 0.0
    chosen = {(q, v) for (t, q, v) in values.R if t == q}
    for (q, v), var in model.I.items():
        out[var.name] = 1.0 if (q, v) in chosen else 0.0
    return out


__all__ = ["StartMap", "binary_start", "values_of_plan"]
