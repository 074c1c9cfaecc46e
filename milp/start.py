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
from milp.stages import StageProblem


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


def _node_of(pb: StageProblem) -> dict[str, tuple[int, int]]:
    """op id -> (node, position in the node)."""
    g = pb.graph
    return {g.ops[o].id: (q, k) for q, nd in enumerate(pb.nodes) for k, o in enumerate(nd.ops)}


def _first_ends(pb: StageProblem, plan: Plan) -> list[float]:
    """Per stage t, when node t's first run ends in `plan` (never before stage t-1's: the schedule is the order)."""
    node_of = _node_of(pb)
    first_end = [0.0] * pb.n
    for e in plan.events:
        if e.kind == "compute" and not e.recompute:
            q = node_of[e.op][0]  # type: ignore[index]
            first_end[q] = max(first_end[q], e.end_s)
    for q in range(1, pb.n):
        first_end[q] = max(first_end[q], first_end[q - 1])
    return first_end


def stage_times(pb: StageProblem, plan: Plan) -> list[float]:
    """Each stage's duration in `plan`'s timeline (its computes, recomputes and the stalls its copies cause):
    transfer windows timed on these hold the plan's own copies, where windows timed on compute alone (no
    stalls) make a link-bound plan's copies span more stages than they did, over its memory and link."""
    ends = _first_ends(pb, plan)
    return [e - (ends[t - 1] if t else 0.0) for t, e in enumerate(ends)]


def values_of_plan(model: MilpModel, plan: Plan) -> StartMap:
    """The model's variables that `plan` sets (module docstring). The plan must run the problem's order."""
    pb = model.problem
    g = pb.graph
    n = pb.n
    if [g.ops[int(o)].id for o in pb.order] != list(plan.schedule):
        raise HybridError("milp --start: the plan's schedule is not the model's stage order; build the problem "
                          "on the plan's schedule")
    node_of = _node_of(pb)
    computes = [e for e in plan.events if e.kind == "compute"]
    first_end = _first_ends(pb, plan)
    first_choice: dict[int, list[int]] = {q: [0] * len(nd.ops) for q, nd in enumerate(pb.nodes)}
    for e in computes:
        if not e.recompute:
            q, k = node_of[e.op]  # type: ignore[index]
            first_choice[q][k] = _impl_index(g.op(e.op), e.impl)

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
    reads: dict[int, list[int]] = {}
    for (t, j) in read_in:
        reads.setdefault(j, []).append(t)
    late: list[tuple[int, int, int]] = []   # (stage the copy began in, stage that waits for it, tensor)
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
                r = min((t for t in reads.get(j, ()) if t >= key[0]), default=None)
                if key in model.Pb and (r == key[0] or key not in model.P):
                    target, dst = model.Pb, Pb  # read in the stage it begins in: the stage waits for it
                elif r is not None and (key not in model.P or model.sf_pre[key] >= r) and (r, j) in model.Pb:
                    # the model's window lands after the first read (the start's stalls waited for it): the
                    # read's stage waits for it, issued at its start
                    late.append((key[0], r, j))
                    key, target, dst = (r, j), model.Pb, Pb
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
    for (x, r, j) in late:  # in the model it arrives at r, not before
        for t in range(x + 1, r):
            S.discard((t, j))
    # An offload never prefetched (the start recomputed the tensor instead): the model has none ([8]); the
    # tensor is dropped there instead.
    fetched = {j for (_, j) in P | Pb}
    idle = {(x, j) for (x, j) in O if j not in fetched and not pb.is_persistent(j)}
    O -= idle
    mapped -= len(idle)
    unmapped += len(idle)
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


# Constraint families by name prefix (milp.model's names), as a report calls them.
FAMILIES = (("budget_", "memory budget [18]"), ("mem_", "memory budget [18]"), ("d2h_", "link, offloads [10]-[13]"),
            ("h2d_", "link, prefetches [10]-[13]"), ("dep_", "inputs readable [4]"), ("keep_", "residency [5]"),
            ("rerun_fresh_", "rerun into a free slot"), ("offload_valid_", "offload of valid data [7]"),
            ("no_idle_", "no offload without a prefetch [8]"), ("offload_once", "offload at most once [6]"),
            ("first_", "first runs [2]"), ("impl_", "one implementation [3]"), ("periodic_", "periodic"),
            ("written_back_", "written back"), ("free_", "frees [16]-[17]"),
            ("host_", "prefetch after a current host copy [9]"), ("instant_", "memory budget [18]"))


