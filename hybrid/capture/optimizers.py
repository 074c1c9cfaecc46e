"""Optimizer steps as graph ops: one op per parameter that updates it and its state in place.

Each op replays the kernels of torch.optim's single-tensor path, in its order and with its scalars, so a
replay matches `torch.optim.SGD/Adam/AdamW(foreach=False)` bitwise. Where torch computes a temporary the size of
the parameter (Adam's denominator; the gradient with weight decay, negated to maximize, or Nesterov's), the
replay computes it into one buffer, `work`: a fresh one, or the gradient itself where the caller says the step
may consume it (the executor, when the step is the gradient's last reader: executor.ops), so the step then
allocates nothing. The step counter (Adam's bias correction) is host-side
state, as in torch with `capturable=False`: it is not a graph tensor; the replaying executor passes the
1-based iteration number (or, recording a CUDA graph, a device counter: then torch's capturable Adam runs).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable

import torch

from hybrid.errors import HybridError

NAMES = ("sgd", "adam", "adamw")

# Defaults are torch.optim's.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "sgd": {"lr": 1e-3, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0, "nesterov": False, "maximize": False},
    "adam": {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "maximize": False},
    "adamw": {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2, "maximize": False},
}


@dataclass(frozen=True)
class OptimizerSpec:
    """Which update rule and its hyper-parameters, per parameter name."""

    name: str
    hyper: dict[str, dict[str, Any]]   # parameter name -> hyper-parameters (param groups may differ)

    def state_keys(self, param: str) -> tuple[str, ...]:
        """torch.optim's state names, which are also the graph's state tensor suffixes."""
        if self.name == "sgd":
            return ("momentum_buffer",) if self.hyper[param]["momentum"] != 0 else ()
        return ("exp_avg", "exp_avg_sq")

    def op_kwargs(self, param: str) -> dict[str, Any]:
        h = dict(self.hyper[param])
        if "betas" in h:
            h["beta1"], h["beta2"] = (float(b) for b in h.pop("betas"))
        return h

    def cost_per_element(self, param: str) -> tuple[int, int]:
        """(FLOPs, tensor reads + writes) per parameter element for a fused kernel."""
        h = self.hyper[param]
        if self.name == "sgd":
            flops, rw = 2, 3                      # p -= lr * g: read p, g; write p
            if h["momentum"] != 0:
                flops, rw = flops + 2, rw + 2     # buf = m * buf + (1 - d) * g: read + write buf
            if h["nesterov"]:
                flops += 2
        else:
            flops, rw = 12, 7                     # read p, g, m, v; write p, m, v
        if h["weight_decay"] != 0:
            flops += 2
        return flops, rw

    def to_json(self) -> dict[str, Any]:
        groups: list[dict[str, Any]] = []
        for pname, h in self.hyper.items():
            enc = {k: (list(v) if isinstance(v, tuple) else v) for k, v in h.items()}
            for g in groups:
                if g["hyper"] == enc:
                    g["params"].append(pname)
                    break
            else:
                groups.append({"hyper": enc, "params": [pname]})
        return {"name": self.name, "groups": groups}


def _float(v: Any, key: str) -> Any:
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise HybridError(f"optimizer option {key!r} must be a number")
        return float(v.item())
    return v


def _number(v: Any, key: str, what: str = "a finite number") -> float:
    """A hyper-parameter's number, or one line naming the option (torch would fail inside its update)."""
    v = _float(v, key)
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
        raise HybridError(f"optimizer option {key!r} must be {what}, got {v!r}")
    return v


