"""The augmented graph refinement starts from: derived from any plan's events, or re-planned.

`hybrid.swap.from_plan.from_plan` reads nodes and stream orders off the plan's
timeline, so baselines' plans and plans from files work too. Its issue order
(events by start time) is re-walked by `hybrid.swap.rewalk.rebuild`; if
that order is not a valid sequence (zero-length events tied at one instant in
an order the walk cannot follow), the swap planner is re-run with the plan's
schedule, allocation and recorded planner options, which reproduces plans
the planner made. An arena plan keeps its offsets (`hybrid.refine.offsets`): its
events in time order must walk, as those of any valid arena plan do. Reruns (recompute events) are compute
nodes like any other: the walk tells them from an op's first run by their place in the sequence.
"""
from __future__ import annotations

from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.plan import ArenaAllocation
from hybrid.refine.offsets import arena_problem, rebuild
from hybrid.swap.rewalk import Problem, SequenceError, Timeline


def _planner_options(plan: Plan):
    """The options the plan records (`PlannerOptions.of_plan`), else the defaults: the re-plan is a fallback whose
    result is checked like any other."""
    from hybrid.swap.augmented import PlannerOptions

    return PlannerOptions.of_plan(plan) or PlannerOptions()


def _check_supported(graph: Graph, plan: Plan) -> None:
    """The walk times every run of an op with one implementation (its first run's): a rerun that names another
    cannot be re-timed; nor can an op on the host (`cpu` stream), whose outputs have no device copy."""
    def impl_name(op_id: str, impl: str | None) -> str | None:
        op = graph.op(op_id)
        return impl if impl is not None or not op.implementations else op.implementations[op.default_impl].name

    host = next((e for e in plan.events if e.kind == "compute" and e.on_cpu), None)
    if host is not None:
        raise HybridError(f"refine: op {host.op!r} runs on the host (a placement plan from `hybrid place`); CP-SAT "
                          "refinement re-times the copies of plans that run every op on the device: use this "
                          "plan as it is")
    first = {e.op: impl_name(e.op, e.impl) for e in plan.events if e.kind == "compute" and not e.recompute}
    for e in plan.events:
        if e.kind == "compute" and e.recompute and impl_name(e.op, e.impl) != first.get(e.op):
            raise HybridError(f"refine: the recompute of op {e.op!r} at {e.start_s:.6g} s uses implementation "
                              f"{impl_name(e.op, e.impl)!r}, its first run {first.get(e.op)!r}; CP-SAT refinement "
                              "times every run of an op with one implementation: use this plan as it is")


def starting_point(graph: Graph, plan: Plan) -> tuple[Problem, Timeline]:
    """(problem, walked timeline) for a plan; raises HybridError when the plan cannot be refined."""
    _check_supported(graph, plan)
    errors: list[str] = []
    try:
        from hybrid.swap.from_plan import from_plan
    except ImportError:  # pragma: no cover - older checkouts
        from_plan = None
    if from_plan is not None:
        aug = from_plan(graph, plan)
        prob = (arena_problem(aug, plan.allocation) if isinstance(plan.allocation, ArenaAllocation)
                else Problem.from_augmented(aug))
        try:
            return prob, rebuild(prob, aug.kind, aug.ref)
        except SequenceError as e:
            errors.append(f"its events in time order: {e}")
    opts = _planner_options(plan) if not isinstance(plan.allocation, ArenaAllocation) else None
    if opts is not None:
        from hybrid.swap.pools import pool_from_allocation
        from hybrid.graph.order import from_ids
        from hybrid.swap.planner import SwapPlanner

        pool = pool_from_allocation(graph, plan.allocation, plan.device)
        impl_choice = plan.impl_choice(graph) if any(e.kind == "compute" and e.impl for e in plan.events) else None
        try:
            aug = SwapPlanner(graph, plan.device, impl_choice).plan(from_ids(graph, plan.schedule), pool, opts)
            prob = Problem.from_augmented(aug)
            return prob, rebuild(prob, aug.kind, aug.ref)
        except (SequenceError, HybridError) as e:
            errors.append(f"re-planned with the swap planner: {e}")
    raise HybridError("refine: cannot derive a valid augmented graph from the plan (" + "; ".join(errors) +
                      "); validate it with `hybrid validate`")
