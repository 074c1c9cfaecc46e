"""The MO-SOS integer program (the MO-SOS paper, §2.3-2.4) in PuLP, and the baselines from the same code.

Checkmate's stages (stage t computes node t, and may rerun earlier nodes) with R per implementation,
S (kept on the device), offload O and prefetch P starts, Free and memory U that carries the chosen
implementation's workspace. Each constraint is stated, with where it departs from the paper, in
docs/milp.md; the comments below name them (paper's numbers in brackets). Switches:
- `offload=False`: recompute only (Checkmate);
- `impl_choice=False`: every node runs its least-workspace impl in the model (a planner that does not know
  about workspaces), and `decode` then picks impls "Auto" (fastest that fits the memory left).
Units inside the model: milliseconds and MiB (keeps the coefficients near 1 for the solver).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from itertools import accumulate

import pulp

from hybrid.errors import HybridError
from milp.stages import START, StageProblem

MS = 1e3          # seconds -> model time unit
MIB = float(1 << 20)  # bytes -> model memory unit
COPY_WEIGHT = 1e-3    # objective weight of a copy's link time (a tie-break; reported objectives leave it out)
FEASIBILITY_TOL = 1e-6  # how far HiGHS (mip_feasibility_tolerance) and CBC let a row or a binary miss, in model units


@dataclass(frozen=True)
class ModelOptions:
    offload: bool = True       # O/P variables (False: Checkmate, recompute only)
    impl_choice: bool = True   # R per implementation (False: the leanest impl; Auto picks after decoding)
    recompute: bool = True     # reruns allowed (False: offload only)
    link: str = "bandwidth"    # copies per stage: "bandwidth" (their link shares fit) or "paper" (one per direction)
    stalls: bool = True        # blocking prefetches: a stage may wait for a copy it reads (False: the paper's
    #                            windows only, no stage ever waits)
    persistent: bool = True    # parameters, optimizer state, inputs managed too (False: the paper's
    #                            activations only, persistent tensors resident throughout); needs offload
    start_windows: bool = True  # with a start plan, transfer windows timed on its stage times (stalls
    #                             included; milp.start.stage_times) where longer than compute (False: compute only)

    @property
    def manages_persistent(self) -> bool:
        return self.persistent and self.offload

    def describe(self) -> dict:
        return {"offload": self.offload, "impl_choice": self.impl_choice, "recompute": self.recompute,
                "persistent": self.manages_persistent, "link": self.link, "stalls": self.stalls,
                "start_windows": self.start_windows}


@dataclass
class MilpModel:
    problem: StageProblem
    options: ModelOptions
    lp: pulp.LpProblem
    R: dict[tuple[int, int, int], pulp.LpVariable]     # (stage, node, impl)
    S: dict[tuple[int, int], pulp.LpVariable]          # (stage, tensor)
    O: dict[tuple[int, int], pulp.LpVariable]          # (stage whose end issues it, tensor)
    P: dict[tuple[int, int], pulp.LpVariable]          # (stage whose start issues it, tensor)
    I: dict[tuple[int, int], pulp.LpVariable]          # (node, impl): the impl a node runs in every stage
    allowed: list[tuple[int, ...]]                     # impls the model may use per node
    tau: list[float]                                   # stage durations (s) the transfer windows assume
    sf_off: dict[tuple[int, int], int]                 # (x, tensor) -> last stage an offload issued at x's end is in flight
    sf_pre: dict[tuple[int, int], int]                 # (x, tensor) -> last stage a prefetch issued at x's start is in flight
    n_binaries: int = 0
    stats: dict = field(default_factory=dict)
    Pb: dict[tuple[int, int], pulp.LpVariable] = field(default_factory=dict)  # blocking prefetch: stage x waits

    def wait_time(self, values: "Values") -> float:
        """Seconds the stages wait for blocking prefetches (serial on the link before the stage's computes)."""
        g = self.problem.graph
        return sum(self.problem.device.h2d_time(int(g.tensors[j].bytes)) for (x, j) in values.Pb)

    def objective_time(self, values: "Values") -> float:
        """Compute + recompute + waits: the objective without its tie-break."""
        return self.compute_time(values) + self.wait_time(values)

    @property
    def n_variables(self) -> int:
        return self.lp.numVariables()

    @property
    def n_constraints(self) -> int:
        return self.lp.numConstraints()

    def compute_time(self, values: "Values") -> float:
        """Seconds of compute the solution runs (first runs and reruns): the paper's objective."""
        nodes = self.problem.nodes
        return sum(nodes[q].impls[v].time_s for (t, q, v) in values.R)


@dataclass(frozen=True)
class Values:
    """A 0-1 solution read back from the solver (only the ones)."""

    R: frozenset[tuple[int, int, int]]
    S: frozenset[tuple[int, int]]
    O: frozenset[tuple[int, int]]
    P: frozenset[tuple[int, int]]
    Pb: frozenset[tuple[int, int]] = frozenset()


def windows(tau: list[float], n: int, d: float, issue_at_end: bool) -> list[int | None]:
    """Per issue stage x: the last stage the copy is in flight (sf in the paper), None if it never ends.

    An offload is issued at the end of stage x and runs during x+1.. ; a prefetch at the start of x and runs
    during x.. . It ends in the first stage by whose end the summed stage times reach its duration d.
    """
    pre = [0.0, *accumulate(tau)]
    out: list[int | None] = []
    j = 0
    for x in range(n):
        first = x + 1 if issue_at_end else x
        j = max(j, first)
        while j < n and pre[j + 1] - pre[first] < d:
            j += 1
        out.append(j if j < n else None)
    return out


def new_var(lp: pulp.LpProblem, name: str, lowBound: float | None = None, upBound: float | None = None,
            cat: str = "Continuous") -> pulp.LpVariable:
    """A variable owned by `lp`: `LpProblem.add_variable` where PuLP has it (3.3 on; constructing
    `LpVariable` directly is deprecated there and warned once per variable), else the constructor (PuLP 2.8)."""
    add = getattr(lp, "add_variable", None)
    return add(name, lowBound, upBound, cat=cat) if add is not None else pulp.LpVariable(name, lowBound, upBound, cat)


def _persistent_copies(pb: StageProblem, j: int, n: int, wo: list[int | None], wp: list[int | None],
                       lp: pulp.LpProblem, O: dict, P: dict, sf_off: dict, sf_pre: dict) -> None:
    """Copy variables of a managed persistent tensor. Its host copy is current from the start until its first
    in-place update if it does not start on the device (the validator holds a resident tensor's device copy
    the only current one), and after an offload has landed until the next update; between its first and last
    update it has none, so no copies there. An offload may run past the last stage (the tensor ends on the
    host); a prefetch must land by the last stage's end (`prefetch_after` ties each to a current host copy)."""
    ups = pb.updates(j)
    for x in range(n):
        if ups and min(ups) <= x < max(ups):
            continue
        O[x, j] = new_var(lp, f"O_{x}_{j}", cat="Binary")
        sf_off[x, j] = n if wo[x] is None else int(wo[x])  # type: ignore[arg-type]
    for x in range(n):
        if wp[x] is None or (ups and min(ups) < x <= max(ups)):
            continue
        P[x, j] = new_var(lp, f"P_{x}_{j}", cat="Binary")
        sf_pre[x, j] = int(wp[x])  # type: ignore[arg-type]


class BuildTimeError(HybridError):
    """Building the model ran past its deadline (a caller's time limit): there is no model to solve."""


def fewer_stages(n: int) -> str:
    """The advice for a model too large for the time left: fewer --stages, with what that costs (a coarser model
    can be infeasible at a memory where the full one, or Belady's plan, is not: a segment holds its boundary
    tensors throughout)."""
    return (f"fewer --stages (e.g. --stages {max(1, n // 4)}; a coarser model builds faster but can be infeasible "
            "where the full one is not)") if n else "fewer --stages"


def build_model(problem: StageProblem, options: ModelOptions = ModelOptions(), name: str = "mosos",
                deadline: float | None = None, stage_times: list[float] | None = None) -> MilpModel:
    """`deadline` (time.monotonic()): building past it raises a one-line HybridError (a caller's time limit).
    `stage_times` (s, per stage; e.g. a start plan's, `milp.start.stage_times`): transfer windows are timed on
    them where they are longer than the stage's fastest compute (a stage the start stalled in)."""
    pb = problem
    n = pb.n

    def over() -> None:
        if deadline is not None and time.monotonic() > deadline:
            raise BuildTimeError(f"milp: building the model ({n} stages) did not finish within the time limit; give a "
                                 f"longer --time-limit, or {fewer_stages(n)}")
    nodes = pb.nodes
    dev = pb.device
    lp = pulp.LpProblem(name, pulp.LpMinimize)
    allowed = [tuple(range(len(nd.impls))) if options.impl_choice else (nd.leanest,) for nd in nodes]
    # Transfer windows assume the fastest implementation, as the paper says (stages can only be longer).
    tau = [min(nodes[q].impls[v].time_s for v in allowed[q]) for q in range(n)]
    if stage_times is not None:
        if len(stage_times) != n:
            raise HybridError(f"milp: {len(stage_times)} stage times for {n} stages")
        tau = [max(a, float(b)) for a, b in zip(tau, stage_times)]

    # ---- variables ---------------------------------------------------------------------------------
    R: dict[tuple[int, int, int], pulp.LpVariable] = {}
    rstages: list[list[int]] = []
    for q, nd in enumerate(nodes):
        over()   # the rerun variables alone take seconds on 2,872 stages (rnn-8-8k: 6 s, 4 s past a 5 s limit)
        st = [q]
        if options.recompute and nd.rerunnable and nd.outputs:
            last = min(max(pb.need[j] for j in nd.outputs), nd.rerun_until)
            st += list(range(q + 1, last + 1))
        rstages.append(st)
        for t in st:
            for v in allowed[q]:
                R[t, q, v] = new_var(lp, f"R_{t}_{q}_{v}", cat="Binary")
    at_stage: list[list[int]] = [[] for _ in range(n)]   # nodes that may run in stage t, ascending
    for q in range(n):
        over()
        for t in rstages[q]:
            at_stage[t].append(q)
    for lst in at_stage:
        lst.sort()
    I: dict[tuple[int, int], pulp.LpVariable] = {}
    for q in range(n):
        over()
        if len(allowed[q]) > 1:
            for v in allowed[q]:
                I[q, v] = new_var(lp, f"I_{q}_{v}", cat="Binary")
    S = {(t, j): new_var(lp, f"S_{t}_{j}", cat="Binary")
         for j in pb.managed for t in range(pb.producer[j] + 1, pb.need[j] + 1)}
    O: dict[tuple[int, int], pulp.LpVariable] = {}
    P: dict[tuple[int, int], pulp.LpVariable] = {}
    sf_off: dict[tuple[int, int], int] = {}
    sf_pre: dict[tuple[int, int], int] = {}
    if options.offload:
        for j in sorted(pb.offloadable):
            over()
            p, need = pb.producer[j], pb.need[j]
            nbytes = int(pb.graph.tensors[j].bytes)
            wo = windows(tau, n, dev.d2h_time(nbytes), True)
            wp = windows(tau, n, dev.h2d_time(nbytes), False)
            if pb.is_persistent(j):
                _persistent_copies(pb, j, n, wo, wp, lp, O, P, sf_off, sf_pre)
                continue
            pre_ok = [x for x in range(p + 1, need) if wp[x] is not None and wp[x] <= need - 1]
            if not pre_ok:
                continue
            for x in range(p, need):
                end = wo[x]
                if end is not None and any(y > end for y in pre_ok):
                    O[x, j] = new_var(lp, f"O_{x}_{j}", cat="Binary")
                    sf_off[x, j] = end
            if not any(k[1] == j for k in sf_off):
                continue
            first_done = min(e for (x, jj), e in sf_off.items() if jj == j)
            for x in pre_ok:
                if x > first_done:
                    P[x, j] = new_var(lp, f"P_{x}_{j}", cat="Binary")
                    sf_pre[x, j] = int(wp[x])  # type: ignore[arg-type]

    # Blocking prefetches (options.stalls): issued at stage x's start, x's computes wait until it lands, so the
    # tensor is readable in x itself; the wait (its link time) is paid in the objective. Where a prefetch may
    # be issued: after an offload has landed (or from the start's host copy of a persistent tensor).
    Pb: dict[tuple[int, int], pulp.LpVariable] = {}
    if options.offload and options.stalls:
        for j in sorted(pb.offloadable):
            over()
            p, need = pb.producer[j], pb.need[j]
            ups = pb.updates(j)
            if pb.is_persistent(j):
                xs = [x for x in range(n) if not (ups and min(ups) < x <= max(ups))]
            else:
                done = [e for (x, jj), e in sf_off.items() if jj == j]
                xs = [x for x in range(p + 1, need + 1) if done and x > min(done)] if done else []
            read_at = {t for r in pb.readers.get(j, ()) for t in rstages[r]}   # first runs and reruns
            for x in xs:
                if pb.is_persistent(j) and x not in read_at:
                    continue  # a persistent tensor is waited for only where it is read
                Pb[x, j] = new_var(lp, f"Pb_{x}_{j}", cat="Binary")

    def pb_(t: int, j: int) -> pulp.LpVariable | int:
        return Pb.get((t, j), 0)

    def rsum(t: int, q: int) -> pulp.LpAffineExpression | int:
        if q == START:
            return 0  # a persistent tensor's producer: nothing runs
        return pulp.lpSum(R[t, q, v] for v in allowed[q] if (t, q, v) in R)

    def s(t: int, j: int) -> pulp.LpAffineExpression | int:
        return S.get((t, j), 0)

    def has_r(t: int, q: int) -> bool:
        return (t, q, allowed[q][0]) in R

    o_by_j: dict[int, list[int]] = {}
    for (x, j) in O:
        o_by_j.setdefault(j, []).append(x)
    p_by_j: dict[int, list[int]] = {}
    for (x, j) in P:
        p_by_j.setdefault(j, []).append(x)
    pdone: dict[tuple[int, int], list[pulp.LpVariable]] = {}
    for (x, j), e in sf_pre.items():
        pdone.setdefault((e, j), []).append(P[x, j])
    inflight_o: dict[int, list[tuple[int, int]]] = {}   # stage -> offloads in flight during it
    for (x, j), e in sf_off.items():
        for t in range(x + 1, min(e, n - 1) + 1):  # e == n: a persistent tensor's copy runs past the last stage
            inflight_o.setdefault(t, []).append((x, j))
    inflight_p: dict[int, list[tuple[int, int]]] = {}
    for (x, j), e in sf_pre.items():
        for t in range(x, e + 1):
            inflight_p.setdefault(t, []).append((x, j))

    # ---- objective [1]: compute + recompute time of the chosen implementations ----------------------
    compute = pulp.lpSum(nodes[q].impls[v].time_s * MS * var for (t, q, v), var in R.items())
    total = sum(nd.impls[a].time_s for nd, a in zip(nodes, (al[0] for al in allowed))) * MS
    # Tie-break: no copy that buys nothing. Each copy costs 10^-3 of its link time (above HiGHS's absolute gap,
    # so an idle copy of a persistent tensor is not left in: it can stall the simulated plan) plus a floor.
    eps = 1e-6 * max(total, 1e-9) / (len(O) + len(P) + 1)
    nb = {j: int(pb.graph.tensors[j].bytes) for j in {k[1] for k in list(O) + list(P)}}
    waits = pulp.lpSum(dev.h2d_time(int(pb.graph.tensors[j].bytes)) * MS * v for (x, j), v in Pb.items())
    lp += compute + waits + pulp.lpSum((eps + COPY_WEIGHT * dev.d2h_time(nb[j]) * MS) * v for (x, j), v in O.items()) + \
        pulp.lpSum((eps + COPY_WEIGHT * dev.h2d_time(nb[j]) * MS) * v for (x, j), v in P.items())

    # ---- [2] every node computed in its own stage; [3] one implementation per node --------------------
    for q in range(n):
        over()
        lp += rsum(q, q) == 1, f"first_{q}"
        if len(allowed[q]) > 1:
            lp += pulp.lpSum(I[q, v] for v in allowed[q]) == 1, f"impl_{q}"
            for t in rstages[q]:
                for v in allowed[q]:
                    lp += R[t, q, v] <= I[q, v], f"impl_{t}_{q}_{v}"
    # ---- [4] what a node reads is on the device: kept, or computed earlier in the same stage ---------
    for t in range(n):
        over()
        for q in at_stage[t]:
            for j in nodes[q].inputs:
                lp += rsum(t, q) <= s(t, j) + rsum(t, pb.producer[j]) + pb_(t, j), f"dep_{t}_{q}_{j}"
    # ---- [5] a tensor is kept into stage t+1 only if it was there, (re)computed, or a prefetch landed;
    #          an offload issued at the end of stage t takes the device copy with it ------------------
    for (t, j), var in S.items():
        p = pb.producer[j]
        if t == 0:
            continue  # a persistent tensor on the device at the start: the plan's choice (periodic below)
        prev = s(t - 1, j) + rsum(t - 1, p) if t - 1 > p else rsum(t - 1, p)
        rhs = prev + pulp.lpSum(pdone.get((t - 1, j), [])) + pb_(t - 1, j) - (O[t - 1, j] if (t - 1, j) in O else 0)
        lp += var <= rhs, f"keep_{t}_{j}"
    # A rerun allocates all its outputs: none may be on the device or in flight then.
    for q in range(n):
        over()
        for t in rstages[q][1:]:
            for j in nodes[q].outputs:
                busy = [O[k] for k in inflight_o.get(t, []) if k[1] == j] + \
                       [P[k] for k in inflight_p.get(t, []) if k[1] == j] + ([Pb[t, j]] if (t, j) in Pb else [])
                if (t, j) in S or busy:
                    lp += rsum(t, q) + s(t, j) + pulp.lpSum(busy) <= 1, f"rerun_fresh_{t}_{q}_{j}"
    # ---- [6] offload at most once; [7] only valid data; [8] no offload without a prefetch;
    #      [9] prefetch after the offload has landed, into a tensor not on the device ---------------------
    pb_by_j: dict[int, list[pulp.LpVariable]] = {}   # blocking prefetches by tensor, in Pb's order
    for (x, j), v in Pb.items():
        pb_by_j.setdefault(j, []).append(v)
    for j, xs in o_by_j.items():
        over()
        p = pb.producer[j]
        ups = pb.updates(j)
        if ups:  # a persistent tensor: at most once before its first update and once after its last
            lp += pulp.lpSum(O[x, j] for x in xs if x < min(ups)) <= 1, f"offload_once_before_{j}"
            lp += pulp.lpSum(O[x, j] for x in xs if x >= max(ups)) <= 1, f"offload_once_{j}"
        else:
            lp += pulp.lpSum(O[x, j] for x in xs) <= 1, f"offload_once_{j}"
        if not pb.is_persistent(j):  # a persistent tensor may leave for good (off the device at the end)
            lp += pulp.lpSum(O[x, j] for x in xs) <= pulp.lpSum(P[x, j] for x in p_by_j.get(j, [])) + \
                pulp.lpSum(pb_by_j.get(j, [])), f"no_idle_{j}"
        for x in xs:
            lp += O[x, j] <= s(x, j) + rsum(x, p), f"offload_valid_{x}_{j}"
    # A landed copy is current unless an update came after it (an update at stage u runs during u). The landed
    # offloads of j before stage x, H[x, j], grow with x between updates: a chain H[x] = H[x'] + (offloads landing
    # in [x', x)), not the whole sum in every prefetch's row (that sum made 60% of the LM model's nonzeros).
    host: dict[tuple[int, int], pulp.LpAffineExpression | pulp.LpVariable | int] = {}
    fetch_at: dict[int, list[int]] = {}
    for (x, j) in list(P) + list(Pb):
        fetch_at.setdefault(j, []).append(x)
    for j, xs in fetch_at.items():
        over()
        ups = pb.updates(j)
        prev: tuple[int, object, set] | None = None   # (epoch, H, offloads counted)
        for x in sorted(set(xs)):
            epoch = max((u for u in ups if u < x), default=-1)
            counted = {y for y in o_by_j.get(j, []) if sf_off[y, j] < x and y >= epoch}
            if prev is not None and prev[0] == epoch and prev[2] <= counted:
                new = counted - prev[2]
                expr = prev[1] + pulp.lpSum(O[y, j] for y in sorted(new)) if new else prev[1]
            else:
                new = counted
                expr = pulp.lpSum(O[y, j] for y in sorted(counted))
            if new and len(counted) > 2:   # a variable, so later prefetches' rows stay short
                h = new_var(lp, f"H_{x}_{j}", lowBound=0)
                lp += h == expr, f"host_{x}_{j}"
                expr = h
            host[x, j] = expr
            prev = (epoch, expr, counted)
    for k, ((x, j), var) in enumerate(list(P.items()) + list(Pb.items())):
        if k % 512 == 0:
            over()
        ups = pb.updates(j)
        if pb.is_persistent(j) and not any(u < x for u in ups):
            # not yet updated: the start's host copy is current unless the tensor started on the device
            lp += var <= 1 - S[0, j] + host[x, j], f"{var.name}_after"
        else:
            lp += var <= host[x, j], f"{var.name}_after"
        if (x, j) in S:
            lp += var + S[x, j] <= 1, f"{var.name}_absent"
    # A tensor is fetched once at a time: two prefetches of it in flight in one stage, or one in flight and a
    # blocking one there, would each allocate a device copy of it (rule 2 allows one).
    fetching: dict[tuple[int, int], list[pulp.LpVariable]] = {}
    for t, keys in inflight_p.items():
        for k in keys:
            fetching.setdefault((t, k[1]), []).append(P[k])
    for (t, j), var in Pb.items():
        fetching.setdefault((t, j), []).append(var)
    for (t, j), vs in sorted(fetching.items()):
        if len(vs) > 1:
            lp += pulp.lpSum(vs) <= 1, f"fetch_once_{t}_{j}"
    # ---- persistent tensors: periodic (on the device at the end iff at the start), and one updated in place
    #      that ends off the device has been copied back after its last update ----------------------------
    for j in sorted(pb.persistent):
        lp += S[n, j] == S[0, j], f"periodic_{j}"
        if pb.updates(j):
            lp += S[n, j] + pulp.lpSum(O[x, j] for x in o_by_j.get(j, []) if x >= max(pb.updates(j))) >= 1, \
                f"written_back_{j}"
    # ---- [10]-[13] copies per stage: the paper's one in flight per direction, or (link="bandwidth") each
    #      copy takes its share of the link in every stage of its window (its time over the window's time),
    #      and the shares in a stage add up to at most the whole link ------------------------------------
    pre_tau = [0.0, *accumulate(tau)]

    def share(x: int, e: int, d: float, first: int) -> float:
        w = pre_tau[min(e, n - 1) + 1] - pre_tau[first]
        return 1.0 if w <= 0 else min(1.0, d / w)

    for t in range(n):
        over()
        for name, fly, var, issue_at_end in (("d2h", inflight_o, O, True), ("h2d", inflight_p, P, False)):
            keys = fly.get(t, [])
            if len(keys) <= 1:
                continue
            if options.link == "paper":
                lp += pulp.lpSum(var[k] for k in keys) <= 1, f"{name}_{t}"
                continue
            terms = []
            for (x, j) in keys:
                nbytes = int(pb.graph.tensors[j].bytes)
                d = dev.d2h_time(nbytes) if issue_at_end else dev.h2d_time(nbytes)
                e = (sf_off if issue_at_end else sf_pre)[x, j]
                terms.append(share(x, e, d, x + 1 if issue_at_end else x) * var[x, j])
            lp += pulp.lpSum(terms) <= 1, f"{name}_{t}"

    # ---- [14]-[18] memory: U at each node of each stage, with the chosen impl's workspace ------------
    #      A run that takes no time (empty_like) leaves the clock where it was. Every run has its row, read in
    #      order as rule 5 reads the events at an instant (`hybrid.plan.run_order.event_order`): a zero-time run
    #      holds its inputs until its outputs are allocated, and what is released after it at its instant (an
    #      input it reads last, what a later zero-time run there reads) is still there. (Rows for zero-time runs
    #      were once left out, the instant counted at the next timed run's row only: that counted those releases,
    #      and a stage boundary's drops after a blocking prefetch, as gone, and such optima decoded to plans that
    #      broke rule 5.) A drop at the next stage's start that nothing between touches is handed back before the
    #      run (`_releases_first`) but still counted in its row: a copy kept into a stage that does not read it,
    #      which the solver can drop a stage earlier instead.
    #      On top, what a zero-time run allocates, and a copy that lives no time, stays charged (G, a "ghost",
    #      when freed) up to the row of the next run that takes time, those rows being the instant's
    #      (`instant_nodes`), as if the instant released everything first and then allocated everything. The
    #      validator lets a copy freed before the next allocation go first, so that is stricter than it, never
    #      looser: tests/milp/test_zero_time.py measures what it costs (3 ms where 2 ms validate). Where it
    #      cannot tell, G counts more, never less: only a stage's own run is sure to run, a rerun that takes
    #      time ends the instant for the rest of its stage only, and zero-time runs after the last timed stage
    #      take the ghost in their own rows (no later row is the instant's). Without zero-time runs: no G.
    budget = budget_bytes(pb, max(map(len, at_stage), default=0)) / MIB
    instant = instant_nodes(pb, allowed, rstages, tau)
    last_timed = max((t for t in range(n) if not instant[t]), default=-1)   # zero-time runs after: own G
    s_at: dict[int, list[int]] = {}
    for (tt, j) in S:
        s_at.setdefault(tt, []).append(j)
    pb_at: dict[int, list[tuple[int, pulp.LpVariable]]] = {}   # blocking prefetches by stage, in Pb's order
    for (x, j), v in Pb.items():
        pb_at.setdefault(x, []).append((j, v))
    n_free = 0
    # ghosts as (MiB, 0-1 expression): into stage t, what was made at the instant stage t-1 ended in and is gone
    carry: list[tuple[float, pulp.LpAffineExpression | pulp.LpVariable | int]] = []
    run_outs: list[int] = []        # outputs of the stages' own zero-time runs since a run took time for sure
    run_more: list[tuple[float, pulp.LpAffineExpression | pulp.LpVariable]] = []  # zero-time reruns' outputs
    #                                 and zero-time runs' workspace since then
    for t in range(n):
        over()
        if not at_stage[t]:
            continue
        kept = [(pb.mem[j] / MIB, S[t, j]) for j in s_at.get(t, [])] + \
            [(pb.mem[j] / MIB, v) for j, v in pb_at.get(t, [])]
        fly = [(pb.mem[k[1]] / MIB, P[k]) for k in inflight_p.get(t, [])] + \
              [(pb.mem[k[1]] / MIB, O[k]) for k in inflight_o.get(t, [])]
        base = pb.fixed_bytes / MIB + pulp.lpSum(c * v for c, v in kept + fly)
        prev: pulp.LpAffineExpression | pulp.LpVariable = base
        freed_prev: pulp.LpAffineExpression | int = 0
        carried = pulp.lpSum(c * v for c, v in carry)
        big = sum(c for c, _ in carry)          # the most `carry` can be: gone once a run that takes time has run
        timed: list[pulp.LpAffineExpression] = []    # runs of this stage so far that take time
        freed_now: list[tuple[float, pulp.LpVariable]] = []   # frees after its zero-time runs, of what they made
        ws_now: list[tuple[float, pulp.LpVariable]] = []      # its zero-time runs' workspace
        made = set(run_outs)                    # tensors perhaps made at the current instant
        for q in at_stage[t]:
            nd = nodes[q]
            out_mib = sum(pb.mem[j] for j in nd.outputs) / MIB
            u = new_var(lp, f"U_{t}_{q}", lowBound=0)
            lp += u == prev - freed_prev + out_mib * rsum(t, q), f"mem_{t}_{q}"
            ws = pulp.lpSum(nd.impls[v].workspace / MIB * R[t, q, v] for v in allowed[q])
            ghost: pulp.LpVariable | int = 0
            if (not instant[q] or t > last_timed) and (big > 0 or freed_now or ws_now):
                # the instant's row (a zero-time run's ghosts are counted at the next timed run)
                ghost = new_var(lp, f"G_{t}_{q}", lowBound=0)
                now = pulp.lpSum(c * v for c, v in freed_now + ws_now)
                lp += ghost >= carried - big * pulp.lpSum(timed) + now, f"instant_{t}_{q}"
            # Every run has its row, a zero-time one too: it holds its inputs until its outputs are allocated
            # (rule 5), and an input it is the last reader of is freed only after it (in the next row's frees).
            lp += u + ws + ghost <= budget, f"budget_{t}_{q}"
            if instant[q]:
                ws_now += [(nd.impls[v].workspace / MIB, R[t, q, v]) for v in allowed[q] if nd.impls[v].workspace]
            # Free_{t,i,q}: after q in stage t, i leaves unless kept, offloaded or read later in the stage.
            frees = []
            for i in dict.fromkeys(nd.inputs + nd.outputs):
                f = new_var(lp, f"F_{t}_{q}_{i}", lowBound=0, upBound=1)
                n_free += 1
                lp += f <= rsum(t, q), f"free_run_{t}_{q}_{i}"
                if (t + 1, i) in S:
                    lp += f <= 1 - S[t + 1, i], f"free_kept_{t}_{q}_{i}"
                if (t, i) in O:
                    lp += f <= 1 - O[t, i], f"free_off_{t}_{q}_{i}"
                for r in pb.readers.get(i, ()):
                    if r > q and has_r(t, r):
                        lp += f <= 1 - rsum(t, r), f"free_later_{t}_{q}_{i}_{r}"
                frees.append(pb.mem[i] / MIB * f)
                if instant[q] and pb.mem[i] and (i in nd.outputs or i in made):
                    freed_now.append((pb.mem[i] / MIB, f))   # a copy that may live no time: still counted
            if instant[q]:
                made.update(nd.outputs)
            else:
                timed.append(rsum(t, q))
            prev = u
            freed_prev = pulp.lpSum(frees)
        if not instant[t]:      # node t's first run is certain and takes time: the instant is over
            carry, run_outs, run_more = [], [], []
            continue
        # Stage t ends at the instant its own node ran: what was made at it and is not on the device in stage
        # t+1 (freed, here or at the boundary) still counts in t+1 until a run there takes time.
        run_outs += [i for i in nodes[t].outputs if pb.mem[i]]
        run_more += [(pb.mem[i] / MIB, rsum(t, q)) for q in at_stage[t] if q != t and instant[q]
                     for i in nodes[q].outputs if pb.mem[i]]
        run_more += ws_now
        carry = [(pb.mem[i] / MIB, 1 - s(t + 1, i) - (O[t, i] if (t, i) in O else 0)) for i in run_outs] + run_more
    m = MilpModel(pb, options, lp, R, S, O, P, I, allowed, tau, sf_off, sf_pre, Pb=Pb)
    m.n_binaries = len(R) + len(S) + len(O) + len(P) + len(I) + len(Pb)
    m.stats = {"stages": n, "binaries": m.n_binaries, "R": len(R), "S": len(S), "O": len(O), "P": len(P),
               "Free": n_free, "Pb": len(Pb)}
    return m


def instant_nodes(pb: StageProblem, allowed: list[tuple[int, ...]], rstages: list[list[int]],
                  tau: list[float]) -> list[bool]:
    """Per node: whether a run of it may take no longer than the validator's tolerance, 1e-9 x max(1 s, the
    plan's busy time) (bounded here by every run the model allows and two copies per tensor): rule 5 then counts
    what it allocates at its instant, beside everything else allocated there (`build_model`'s ghosts)."""
    dev = pb.device
    g = pb.graph
    busy = sum(max(pb.nodes[q].impls[v].time_s for v in allowed[q]) * len(rstages[q]) for q in range(pb.n))
    busy += sum(dev.d2h_time(int(g.tensors[j].bytes)) + dev.h2d_time(int(g.tensors[j].bytes))
                for j in pb.offloadable)
    tol = 1e-9 * max(1.0, busy, sum(tau))
    return [min(pb.nodes[q].impls[v].time_s for v in allowed[q]) <= tol for q in range(pb.n)]


def read_values(model: MilpModel) -> Values:
    """The solution's ones (values > 0.5); raises if the solver left any of R unset."""
    def ones(d: dict) -> frozenset:
        return frozenset(k for k, v in d.items() if v.varValue is not None and v.varValue > 0.5)

    return Values(ones(model.R), ones(model.S), ones(model.O), ones(model.P), ones(model.Pb))


def budget_bytes(pb: StageProblem, chain: int) -> float:
    """The memory rows' right-hand side in bytes: what the solver's tolerance should not turn into a plan over
    the device. A row may be missed by FEASIBILITY_TOL MiB (about a byte; along a stage's chain of `chain` memory
    equations that many times) and a binary by FEASIBILITY_TOL, a millionth of the bytes it counts: with the
    usable bytes as the bound, a plan needing 1 byte more than the device has was solved and then refused by
    decode. Every byte count in the rows is a multiple of `q` (the alignment, or its gcd with the workspaces),
    so any bound from F (the usable bytes rounded down to q) to below F + q admits the same integral plans: the
    usable bytes where they are at least half a q short of the next multiple (the model unchanged), else
    F + q/2; F itself where q is coarser than the slop but not by 4x. Only where q is finer than the slop is
    the bound the usable bytes less it (a plan within those few bytes of the device's memory is then lost).
    The slop is an estimate (each managed tensor counted twice, where a stage's frees may count it once per
    node that touches it): decode validates every plan, so one over the device is refused there, never
    written."""
    usable = int(pb.device.usable_bytes)
    ws = [int(im.workspace) for nd in pb.nodes for im in nd.impls]
    q = math.gcd(int(pb.fixed_bytes), *map(int, pb.mem.values()), *ws) or 1
    slop = FEASIBILITY_TOL * (MIB * (chain + 2) + pb.fixed_bytes + 2 * sum(pb.mem.values()) + max(ws, default=0))
    floor = usable // q * q
    if q >= 4 * slop:
        return float(min(usable, floor + q // 2))
    if q > 2 * slop:      # F + slop stays short of F + q: the same plans as the usable bytes admit
        return float(floor)
    return usable - math.ceil(slop)
