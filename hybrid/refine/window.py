"""Which nodes form a window, and everything the CP-SAT model needs to know about them.

A window covers the compute ops at schedule positions [p0, p1) and every node
issued between the compute before p0 and the compute at p1 (the copies that
make room for and bring in those ops' tensors, the frees after them). The rest
of the plan is frozen: nodes before the window keep their times (they cannot
depend on window nodes), and give the window its boundary — when each stream
becomes free, when each frozen predecessor ends, how many objects of each size
class (or how many bytes) are free at the window's origin and when the frozen
copies still in flight release or take more. Nodes after the window are
re-timed by the walk after decoding.

Times become integer ticks: t -> (t - T0) / tick with T0 the earliest current
start in the window and tick = window span / resolution (or a given tick).
Durations round up; every instant rounds down by the same rule, so a release
and an allocation at the same instant (the planner's usual handoff) stay at the
same tick. The walk after decoding re-times everything in real time anyway.

Alternative evictions are optional (release, swap_in) pairs of one tensor,
decided by one literal:
- "keep": an eviction and its reload that both lie in the window; leaving the
  pair out keeps the tensor resident instead;
- "evict": a tensor resident over a gap between two of its uses (or from the
  window start to its first use in it) that could be freed (or swapped out) and
  brought back, freeing its object for the gap — a few candidates, chosen by how
  long the gap is against the copy time, in the size classes the window
  allocates from;
- "advance": a tensor idle through the window whose next event after it is an
  eviction: the eviction may move into the window, so its memory comes back
  sooner (the planner evicts on demand, when room is needed; moving a copy it
  makes anyway costs no extra traffic).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hybrid.plan.events import COMPUTE, FREE, SWAP_IN, SWAP_OUT
from hybrid.swap.rewalk import PoolState, Problem, Timeline, pool_state

STREAM_OF = {COMPUTE: 0, SWAP_IN: 1, SWAP_OUT: 2, FREE: -1}


@dataclass
class WNode:
    """One node of the window model. key: timeline index, or -1 - j for the j-th new (candidate) node."""

    key: int
    kind: int
    ref: int
    dur: int                 # ticks
    lb: int                  # earliest start, ticks
    hint: int                # current start, ticks (a solution hint)
    pair: int = -1           # optional pair this node belongs to (-1: always present)
    mem: list[tuple[int, int, bool]] = field(default_factory=list)  # (reservoir, delta, at_end)

    @property
    def stream(self) -> int:
        return STREAM_OF[self.kind]


@dataclass
class Pair:
    """An optional (release, swap_in) of one tensor, both present or both absent; or an optional release
    alone (load = -1) that replaces a later one (`moves`, a timeline index after the window)."""

    tensor: int
    release: int             # WNode index
    load: int                # WNode index, or -1
    current: bool            # present in the current plan ("keep" pairs) or new (candidates)
    moves: int = -1          # timeline node this release replaces when present ("advance" candidates)


@dataclass
class Reservoir:
    """Free objects of one size class (or free bytes / unit) over the window: level >= 0 at every tick."""

    cls: int                 # size class, or -1 for the byte pool
    unit: int                # bytes per level unit (byte pool) or 1
    initial: int             # free at tick 0
    fixed: list[tuple[int, int]] = field(default_factory=list)  # frozen (tick, delta) after tick 0


@dataclass
class Precedence:
    before: int              # WNode index
    after: int
    gap: int = 0             # after.start >= before.end + gap


@dataclass
class WindowSpec:
    """A window as a small scheduling problem (what model.py solves and tests enumerate)."""

    p0: int
    p1: int
    lo: int                  # timeline node range [lo, hi)
    hi: int
    t0: float                # seconds at tick 0
    tick: float              # seconds per tick
    horizon: int
    nodes: list[WNode]
    precedences: list[Precedence]
    pairs: list[Pair]
    reservoirs: list[Reservoir]
    compute_chain: list[int]  # WNode indices of the window's computes, in schedule order
    stream_free: tuple[int, int, int]  # ticks when compute / h2d / d2h become free (already folded into lb)

    @property
    def last_compute(self) -> int:
        return self.compute_chain[-1]


@dataclass(frozen=True)
class WindowOptions:
    resolution: int = 20000      # ticks per window span
    tick: float | None = None    # fixed seconds per tick (tests); overrides resolution
    candidates: int = 4          # new "evict" candidate tensors per window
    advance: int = 6             # "advance" candidates (later evictions moved into the window)
    keep_pairs: bool = True      # make in-window evict/reload pairs optional
    early_origin: bool = True    # tick 0 at the earliest time a window node could start, not its current start


class TensorEvents:
    """Per-tensor touches of a timeline, by node index: reads, writes, loads, releases, updates, and rerun
    writes (REGEN: the value comes back as it was, so a host copy stays valid; a rerun updates nothing)."""

    READ, WRITE, LOAD, RELEASE, UPDATE, REGEN = 0, 1, 2, 3, 4, 5

    def __init__(self, p: Problem, tl: Timeline) -> None:
        a = p.graph.arrays
        nodes: list[np.ndarray] = []
        tens: list[np.ndarray] = []
        typ: list[np.ndarray] = []
        rerun = tl.reruns()
        first = np.nonzero((tl.kind == COMPUTE) & ~rerun)[0]
        again = np.nonzero(rerun)[0]
        for comp, ptr, idx, code in ((np.nonzero(tl.kind == COMPUTE)[0], a.in_ptr, a.in_idx, self.READ),
                                     (first, a.out_ptr, a.out_idx, self.WRITE),
                                     (again, a.out_ptr, a.out_idx, self.REGEN),
                                     (first, a.upd_ptr, a.upd_idx, self.UPDATE)):
            ops = tl.ref[comp].astype(np.int64)
            cnt = ptr[ops + 1] - ptr[ops]
            if cnt.sum() == 0:
                continue
            nodes.append(np.repeat(comp, cnt))
            starts = np.repeat(ptr[ops], cnt)
            offs = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
            tens.append(idx[starts + offs].astype(np.int64))
            typ.append(np.full(int(cnt.sum()), code, np.int8))
        for k, code in ((SWAP_IN, self.LOAD), (SWAP_OUT, self.RELEASE), (FREE, self.RELEASE)):
            sel = np.nonzero(tl.kind == k)[0]
            nodes.append(sel)
            tens.append(tl.ref[sel].astype(np.int64))
            typ.append(np.full(len(sel), code, np.int8))
        node = np.concatenate(nodes) if nodes else np.zeros(0, np.int64)
        ten = np.concatenate(tens) if tens else np.zeros(0, np.int64)
        ty = np.concatenate(typ) if typ else np.zeros(0, np.int8)
        # by tensor, then node, with updates after the read of the same node
        order = np.lexsort((ty, node, ten))
        self.node = node[order]
        self.tensor = ten[order]
        self.type = ty[order]
        self.ptr = np.searchsorted(self.tensor, np.arange(a.n_tensors + 1))

    def of(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        s, e = self.ptr[t], self.ptr[t + 1]
        return self.node[s:e], self.type[s:e]


def _ceil(x: float) -> int:
    return int(math.ceil(x - 1e-9))


def _floor(x: float) -> int:
    return int(math.floor(x + 1e-9))


def window_range(tl: Timeline, p0: int, p1: int) -> tuple[int, int]:
    comp = np.nonzero(tl.kind == COMPUTE)[0]
    lo = int(comp[p0 - 1]) + 1 if p0 > 0 else 0
    hi = int(comp[p1]) if p1 < len(comp) else tl.n
    return lo, hi


class _Builder:
    """Collects one window's nodes, precedences and optional pairs from the current timeline."""

    def __init__(self, p: Problem, tl: Timeline, ev: TensorEvents, p0: int, p1: int, opt: WindowOptions) -> None:
        self.p, self.tl, self.ev, self.opt = p, tl, ev, opt
        self.p0, self.p1 = p0, p1
        self.lo, self.hi = window_range(tl, p0, p1)
        self.nodes: list[WNode] = []
        self.index: dict[int, int] = {}     # timeline node -> WNode index
        self.precs: list[Precedence] = []
        self.pairs: list[Pair] = []

    # -- units -------------------------------------------------------------------------------------------
    def dur_of(self, kind: int, ref: int) -> float:
        p = self.p
        dev = p.device
        if kind == COMPUTE:
            return float(p.op_time[ref])
        if kind == SWAP_IN:
            return float(p.graph.arrays.t_bytes[ref]) / dev.h2d_bytes_per_s + dev.transfer_latency_s
        if kind == SWAP_OUT:
            return float(p.graph.arrays.t_bytes[ref]) / dev.d2h_bytes_per_s + dev.transfer_latency_s
        return 0.0

    def ticks(self, kind: int, ref: int) -> int:
        return _ceil(self.dur_of(kind, ref) / self.tick)

    def tk(self, x: float) -> int:
        """A frozen instant -> its tick (one rounding for all, so handoffs at one instant stay at one tick)."""
        return max(0, _floor((x - self.t0) / self.tick))

    # -- the window ------------------------------------------------------------------------------------------
    def build(self) -> WindowSpec | None:
        tl, lo, hi = self.tl, self.lo, self.hi
        if hi <= lo:
            return None
        self.t0 = float(tl.start[lo:hi].min())
        if self.opt.early_origin:
            # a window node may start as soon as its stream and its frozen predecessors allow, which can be
            # before any current start (a swap_in that waited for memory the window itself freed late)
            self.t0 = min(self.t0, self._earliest(lo, hi))
        span = float(tl.end[lo:hi].max()) - self.t0
        if self.opt.tick is not None:
            self.tick = float(self.opt.tick)
        elif span > 0:
            self.tick = span / self.opt.resolution
        else:
            return None
        self.stream_free = [0, 0, 0]  # when each stream finishes the frozen prefix's work
        for s in range(3):
            pre = np.nonzero(tl.kind[:lo] == s)[0]
            if len(pre):
                self.stream_free[s] = self.tk(float(tl.end[pre[-1]]))
        for i in range(lo, hi):
            k, r = int(tl.kind[i]), int(tl.ref[i])
            lb = self.stream_free[STREAM_OF[k]] if k != FREE else 0
            for j in range(tl.dep_ptr[i], tl.dep_ptr[i + 1]):
                d = int(tl.dep_idx[j])
                if d < lo and not tl.dep_own[j]:
                    lb = max(lb, self.tk(float(tl.end[d])))
            self.index[i] = len(self.nodes)
            hint = max(0, int(round((tl.start[i] - self.t0) / self.tick)))
            self.nodes.append(WNode(i, k, r, self.ticks(k, r), lb, hint))
        for i in range(lo, hi):  # data edges inside the window (ownership edges become the reservoirs)
            for j in range(tl.dep_ptr[i], tl.dep_ptr[i + 1]):
                d = int(tl.dep_idx[j])
                if d >= lo and not tl.dep_own[j]:
                    self.precs.append(Precedence(self.index[d], self.index[i]))
        chain = [self.index[i] for i in range(lo, hi) if tl.kind[i] == COMPUTE]
        if not chain:
            return None
        self.precs += [Precedence(x, y) for x, y in zip(chain, chain[1:])]
        if self.opt.keep_pairs:
            self.keep_pairs()
        self.evict_candidates()
        self.advance_candidates()
        nodes = self.nodes
        reservoirs = _reservoirs(self.p, pool_state(self.p, tl, lo), self.t0, self.tick, nodes)
        fixed_max = max((k for r in reservoirs for k, _ in r.fixed), default=0)
        # every node after every frozen event, one at a time in issue order, is feasible: a safe horizon
        horizon = max([n.lb for n in nodes] + [fixed_max]) + sum(n.dur for n in nodes) + 1
        horizon = max(horizon, max(n.hint + n.dur for n in nodes) + 1)
        return WindowSpec(self.p0, self.p1, lo, hi, self.t0, self.tick, horizon, nodes, self.precs, self.pairs,
                          reservoirs, chain, tuple(self.stream_free))

    def _earliest(self, lo: int, hi: int) -> float:
        """Earliest real time any window node on a stream could start, from the frozen prefix alone."""
        tl = self.tl
        free = [0.0, 0.0, 0.0]
        for s in range(3):
            pre = np.nonzero(tl.kind[:lo] == s)[0]
            if len(pre):
                free[s] = float(tl.end[pre[-1]])
        best = np.inf
        for i in range(lo, hi):
            k = int(tl.kind[i])
            if k == FREE:
                continue
            t = free[k]
            for j in range(tl.dep_ptr[i], tl.dep_ptr[i + 1]):
                d = int(tl.dep_idx[j])
                if d < lo and not tl.dep_own[j]:
                    t = max(t, float(tl.end[d]))
            best = min(best, t)
        return best

    # -- alternative evictions --------------------------------------------------------------------------------
    def host_valid_before(self, t: int, x: int) -> bool:
        """Whether tensor t's host copy is valid once the nodes before timeline index x have been issued."""
        valid = bool(self.p.graph.arrays.t_persistent[t]) and not bool(self.p.resident[t])
        nodes, types = self.ev.of(t)
        for nd, ty in zip(nodes, types):
            if nd >= x:
                break
            if ty in (TensorEvents.UPDATE, TensorEvents.WRITE):
                valid = False
            elif ty == TensorEvents.RELEASE and self.tl.kind[nd] == SWAP_OUT:
                valid = True
        return valid

    def alloc_classes(self) -> set[int]:
        """Size classes the window allocates from (what an eviction must free to help)."""
        a = self.p.graph.arrays
        cls = self.p.pool.t_class
        out: set[int] = set()
        for n in self.nodes:
            if n.kind == COMPUTE:
                out.update(int(cls[t]) for t in a.out_idx[a.out_ptr[n.ref]:a.out_ptr[n.ref + 1]])
            elif n.kind == SWAP_IN:
                out.add(int(cls[n.ref]))
        return out

    def keep_pairs(self) -> None:
        """In-window evict/reload pairs that could be dropped (the tensor then simply stays resident)."""
        tl, lo, hi = self.tl, self.lo, self.hi
        stay = getattr(self.p, "may_stay", None)
        for t in np.unique(tl.ref[lo:hi][(tl.kind[lo:hi] == SWAP_OUT) | (tl.kind[lo:hi] == FREE)]):
            t = int(t)
            nd, ty = self.ev.of(t)
            inwin = (nd >= lo) & (nd < hi)
            rel = nd[inwin & (ty == TensorEvents.RELEASE)]
            lds = nd[inwin & (ty == TensorEvents.LOAD)]
            if len(rel) != 1 or len(lds) != 1 or lds[0] < rel[0]:
                continue
            r, ld = int(rel[0]), int(lds[0])
            # the copy's last touch before the release must be a compute: readers after the reload then stay
            # ordered after the old copy by the compute chain when the pair is dropped
            before = nd[(nd < r) & (ty != TensorEvents.UPDATE)]
            if len(before) == 0 or tl.kind[int(before[-1])] != COMPUTE:
                continue
            # an arena plan: staying resident must not hold bytes another copy takes in between
            if stay is not None and not stay(tl, t, r, ld):
                continue
            self.pairs.append(Pair(t, self.index[r], self.index[ld], True))
            self.nodes[self.index[r]].pair = self.nodes[self.index[ld]].pair = len(self.pairs) - 1

    def evict_candidates(self) -> None:
        """Tensors resident over a gap before one of their reads in the window that could leave and come back."""
        if self.opt.candidates <= 0:
            return
        p, tl, lo, hi = self.p, self.tl, self.lo, self.hi
        a = p.graph.arrays
        pool = p.pool
        classes = self.alloc_classes()
        touched = set(int(t) for t in tl.ref[lo:hi][tl.kind[lo:hi] != COMPUTE])
        reads: dict[int, list[int]] = {}
        for i in range(lo, hi):
            if tl.kind[i] == COMPUTE:
                o = int(tl.ref[i])
                for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]:
                    reads.setdefault(int(t), []).append(i)
        cands: list[tuple[float, int, int, int, bool]] = []
        for t, rd in reads.items():
            if t in touched or (not pool.by_bytes and int(pool.t_class[t]) not in classes):
                continue
            if pool.by_bytes and a.t_bytes[t] == 0:
                continue
            nd, ty = self.ev.of(t)
            if np.any((nd >= lo) & (nd < hi) & ((ty == TensorEvents.WRITE) | (ty == TensorEvents.REGEN))):
                continue  # produced (or regenerated) inside the window
            prev_nodes = nd[nd < lo]
            if len(prev_nodes) == 0 and not p.resident[t]:
                continue
            # gaps between consecutive touches; the first one starts with the last touch before the window
            touches = [int(prev_nodes[-1]) if len(prev_nodes) else -1] + rd
            for left, right in zip(touches, touches[1:]):
                if left >= 0 and tl.kind[left] in (SWAP_OUT, FREE):
                    continue
                hv = self.host_valid_before(t, left + 1 if left >= 0 else 0)
                cost = self.dur_of(SWAP_IN, t) + (0.0 if hv else self.dur_of(SWAP_OUT, t))
                gap = float(tl.start[right]) - (float(tl.end[left]) if left >= 0 else 0.0)
                if gap > cost:
                    cands.append(((gap - cost) * float(max(1, a.t_bytes[t])), t, left, right, hv))
        cands.sort(key=lambda c: (-c[0], c[1], c[2]))
        used: set[int] = set()
        for _, t, left, right, hv in cands:
            if len(used) >= self.opt.candidates:
                break
            if t in used:
                continue
            used.add(t)
            j = len(self.pairs)
            rk = FREE if hv else SWAP_OUT
            lb_r = self.stream_free[2] if rk == SWAP_OUT else 0
            if 0 <= left < lo:
                lb_r = max(lb_r, self.tk(float(tl.end[left])))
            lb_l = self.stream_free[1]
            nd, ty = self.ev.of(t)
            outs = [int(x) for x, y in zip(nd, ty) if y == TensorEvents.RELEASE and tl.kind[x] == SWAP_OUT and x < lo]
            if hv and outs:  # a host copy made by a swap_out still running before the window must have ended
                lb_l = max(lb_l, self.tk(float(tl.end[outs[-1]])))
            self.nodes.append(WNode(-1 - 2 * j, rk, t, self.ticks(rk, t), lb_r, 0, j))
            self.nodes.append(WNode(-2 - 2 * j, SWAP_IN, t, self.ticks(SWAP_IN, t), lb_l, 0, j))
            ri, li = len(self.nodes) - 2, len(self.nodes) - 1
            self.pairs.append(Pair(t, ri, li, False))
            if left >= lo:
                self.precs.append(Precedence(self.index[left], ri))
            self.precs += [Precedence(ri, li), Precedence(li, self.index[right])]

    def advance_candidates(self) -> None:
        """Tensors idle through the window whose next event after it is an eviction: offer that eviction earlier."""
        if self.opt.advance <= 0:
            return
        p, tl, ev, lo, hi = self.p, self.tl, self.ev, self.lo, self.hi
        a = p.graph.arrays
        pool = p.pool
        classes = self.alloc_classes()
        if not pool.by_bytes and not classes:
            return
        big = np.iinfo(np.int64).max
        before = ev.node < lo
        last_before = np.full(a.n_tensors, -1, np.int64)
        np.maximum.at(last_before, ev.tensor[before], ev.node[before])
        first_from = np.full(a.n_tensors, big, np.int64)
        np.minimum.at(first_from, ev.tensor[~before], ev.node[~before])
        has = last_before >= 0
        last_kind = np.full(a.n_tensors, -1, np.int64)
        last_kind[has] = tl.kind[last_before[has]]
        resident = np.where(has, (last_kind == COMPUTE) | (last_kind == SWAP_IN), p.resident)
        cand = np.nonzero(resident & (first_from >= hi) & (first_from < big))[0]
        nxt = first_from[cand]
        ok = (tl.kind[nxt] == SWAP_OUT) | (tl.kind[nxt] == FREE)
        ok &= (a.t_bytes[cand] > 0) if pool.by_bytes else np.isin(pool.t_class[cand], list(classes))
        cand, nxt = cand[ok], nxt[ok]
        if len(cand) == 0:
            return
        span_end = self.t0 + self.tick * max(n.hint + n.dur for n in self.nodes if n.key >= 0)
        score = (np.minimum(tl.end[nxt], span_end) - self.t0) * np.maximum(a.t_bytes[cand], 1)
        for k in np.lexsort((cand, -score))[:self.opt.advance]:
            if score[k] <= 0:
                continue
            t, r_old = int(cand[k]), int(nxt[k])
            rk = int(tl.kind[r_old])
            lb = self.stream_free[2] if rk == SWAP_OUT else 0
            if last_before[t] >= 0:
                lb = max(lb, self.tk(float(tl.end[last_before[t]])))
            j = len(self.pairs)
            self.nodes.append(WNode(-1 - 2 * j, rk, t, self.ticks(rk, t), lb, 0, j))
            self.pairs.append(Pair(t, len(self.nodes) - 1, -1, False, r_old))