def _check_hyper(name: str, h: dict[str, Any]) -> dict[str, Any]:
    allowed = _DEFAULTS[name]
    out: dict[str, Any] = {}
    for k, v in h.items():
        if k not in allowed:
            raise HybridError(f"optimizer {name!r} does not take option {k!r}; it takes: {', '.join(allowed)}")
        if k == "betas":
            pair = "a pair of numbers in [0, 1), such as (0.9, 0.999)"
            if isinstance(v, (str, bytes)) or not isinstance(v, (tuple, list)) or len(v) != 2:
                raise HybridError(f"optimizer option 'betas' must be {pair}, got {v!r}")
            v = tuple(_number(b, k, pair) for b in v)
            if not all(0 <= b < 1 for b in v):
                raise HybridError(f"optimizer option 'betas' must be {pair}, got {v!r}")
        elif isinstance(allowed[k], bool):
            if not isinstance(v, bool):
                raise HybridError(f"optimizer option {k!r} must be True or False, got {v!r}")
        else:
            v = _number(v, k)
        out[k] = v
    full = {**allowed, **out}
    if full["lr"] < 0:
        raise HybridError(f"learning rate must not be negative, got {full['lr']}")
    for k in ("eps", "weight_decay", "momentum"):   # as torch.optim refuses them
        if k in full and full[k] < 0:
            raise HybridError(f"optimizer option {k!r} must not be negative, got {full[k]}")
    if name == "sgd" and full["nesterov"] and (full["momentum"] <= 0 or full["dampening"] != 0):
        raise HybridError("sgd: nesterov needs momentum > 0 and dampening 0")
    return full


def from_name(name: str, params: list[str], options: dict[str, Any]) -> OptimizerSpec:
    key = name.strip().lower()
    if key not in NAMES:
        raise HybridError(f"unsupported optimizer {name!r}: use one of {', '.join(NAMES)}, or none for inference")
    h = _check_hyper(key, options)
    return OptimizerSpec(key, {p: h for p in params})


def from_torch(opt: Any, module: torch.nn.Module) -> OptimizerSpec:
    """Read an existing torch.optim.SGD/Adam/AdamW (its param groups) for a module's parameters."""
    kinds = {torch.optim.AdamW: "adamw", torch.optim.Adam: "adam", torch.optim.SGD: "sgd"}
    name = kinds.get(type(opt))
    if name is None:
        raise HybridError(f"unsupported optimizer {type(opt).__name__}: use torch.optim.SGD, Adam or AdamW, "
                          "or one of the names sgd, adam, adamw")
    by_id = {id(p): n for n, p in module.named_parameters()}
    hyper: dict[str, dict[str, Any]] = {}
    for group in opt.param_groups:
        if group.get("amsgrad"):
            raise HybridError("Adam with amsgrad=True is not supported by capture; use amsgrad=False")
        if group.get("capturable") or group.get("differentiable"):
            raise HybridError("capturable/differentiable optimizers are not supported by capture")
        h = {k: group[k] for k in _DEFAULTS[name] if k in group}
        h = _check_hyper(name, h)
        for p in group["params"]:
            if id(p) not in by_id:
                raise HybridError("the optimizer holds a tensor that is not a parameter of the module")
            hyper[by_id[id(p)]] = h
    return OptimizerSpec(name, hyper)


# ---- replay ------------------------------------------------------------------------

def _grad(param: torch.Tensor, grad: torch.Tensor, work: list[torch.Tensor], weight_decay: float,
          maximize: bool) -> torch.Tensor:
    """torch's `-grad` (maximize) and `grad.add(param, alpha=weight_decay)`, computed into the step's buffer
    (`work`: empty until one is made, or the gradient itself) instead of fresh tensors: same kernels, same
    bits."""
    g = grad
    if maximize:
        g = torch.neg(grad, out=_work(param, work))
    if weight_decay != 0:
        g = torch.add(g, param, alpha=weight_decay, out=_work(param, work))
    return g


def _work(param: torch.Tensor, work: list[torch.Tensor]) -> torch.Tensor:
    """The step's one buffer of the parameter's size: the one given, else a fresh one (allocated now)."""
    if not work:
        work.append(torch.empty_like(param))
    return work[0]


