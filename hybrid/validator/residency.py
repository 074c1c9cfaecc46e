"""Rules 3 and 4: computes find their tensors on the device; copies move only when the data allows.

Host copies follow docs/formats.md's "Host copies" reading; `HostCopies` says
exactly when one holds the tensor's current value.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right

from hybrid.validator.context import COMPUTE, FREE, NO_EVENT, SWAP_IN, SWAP_OUT, Context, fmt_t
from hybrid.validator.lifetimes import Copies
from hybrid.validator.order import overlaps
from hybrid.validator.report import Found


def _made_how(ctx: Context, cid: int, c: Copies) -> str:
    m = c.maker[cid]
    return "resident_at_start" if m == NO_EVENT else ctx.describe(m)


def _released_how(ctx: Context, cid: int, c: Copies) -> str:
    r = c.releaser[cid]
    return ctx.describe(r) if r >= 0 else "a second allocation"


def check_inputs(ctx: Context, c: Copies, host: HostCopies) -> list[Found]:
    """Rule 3: inputs complete at the start, inputs and outputs kept until the end; a cpu compute reads host
    copies instead (current at its start), and a persistent tensor no op updates always has one (placement
    plans upload parameters once and keep them on both sides)."""
    out: list[Found] = []
    eps = ctx.eps
    updated = {t for o in ctx.op_updates for t in o}
    for i in range(ctx.n):
        if ctx.kind[i] != COMPUTE:
            continue
        s, e, o = ctx.start[i], ctx.end[i], ctx.op[i]
        if ctx.on_cpu[i]:
            for t in ctx.op_inputs[o]:
                if not (ctx.t_persistent[t] and t not in updated) and not host.valid(t, s):
                    out.append(ctx.found(3, i, f"input {ctx.tid(t)} has no current host copy at its start (a cpu "
                                               f"compute reads host memory): {host.why_invalid(t, s)}"))
            continue
        for t in ctx.op_inputs[o]:
            msg = _input_problem(ctx, c, t, s, e, eps)
            if msg:
                out.append(ctx.found(3, i, msg))
        for t in ctx.op_outputs[o]:
            cid = c.made_by.get((i, t))
            if cid is not None and c.release[cid] < e - eps:
                out.append(ctx.found(3, i, f"output {ctx.tid(t)} is released at {fmt_t(c.release[cid])} by "
                                           f"{_released_how(ctx, cid, c)}, before the compute ends"))
    return out


def _input_problem(ctx: Context, c: Copies, t: int, s: float, e: float, eps: float) -> str | None:
    ids = c.by_tensor[t]
    k = bisect_right(c.alloc_times[t], s + eps) - 1
    for kk in (k, k - 1):
        if kk >= 0:
            cid = ids[kk]
            if c.complete[cid] <= s + eps and c.release[cid] >= e - eps:
                return None
    name = ctx.tid(t)
    if k < 0:
        if ids:
            return f"input {name} has no device copy at its start (the first is allocated at " \
                   f"{fmt_t(c.alloc[ids[0]])} by {_made_how(ctx, ids[0], c)})"
        return f"input {name} is never on the device (swap it in or keep it resident)"
    cid = ids[k]
    if c.release[cid] <= s + eps and c.release[cid] < e - eps:
        return f"input {name} has no device copy at its start (released at {fmt_t(c.release[cid])} by " \
               f"{_released_how(ctx, cid, c)})"
    if c.complete[cid] > s + eps:
        return f"input {name} is not complete at its start ({_made_how(ctx, cid, c)} ends at " \
               f"{fmt_t(c.complete[cid])})"
    return f"input {name} is released at {fmt_t(c.release[cid])} by {_released_how(ctx, cid, c)}, " \
           "before the compute ends"


class HostCopies:
    """Whether a tensor's host copy holds its current value at a given time.

    It does when no update started before that time and the tensor came from
    the host (persistent, not resident), or when a swap_out that began after the
    last such update (after its end) has ended by then. Within eps a swap_out's
    end counts as before the query and an update's start as after it, so a
    zero-length swap_in just before an update, or a swap_out right after a
    zero-time update, reads the intended value.
    """

    def __init__(self, ctx: Context) -> None:
        n_t = len(ctx.t_bytes)
        resident = set(ctx.resident)
        self.ctx = ctx
        self.initial = [ctx.t_persistent[t] and t not in resident for t in range(n_t)]
        self.updates: list[list[tuple[float, float, int]]] = [[] for _ in range(n_t)]   # (start, end, event)
        self.saves: list[list[tuple[float, float, int]]] = [[] for _ in range(n_t)]     # swap_outs
        for i in range(ctx.n):
            k = ctx.kind[i]
            if k == SWAP_OUT:
                self.saves[ctx.tensor[i]].append((ctx.start[i], ctx.end[i], i))
            elif k == COMPUTE and ctx.on_cpu[i]:   # writes its outputs to host memory (it updates nothing)
                for t in ctx.op_outputs[ctx.op[i]]:
                    self.saves[t].append((ctx.start[i], ctx.end[i], i))
            elif k == COMPUTE:
                for t in ctx.updates_of(i):
                    self.updates[t].append((ctx.start[i], ctx.end[i], i))
        for lst in self.updates:
            lst.sort()
        self.update_starts = [[u[0] for u in lst] for lst in self.updates]

    def last_update(self, t: int, at: float) -> tuple[float, float, int] | None:
        """The latest update of t that started before `at`."""
        k = bisect_left(self.update_starts[t], at - self.ctx.eps) - 1
        return self.updates[t][k] if k >= 0 else None

    def valid(self, t: int, at: float) -> bool:
        eps = self.ctx.eps
        u = self.last_update(t, at)
        if u is None and self.initial[t]:
            return True
        after = -math.inf if u is None else u[1] - eps
        return any(s >= after and e <= at + eps for s, e, _ in self.saves[t])

    def why_invalid(self, t: int, at: float) -> str:
        u = self.last_update(t, at)
        if u is not None:
            return f"it was updated in place by {self.ctx.describe(u[2])} and no swap_out since has ended"
        if self.ctx.t_persistent[t]:
            return "it is in resident_at_start, so its device copy is the only current one until a swap_out ends"
        return "no swap_out of it (or cpu compute making it) has ended yet"


def check_swaps(ctx: Context, c: Copies, host: HostCopies) -> list[Found]:
    """Rule 4: swap_out of complete, unchanging copies; swap_in and free only with a valid host copy."""
    out: list[Found] = []
    eps = ctx.eps
    updates: dict[int, list[int]] = {}
    readers: dict[int, list[int]] = {}
    regens: dict[int, list[int]] = {}
    for i in range(ctx.n):
        if ctx.kind[i] == COMPUTE:
            o = ctx.op[i]
            for t in ctx.updates_of(i):
                updates.setdefault(t, []).append(i)
            for t in ctx.op_inputs[o]:
                readers.setdefault(t, []).append(i)
            if ctx.recompute[i]:
                for t in ctx.op_outputs[o]:
                    regens.setdefault(t, []).append(i)
    for lst in readers.values():
        lst.sort(key=lambda i: (ctx.start[i], i))
    for i in range(ctx.n):
        k = ctx.kind[i]
        if k == COMPUTE:
            continue
        t, s, e = ctx.tensor[i], ctx.start[i], ctx.end[i]
        name = ctx.tid(t)
        if k == SWAP_OUT:
            cid = c.released_by.get(i)
            if cid is not None and c.complete[cid] > s + eps:
                out.append(ctx.found(4, i, f"starts before the device copy of {name} is complete "
                                           f"({_made_how(ctx, cid, c)} ends at {fmt_t(c.complete[cid])})"))
            for u in updates.get(t, ()):
                if overlaps(s, e, ctx.start[u], ctx.end[u], eps):
                    out.append(ctx.found(4, i, f"overlaps {ctx.describe(u)}, which updates {name} in place "
                                               "while it is being copied"))
                    break
        elif k == SWAP_IN:
            if not host.valid(t, s):
                out.append(ctx.found(4, i, f"needs a valid host copy of {name}, but there is none: "
                                           f"{host.why_invalid(t, s)}"))
            cid = c.made_by.get((i, t))
            if cid is not None and c.release[cid] < e - eps:
                out.append(ctx.found(4, i, f"its copy of {name} is released at {fmt_t(c.release[cid])} by "
                                           f"{_released_how(ctx, cid, c)}, before the swap_in ends"))
        elif k == FREE:
            need = _needed_after_free(ctx, t, s, readers, regens)
            if need is not None and not host.valid(t, s):
                out.append(ctx.found(4, i, f"drops the only current copy of {name}, which {need}; its host "
                                           f"copy is not valid ({host.why_invalid(t, s)}); swap it out "
                                           "instead"))
    return out


def _needed_after_free(ctx: Context, t: int, at: float, readers: dict[int, list[int]],
                       regens: dict[int, list[int]]) -> str | None:
    """Why the value freed at `at` is still needed, or None when it is dead.

    A persistent tensor is always needed: it outlives the iteration. A
    non-persistent one is needed when a later compute reads it before any
    recompute regenerates it.
    """
    if ctx.t_persistent[t]:
        return "is persistent (it outlives the iteration)"
    eps = ctx.eps
    nxt = next((r for r in readers.get(t, ()) if ctx.end[r] > at + eps), None)
    if nxt is None:
        return None
    for g in regens.get(t, ()):
        if at - eps <= ctx.start[g] <= ctx.start[nxt] + eps:
            return None
    return f"is read later by {ctx.describe(nxt)}"