def build_window(p: Problem, tl: Timeline, ev: TensorEvents, p0: int, p1: int,
                 opt: WindowOptions = WindowOptions()) -> WindowSpec | None:
    """The model data of the window of schedule positions [p0, p1), or None when it has nothing to schedule."""
    return _Builder(p, tl, ev, p0, p1, opt).build()


def _node_mem(p: Problem, kind: int, ref: int) -> list[tuple[int, int, bool]]:
    """(class or -1, amount, at_end) of one node: allocations +, releases -, in objects or bytes."""
    a = p.graph.arrays
    pool = p.pool
    out: list[tuple[int, int, bool]] = []
    if kind == COMPUTE:
        outs = a.out_idx[a.out_ptr[ref]:a.out_ptr[ref + 1]]
        if pool.by_bytes:
            ws = int(p.op_ws[ref])
            b = int(pool.t_mem[outs].sum()) + ws
            if b:
                out.append((-1, b, False))
            if ws:
                out.append((-1, -ws, True))
        else:
            out += [(int(pool.t_class[t]), 1, False) for t in outs]
    elif kind == SWAP_IN:
        if not pool.by_bytes:
            out.append((int(pool.t_class[ref]), 1, False))
        elif pool.t_mem[ref]:
            out.append((-1, int(pool.t_mem[ref]), False))
    else:
        if not pool.by_bytes:
            out.append((int(pool.t_class[ref]), -1, True))
        elif pool.t_mem[ref]:
            out.append((-1, -int(pool.t_mem[ref]), True))
    return out


