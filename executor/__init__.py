"""Runs a captured training step under a plan with PyTorch (CUDA streams, or an exact CPU backend).

    from executor import execute, Executor
    result = execute(graph, plan, module, x, y, loss_fn=F.cross_entropy, iters=20, device="cuda", check=True)

Modules: program (plan -> the linear program of nodes, waits, allocations),
streams (cuda / cpu backends), device_pool and host_pool (memory), offsets
(offline offsets for unconstrained plans), ops (out= variants and the copy fallback),
runtime (the iteration loop), measure (times, stalls, memory, vs simulator),
check (eager reference and comparison), races (the sanitizer's overlap checks),
placed (CPU/GPU placement plans), api. Plans to run without a search:
`hybrid.swap.quick_plans`.
"""
from executor.api import ExecutionResult, Executor, execute
from executor.check import Comparison, train_eager
from executor.measure import Summary, to_profile

__all__ = ["Comparison", "ExecutionResult", "Executor", "Summary", "execute", "to_profile", "train_eager"]
