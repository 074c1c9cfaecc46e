"""Rules 6 and 7: the iteration ends where the next one can start, and the totals say what happened."""
from __future__ import annotations

import math

from hybrid.validator.context import COMPUTE, Context, fmt_t
from hybrid.validator.lifetimes import Copies
from hybrid.validator.residency import HostCopies
from hybrid.validator.report import Found


def check_period(ctx: Context, c: Copies, host: HostCopies) -> list[Found]:
    """Rule 6: after the last event the device holds exactly the persistent tensors of resident_at_start,
    and every other persistent tensor has a current host copy."""
    out: list[Found] = []
    resident = set(ctx.resident)
    last_update: dict[int, int] = {}
    for i in range(ctx.n):
        if ctx.kind[i] == COMPUTE:
            for t in ctx.updates_of(i):
                j = last_update.get(t)
                if j is None or (ctx.start[i], i) > (ctx.start[j], j):
                    last_update[t] = i
    for t, ids in enumerate(c.by_tensor):
        live = c.live_at_end(t)
        name = ctx.tid(t)
        if t in resident:
            if live is None:
                rel = c.releaser[ids[-1]] if ids else -1
                out.append(ctx.found(6, rel if rel >= 0 else None,
                                     f"{name} is in resident_at_start but has no device copy at the end of the "
                                     "iteration, so the next iteration would not find it there"))
            continue
        if live is not None:
            kind = "persistent tensor" if ctx.t_persistent[t] else "non-persistent tensor"
            tail = ("; add it to resident_at_start or release it" if ctx.t_persistent[t]
                    else "; free it (or swap it out) before the iteration ends")
            out.append(ctx.found(6, c.maker[live], f"{kind} {name} is still on the device at the end of the "
                                                   f"iteration{tail}"))
            continue
        if ctx.t_persistent[t] and not host.valid(t, math.inf):
            u = last_update.get(t)
            out.append(ctx.found(6, u, f"persistent tensor {name} was updated in place and is not on the device "
                                       "at the end, but no swap_out after its last update saved it to the host"))
    return out


def check_totals(ctx: Context) -> list[Found]:
    """Rule 7: makespan_s is the largest event end; metrics.ideal_s the sum of the chosen impls' times."""
    out: list[Found] = []
    plan = ctx.plan
    last = max(ctx.end, default=0.0)
    if not math.isfinite(plan.makespan_s) or abs(plan.makespan_s - last) > ctx.eps:
        out.append(ctx.found(7, None, f"makespan_s is {fmt_t(plan.makespan_s)}, but the last event ends at {fmt_t(last)}"))
    ideal = math.fsum(ctx.impl_time[i] for i in range(ctx.n) if ctx.kind[i] == COMPUTE and not ctx.recompute[i])
    got = plan.metrics.get("ideal_s")
    if got is None:
        out.append(ctx.found(7, None, f"metrics.ideal_s is missing; it is the sum of the chosen impls' "
                                      f"compute times, {ideal!r} here"))
    elif isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
        out.append(ctx.found(7, None, f"metrics.ideal_s must be a number, got {got!r}"))
    elif abs(got - ideal) > 1e-9 * max(1.0, abs(ideal)):
        out.append(ctx.found(7, None, f"metrics.ideal_s is {got!r}, but the chosen impls' compute times sum "
                                      f"to {ideal!r}"))
    return out
