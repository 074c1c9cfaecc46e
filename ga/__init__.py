"""Genetic search over schedules and size-class allocations (SwapAdvisor §5).

    from ga import GAConfig, optimize
    result = optimize(graph, device, GAConfig(seed=1), time_limit_s=60, workers=None)
    plan = result.to_plan()

Modules: encoding (chromosome), population, crossover, mutation, repair,
selection, evaluation (serial / processes / Dask), algorithm (the loop),
termination, checkpoint, progress (live line, convergence log), result,
search (`optimize`).
"""
from ga.algorithm import GAConfig, GeneticSearch
from ga.result import SearchResult
from ga.search import optimize

__all__ = ["GAConfig", "GeneticSearch", "SearchResult", "optimize"]