def _adam(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, *,
          step: int | torch.Tensor, decoupled: bool, lr: float, beta1: float, beta2: float, eps: float,
          weight_decay: float, maximize: bool, work: torch.Tensor | None) -> None:
    if isinstance(step, torch.Tensor) or param.is_complex():
        # A device counter (a recorded CUDA graph's): torch's capturable Adam advances it on every replay.
        # Complex parameters: torch's own code (it views them as real), with its temporaries.
        from torch.optim.adam import adam

        if isinstance(step, torch.Tensor):
            step_t, capturable = step, True
        else:
            step_t, capturable = torch.tensor(float(step - 1), dtype=torch.float32), False   # torch adds 1 first
        adam([param], [grad], [exp_avg], [exp_avg_sq], [], [step_t], foreach=False, capturable=capturable,
             differentiable=False, fused=None, grad_scale=None, found_inf=None, has_complex=param.is_complex(),
             decoupled_weight_decay=decoupled, amsgrad=False, beta1=beta1, beta2=beta2, lr=lr,
             weight_decay=weight_decay, eps=eps, maximize=maximize)
        return
    # torch.optim.adam._single_tensor_adam, capturable=False, amsgrad=False
    scratch = [] if work is None else [work]
    if decoupled:
        if weight_decay != 0:
            param.mul_(1 - lr * weight_decay)
        g = _grad(param, grad, scratch, 0.0, maximize)
    else:
        g = _grad(param, grad, scratch, weight_decay, maximize)
    exp_avg.lerp_(g, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    t = float(step)                 # torch: the float32 step counter, read back as a Python float
    bias_correction1 = 1 - beta1 ** t
    bias_correction2 = 1 - beta2 ** t
    step_size = lr / bias_correction1
    bias_correction2_sqrt = bias_correction2 ** 0.5
    denom = torch.sqrt(exp_avg_sq, out=_work(param, scratch))     # g, if it is that buffer, is read no more
    torch.div(denom, bias_correction2_sqrt, out=denom).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-step_size)


def adam_step(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, *,
              step: int | torch.Tensor, work: torch.Tensor | None = None, **h: Any) -> None:
    _adam(param, grad, exp_avg, exp_avg_sq, step=step, decoupled=False, work=work, **h)


def adamw_step(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, *,
               step: int | torch.Tensor, work: torch.Tensor | None = None, **h: Any) -> None:
    _adam(param, grad, exp_avg, exp_avg_sq, step=step, decoupled=True, work=work, **h)


def sgd_step(param: torch.Tensor, grad: torch.Tensor, *state: torch.Tensor, step: int, lr: float, momentum: float,
             dampening: float, weight_decay: float, nesterov: bool, maximize: bool,
             work: torch.Tensor | None = None) -> None:
    """torch.optim.sgd._single_tensor_sgd. On the first step torch starts the momentum buffer as a copy of the
    gradient; so do we, into the state tensor."""
    scratch: list[torch.Tensor] = [] if work is None else [work]
    g = _grad(param, grad, scratch, weight_decay, maximize)
    if momentum != 0:
        buf = state[0]
        if step == 1:
            buf.copy_(g)
        else:
            buf.mul_(momentum).add_(g, alpha=1 - dampening)
        g = torch.add(g, buf, alpha=momentum, out=_work(param, scratch)) if nesterov else buf
    param.add_(g, alpha=-lr)


# Steps whose count may be a device tensor (executor.ops.OpRunner.device_steps, for CUDA graphs).
adam_step.device_step = adamw_step.device_step = True  # type: ignore[attr-defined]

_REPLAY: dict[str, Callable[..., None]] = {"hybrid.sgd": sgd_step, "hybrid.adam": adam_step,
                                           "hybrid.adamw": adamw_step}


def replay_function(target: str) -> Callable[..., None]:
    try:
        return _REPLAY[target]
    except KeyError:
        raise HybridError(f"unknown optimizer op target {target!r}; known: {', '.join(_REPLAY)}") from None
