"""Serving several models on one GPU with Poisson arrivals (SwapAdvisor §6.3, Figure 8): `hybrid serve`.

    from hybrid.serve import ServeConfig, model_costs, simulate_serving
    costs = model_costs(graph, device, share_bytes=device.memory_bytes // 4)
    table = simulate_serving([costs] * 4, ServeConfig(rates=(50, 100, 200), batch=16))

`simulate.py` is the pure discrete-event simulation; `costs.py` turns a graph into what it costs to serve.
"""
from hybrid.serve.costs import model_costs, swap_plan
from hybrid.serve.simulate import POLICIES, ModelCosts, ServeConfig, simulate_serving, workload

__all__ = ["POLICIES", "ModelCosts", "ServeConfig", "model_costs", "simulate_serving", "swap_plan", "workload"]