def _reservoirs(p: Problem, free: PoolState, t0: float, tick: float, nodes: list[WNode]) -> list[Reservoir]:
    """Memory levels: per size class the window allocates from (or bytes), starting from what the frozen
    prefix leaves free — objects (chunks) released at or before tick 0 count at once, later ones at their tick.
    Objects the prefix still holds are not there at all: the walk binds objects in issue order, so an object a
    frozen node takes later in time is not one a window node may borrow in the meantime."""
    pool = p.pool
    per_node = [_node_mem(p, n.kind, n.ref) for n in nodes]
    classes = sorted({c for ev in per_node for c, amt, _ in ev if amt > 0})
    if not classes:
        return []

    def ticks(times: np.ndarray) -> np.ndarray:
        return np.floor((times - t0) / tick + 1e-9).astype(np.int64)

    out: list[Reservoir] = []
    ridx: dict[int, int] = {}
    unit = 1
    if pool.by_bytes:
        amounts = [abs(x) for ev in per_node for _, x, _ in ev] + [int(b) for b in free.chunk_bytes]
        unit = max(1, int(np.gcd.reduce(np.array(amounts, np.int64)))) if amounts else 1
        tk = ticks(free.chunk_time)
        early = tk <= 0
        fixed: dict[int, int] = {}
        for k, b in zip(tk[~early], free.chunk_bytes[~early]):
            fixed[int(k)] = fixed.get(int(k), 0) + int(b) // unit
        ridx[-1] = 0
        out.append(Reservoir(-1, unit, int(free.chunk_bytes[early].sum()) // unit, sorted(fixed.items())))
    else:
        for c in classes:
            tk = ticks(free.released[c])
            fixed = {}
            for k in tk[tk > 0]:
                fixed[int(k)] = fixed.get(int(k), 0) + 1
            ridx[c] = len(out)
            out.append(Reservoir(c, 1, int(free.fresh[c]) + int((tk <= 0).sum()), sorted(fixed.items())))
    for n, evs in zip(nodes, per_node):
        # level = free objects/bytes: an allocation lowers it at the start, a release raises it at the end
        n.mem = [(ridx[c], -amt // unit, at_end) for c, amt, at_end in evs if c in ridx]
    return out


def violations(spec: WindowSpec, starts: list[int], present: list[bool]) -> list[str]:
    """What an integer timetable breaks in the window's model (empty: feasible). For tests and debugging."""
    out: list[str] = []
    nodes = spec.nodes
    on = [n.pair < 0 or present[n.pair] for n in nodes]
    end = [s + n.dur for s, n in zip(starts, nodes)]
    for i, n in enumerate(nodes):
        if on[i] and not (n.lb <= starts[i] <= spec.horizon):
            out.append(f"node {i} starts at {starts[i]} outside [{n.lb}, {spec.horizon}]")
    for p in spec.precedences:
        if on[p.before] and on[p.after] and starts[p.after] < end[p.before] + p.gap:
            out.append(f"node {p.after} starts at {starts[p.after]} before node {p.before} ends at {end[p.before]}")
    for st in (0, 1, 2):
        iv = sorted((starts[i], end[i], i) for i, n in enumerate(nodes) if on[i] and n.stream == st and n.dur > 0)
        for (s1, e1, i1), (s2, e2, i2) in zip(iv, iv[1:]):
            if s2 < e1:
                out.append(f"stream {st}: nodes {i1} and {i2} overlap")
    for r_i, r in enumerate(spec.reservoirs):
        evs = [(0, r.initial)] + list(r.fixed)
        for i, n in enumerate(nodes):
            if on[i]:
                evs += [(end[i] if at_end else starts[i], d) for rr, d, at_end in n.mem if rr == r_i]
        times = sorted({t for t, _ in evs})
        for t in times:
            level = sum(d for tt, d in evs if tt <= t)
            if level < 0:
                out.append(f"reservoir {r_i} (class {r.cls}) at tick {t}: level {level}")
                break
    return out


def greedy_starts(spec: WindowSpec) -> list[int] | None:
    """A feasible integer timetable (the current issue order, each node as early as the model allows), or None.

    Used as CP-SAT's hint: rounding makes the plan's own times slightly
    infeasible at times, and a hint that is feasible lets the solver always
    return at least the current plan.
    """
    nodes = spec.nodes
    on = [n.pair < 0 or spec.pairs[n.pair].current for n in nodes]
    preds: list[list[int]] = [[] for _ in nodes]
    for p in spec.precedences:
        if on[p.before] and on[p.after]:
            preds[p.after].append(p.before)
    prof: list[list[tuple[int, int]]] = [[(0, r.initial)] + list(r.fixed) for r in spec.reservoirs]
    stream_end = [0, 0, 0]
    starts = [0] * len(nodes)
    done = [False] * len(nodes)
    order = [i for i in range(len(nodes)) if on[i]]
    # existing nodes in their current issue order (keys ascending)
    order.sort(key=lambda i: nodes[i].key if nodes[i].key >= 0 else 1 << 60)
    for i in order:
        n = nodes[i]
        est = n.lb
        for q in preds[i]:
            if not done[q]:
                return None
            est = max(est, starts[q] + nodes[q].dur)
        if n.stream >= 0:
            est = max(est, stream_end[n.stream])
        need: dict[int, int] = {}
        for r, d, at_end in n.mem:
            if d < 0:
                need[r] = need.get(r, 0) - d
        t = est
        for r, amount in need.items():
            evs = sorted(prof[r])
            times = sorted({x for x, _ in evs} | {t})
            # level at each breakpoint, then the suffix minimum: the node may start at b if every later level holds
            lv = []
            acc = 0
            j = 0
            for b in times:
                while j < len(evs) and evs[j][0] <= b:
                    acc += evs[j][1]
                    j += 1
                lv.append(acc)
            suf = lv[:]
            for k in range(len(suf) - 2, -1, -1):
                suf[k] = min(suf[k], suf[k + 1])
            ok_at = None
            for k, b in enumerate(times):
                if b >= t and suf[k] >= amount:
                    ok_at = b
                    break
            if ok_at is None:
                return None
            t = max(t, ok_at)
        if t + n.dur > spec.horizon:
            return None
        starts[i] = t
        done[i] = True
        if n.stream >= 0:
            stream_end[n.stream] = t + n.dur
        for r, d, at_end in n.mem:
            prof[r].append((t + n.dur if at_end else t, d))
    return starts
