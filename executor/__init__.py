"""Runs a captured training step under a plan with PyTorch (CUDA streams, or an exact CPU backend).

    from executor import execute, Executor
    result = execute(graph, plan, module, x, y, loss_fn=F.cross_entropy, iters=20, device="cuda", check=True)

What `hybrid execute` does with files, from Python (a graph's module spec runs only when named or trusted):

    from executor.model import workload
    from executor.preflight import preflight
    pre = preflight(graph, plan, device="cpu", check=True, module="examples.mlp:make")  # HybridError, or figures
    w = workload(graph, module=pre.module_spec)
    result = execute(graph, plan, w.module, w.args, w.target, loss_fn=w.loss_fn, kwargs=w.kwargs,
                     device=pre.device, check=True)

Modules: program (plan -> the linear program of nodes, waits, allocations),
streams (cuda / cpu backends), device_pool and host_pool (memory), offsets
(offline offsets for unconstrained plans), ops (out= variants, equivalent out= calls and the copy
fallback), outside (bytes allocated outside the pool), random_state (where random ops' numbers come from,
graph-safe for CUDA graphs), runtime (the iteration loop), measure (times, stalls, memory, vs simulator),
check (eager reference and comparison), races (the sanitizer's overlap checks),
placed (CPU/GPU placement plans), preflight (the checks before a run: device,
plan vs graph, host memory and its limits, whether a graph's module spec may
run), model (the zoo model or module spec a graph was captured from), api.
Plans to run without a search: `hybrid.swap.quick_plans`.
"""
from executor.api import (CheckMismatchWarning, ExecutionResult, Executor, PlacementRun, PlanMemoryWarning, execute,
                          execute_placement, is_placement)
from executor.check import Comparison, train_eager
from executor.measure import Summary, to_profile

__all__ = ["CheckMismatchWarning", "Comparison", "ExecutionResult", "Executor", "PlacementRun", "PlanMemoryWarning",
           "Summary", "execute", "execute_placement", "is_placement", "to_profile", "train_eager"]
