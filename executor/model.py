"""The model a run trains: rebuilt from the zoo (the graph records its name, batch and settings) or from a
module spec (`pkg.module:factory`, as `hybrid capture --module` recorded it), with the inputs and loss the
capture used.

    from executor.model import workload
    w = workload(graph, module="examples.mlp:make", seed=0)   # a graph's own spec runs only if named or trusted
    result = execute(graph, plan, w.module, w.args, w.target, loss_fn=w.loss_fn, kwargs=w.kwargs, check=True)

A module spec is code: `workload` imports it only as `executor.preflight.module_to_run` allows (named by the
caller, or the graph's own with `trust_module=True`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hybrid.errors import HybridError, InvalidPlanError
from hybrid.graph.info import binds_loss, bindings, is_inference

from executor.preflight import module_to_run
from hybrid.capture.interpreter import check_module_state


@dataclass
class Workload:
    """What `executor.execute` trains: the module, one batch, and the loss as captured."""
    module: Any                                 # torch.nn.Module, at the graph's dtypes
    args: tuple
    target: Any
    loss_fn: Callable[..., Any] | None
    kwargs: dict[str, Any] | None = None
    source: str = ""                            # "zoo NAME" or "module SPEC"


def _zoo_overrides(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """The settings of a recorded model config that its family accepts as overrides."""
    from hybrid.zoo.registry import families

    key = name.strip().lower()
    for fam in families():
        if fam.match(key) is not None:
            return {k: v for k, v in config.items() if k in fam.overrides}
    return {}


def graph_dtype(graph: Any) -> Any:
    """The torch dtype the graph's parameters were captured at (fp32 when it does not say)."""
    import torch

    from hybrid.capture.encoding import parse_dtype

    first = next((t for t in graph.tensors if t.kind == "param" and "dtype" in t.extra), None)
    return parse_dtype(first.extra["dtype"]) if first is not None else torch.float32


def module_dtype(graph: Any) -> Any:
    """The dtype to cast a `--module` factory's floats to, or None to keep the factory's own.

    `hybrid capture --module` records `module.dtype`: a --dtype it cast to ("fp32" in every graph captured
    before the factory's own dtypes became the default), or null when it kept them. A graph that records no
    module (a Python capture) runs at its parameters' dtype, as before."""
    from hybrid.capture.encoding import parse_dtype

    rec = graph.extra.get("module")
    if isinstance(rec, dict) and "dtype" in rec:
        return parse_dtype(rec["dtype"])
    return graph_dtype(graph)


def _check_param_dtypes(graph: Any, module: Any, spec: str) -> None:
    """A factory run at its own dtypes must build the parameters the graph recorded (not a model since edited)."""
    params = bindings(graph).get("params", {})
    recorded = {t.id: t.extra.get("dtype") for t in graph.tensors}
    for name, p in module.named_parameters():
        want = recorded.get(params.get(name, ""))
        got = str(p.dtype).removeprefix("torch.")
        if want is not None and want != got:
            raise HybridError(f"--module {spec!r}: parameter {name!r} is {got} but the graph recorded {want}; "
                              "run the factory the graph was captured from, or capture it again")


def _cast_floats(tree: Any, dt: Any) -> Any:
    """Floating tensors of a factory's inputs at the graph's dtype (`capture --dtype` cast them the same way)."""
    import torch
    from torch.utils import _pytree as pytree

    return pytree.tree_map(lambda v: v.to(dt) if isinstance(v, torch.Tensor) and v.is_floating_point() else v, tree)


def zoo_spec(graph: Any, model: str | None = None, overrides: dict[str, Any] | None = None,
             graph_path: Path | str | None = None) -> Any:
    """The zoo model's spec the graph records (`model` must agree when given), with `overrides` applied."""
    from hybrid.zoo import get_model

    rec = graph.extra.get("model")
    if model is None:
        if not isinstance(rec, dict):
            where = repr(str(graph_path)) if graph_path is not None else repr(graph.name)
            raise HybridError(f"graph {where} records no zoo model nor --module; give --model or "
                              "--module PKG.MODULE:FACTORY, or run your own module from Python (executor.execute)")
        model = rec["name"]
    if isinstance(rec, dict) and rec.get("name") != model:
        raise HybridError(f"--model {model!r} but the graph was captured from {rec.get('name')!r}")
    cfg = _zoo_overrides(model, rec.get("config", {})) if isinstance(rec, dict) else {}
    cfg.update(overrides or {})
    return get_model(model, **cfg)


def capture_for_plan(model: str, plan: Any, batch: int | None = None, *, optimizer: str = "adam",
                     lr: float | None = None, optimizer_options: dict[str, Any] | None = None, dtype: str = "fp32",
                     overrides: dict[str, Any] | None = None) -> Any:
    """Capture zoo `model` now, refusing first (a capture can take a minute) when `plan` names another graph."""
    from hybrid.capture.api import capture_model
    from hybrid.zoo import get_model

    spec = get_model(model, **(overrides or {}))
    b = spec.default_batch if batch is None else batch
    if plan is not None and plan.graph != f"{spec.name}-b{b}":
        raise InvalidPlanError(f"the plan was made for graph {plan.graph!r}, not for {spec.name!r} at batch {b} "
                          f"({spec.name}-b{b}); give --graph with the graph it was made for, or plan this one")
    return capture_model(model, b, optimizer=optimizer, lr=lr, optimizer_options=optimizer_options or None,
                         dtype=dtype, overrides=overrides)


def workload(graph: Any, *, model: str | None = None, module: str | None = None, trust_module: bool = False,
             seed: int = 0, batch: int | None = None, overrides: dict[str, Any] | None = None,
             graph_path: Path | str | None = None) -> Workload:
    """Build what `graph` was captured from, seeded with `seed`: the module spec `module` (or, with
    `trust_module`, the one the graph records), else the zoo model the graph records (or `model`)."""
    import torch

    if model is not None and module is not None:
        raise HybridError("give --model (a zoo model) or --module (your own), not both")
    spec = module_to_run(graph, module, trust_module, graph_path) if model is None else None
    no_loss = bool(bindings(graph)) and not binds_loss(graph)   # the forward alone: no label, no loss
    if spec is not None:
        from hybrid.capture.user_module import load_user_model

        torch.manual_seed(seed)
        user = load_user_model(spec)
        mdt = module_dtype(graph)
        args, target, kwargs, built = user.args, user.target, user.kwargs, user.module
        check_module_state(graph, built, f"--module {spec!r}")   # before it runs, not a run that trains another
        if mdt is not None:
            args, target, kwargs = _cast_floats((args, target, kwargs), mdt)   # as capture did
            built = built.to(mdt)
        else:   # captured at the factory's own dtypes: run it at them
            _check_param_dtypes(graph, built, spec)
        return Workload(built, args, None if no_loss else target, None if no_loss else user.loss_fn, kwargs,
                        f"module {spec}")
    zoo = zoo_spec(graph, model, overrides, graph_path)
    dt = graph_dtype(graph)
    rec = graph.extra.get("model")
    b = int(rec["batch"]) if isinstance(rec, dict) and batch is None else (batch or zoo.default_batch)
    torch.manual_seed(seed)
    built = zoo.build().to(dt)
    if is_inference(graph):
        built.eval()    # as capture_model captured it: batch norm on its running statistics, dropout off
    args, target = zoo.make_inputs(b, torch.device("cpu"), dt)
    return Workload(built, args, None if no_loss else target, None if no_loss else zoo.loss, None,
                    f"zoo {zoo.name}")