def family(name: str) -> str:
    """A constraint's family (`FAMILIES`) from its name; copy-order constraints ('P_3_7_after') by suffix."""
    for prefix, what in FAMILIES:
        if name.startswith(prefix):
            return what
    if name.endswith("_after"):
        return "prefetch after a current host copy [9]"
    if name.endswith("_absent"):
        return "prefetch into an absent tensor [9]"
    return name


def start_violations(model: MilpModel, values: Values) -> dict[str, int]:
    """The model's constraints a start breaks, counted per family (empty: the solver can accept it);
    `broken_constraints` says which."""
    out: dict[str, int] = {}
    for c in broken_constraints(model, values):
        what = family(c.name)
        out[what] = out.get(what, 0) + 1
    return out


def repair_start(model: MilpModel, values: Values) -> dict[str, float]:
    """`binary_start` less every variable of a constraint the start breaks: a sparse start the solver completes
    (HiGHS fixes the values given and searches the rest as a sub-MIP), so a start a few copies off the model's
    windows can still become its first incumbent, where the whole start would be dropped."""
    start = binary_start(model, values)
    for c in broken_constraints(model, values):
        for v in c.keys():
            start.pop(v.name, None)
    return start


def broken_constraints(model: MilpModel, values: Values) -> list:
    """The model's constraints (pulp.LpConstraint) a start breaks.

    The binaries are the start's (`binary_start`); each host-copy count H follows from its chain, each free F
    takes its largest value allowed (frees only lower memory) and each U from its memory equation, stage by stage: so a memory budget counted
    here is broken by every completion of the start. Why a solver drops a start plan (e.g. Belady's copies
    queue beyond the link shares, or its memory fits only at a finer grain than the model's stages)."""
    import pulp

    ones = binary_start(model, values)
    val: dict[str, float] = dict(ones)
    cons = {c.name: c for c in model.lp.constraints()}
    f_max: dict[str, float] = {}
    for name, c in cons.items():   # free_*: F <= expression in binaries
        if name.startswith("free_"):
            f = next(v for v in c.keys() if v.name.startswith("F_"))
            rest = sum(a * val.get(v.name, 0.0) for v, a in c.items() if v is not f) + c.constant
            f_max[f.name] = min(f_max.get(f.name, 1.0), max(0.0, -rest / c[f]))
    val.update(f_max)
    for name, c in cons.items():   # instant_t_q: G >= what copies that live no time add there (G as small)
        if name.startswith("instant_"):
            g = next(v for v in c.keys() if v.name == "G_" + name[8:])
            rest = sum(a * val.get(v.name, 0.0) for v, a in c.items() if v is not g) + c.constant
            val[g.name] = max(0.0, -rest / c[g])
    for name, c in cons.items():   # host_x_j: H == previous H + landed offloads, in the order they were made
        if name.startswith("host_"):
            h = next(v for v in c.keys() if v.name == "H_" + name[5:])
            rest = sum(a * val.get(v.name, 0.0) for v, a in c.items() if v is not h) + c.constant
            val[h.name] = -rest / c[h]
    for name, c in cons.items():   # mem_t_q: U == previous U - frees + outputs, in the order they were made
        if name.startswith("mem_"):
            u = next(v for v in c.keys() if v.name == "U_" + name[4:])
            rest = sum(a * val.get(v.name, 0.0) for v, a in c.items() if v is not u) + c.constant
            val[u.name] = -rest / c[u]
    out = []
    for name, c in cons.items():
        x = sum(a * val.get(v.name, 0.0) for v, a in c.items()) + c.constant
        broken = (c.sense == pulp.LpConstraintEQ and abs(x) > 1e-6) or \
            (c.sense == pulp.LpConstraintLE and x > 1e-6) or (c.sense == pulp.LpConstraintGE and x < -1e-6)
        if broken or (name.startswith("mem_") and val["U_" + name[4:]] < -1e-6):
            out.append(c)
    return out


__all__ = ["StartMap", "binary_start", "broken_constraints", "family", "repair_start", "start_violations",
           "values_of_plan"]
