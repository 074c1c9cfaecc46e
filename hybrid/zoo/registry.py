"""Model names -> ModelSpec: the one place that knows every family's name pattern and overrides.

Family modules build plain `nn.Module`s; this module parses names such as
`rnn-8-8k` or `wresnet-152-10`, checks overrides (`seq_len=`, `image_size=`...)
against what the family accepts, and wraps the result in a `ModelSpec` that the
capture step and `hybrid models` use. Overrides given as strings (from a command
line) are converted to the type of the family's default.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from hybrid.errors import HybridError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch


@dataclass(frozen=True)
class ModelSpec:
    """A zoo model: how to build it, feed it one batch and score it.

    `build` works under `with torch.device("meta"):` as well as on a real
    device and is deterministic given `torch.manual_seed`. `make_inputs(batch,
    device, dtype)` returns `(forward args, target)`; on the meta device it
    allocates nothing. `loss(output, target)` is a scalar. `config` records the
    resolved settings (sequence length, image size, ...) after overrides.
    """

    name: str
    family: str
    paper: str
    description: str
    default_batch: int
    build: Callable[[], "torch.nn.Module"]
    make_inputs: Callable[[int, "torch.device", "torch.dtype"], tuple[tuple, Any]]
    loss: Callable[[Any, Any], "torch.Tensor"]
    config: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Family:
    """One name pattern and the factory that turns a matching name into a spec.

    `make(name, **groups, **overrides)` receives the pattern's named groups as
    ints; its keyword parameters with defaults that are not groups are the
    family's overrides, documented in `overrides` (override -> help text).
    """

    key: str
    pattern: str
    template: str
    canonical: tuple[str, ...]
    make: Callable[..., ModelSpec]
    overrides: Mapping[str, str]
    # an override's least value where the model breaks below it (its help text says so): refused here in one line
    # naming it, not by torch's "Output size is too small" at capture
    at_least: Mapping[str, int] = field(default_factory=dict)

    def match(self, name: str) -> dict[str, int] | None:
        m = re.fullmatch(self.pattern, name)
        if m is None:
            return None
        return {k: int(v) for k, v in m.groupdict().items()}


def _families() -> list[Family]:
    # Imported here so that importing this module stays cheap and the family
    # modules can import `ModelSpec` from it without a cycle.
    try:
        from hybrid.zoo import (alexnet, googlenet, inception, mobilenet, nasnet, resnet, rnn, squeezenet,
                                transformers_lm, unet, vgg)
    except ImportError as e:
        if e.name != "torch":
            raise
        raise HybridError("the model zoo needs PyTorch: pip install 'hybrid-offload[torch]'") from None

    fams: list[Family] = []
    for mod in (rnn, resnet, inception, nasnet, vgg, unet, alexnet, mobilenet, squeezenet, googlenet,
                transformers_lm):
        fams.extend(mod.FAMILIES)
    return fams


_FAMILY_CACHE: list[Family] = []


def families() -> list[Family]:
    """Every registered family, in listing order."""
    if not _FAMILY_CACHE:
        _FAMILY_CACHE.extend(_families())
    return _FAMILY_CACHE


def _coerce(key: str, value: Any, default: Any, model: str) -> Any:
    """Convert a command-line string to the type of the override's default."""
    if not isinstance(value, str) or isinstance(default, str):
        return value
    text = value.strip()
    try:
        if isinstance(default, bool):
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if isinstance(default, int) or default is None:
            return int(text)
        if isinstance(default, float):
            return float(text)
    except ValueError:
        kind = type(default).__name__ if default is not None else "int"
        raise HybridError(f"override {key}={value!r} for model {model!r} is not a valid {kind}") from None
    return value


def _check_positive(key: str, value: Any, model: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if key.endswith("dropout") or key in ("dropout",):
        if not 0 <= value < 1:
            raise HybridError(f"override {key}={value} for model {model!r} must be in [0, 1)")
    elif value <= 0:
        raise HybridError(f"override {key}={value} for model {model!r} must be positive")


def available_names() -> str:
    """One line listing the fixed names and the parameterised patterns, for error messages."""
    fixed: list[str] = []
    patterns: list[str] = []
    for fam in families():
        if fam.template in fam.canonical:
            fixed.extend(fam.canonical)
        else:
            patterns.append(fam.template)
    return ", ".join(fixed + patterns)


def get_model(name: str, **overrides: Any) -> ModelSpec:
    """The spec for `name` (case-insensitive), with family overrides applied.

    Parameterised names: rnn-{L}-{X}k, brnn-{L}-{X}k, wresnet-{depth}-{X},
    inception-v4-{X}, nasnet-{R}, resnet-{depth}. Unknown names or overrides
    raise HybridError naming what is accepted.
    """
    key = str(name).strip().lower()
    for fam in families():
        groups = fam.match(key)
        if groups is None:
            continue
        params = inspect.signature(fam.make).parameters
        unknown = sorted(set(overrides) - set(fam.overrides))
        if unknown:
            allowed = ", ".join(f"{k} ({v})" for k, v in fam.overrides.items()) or "none"
            raise HybridError(f"model {key!r} does not accept override {unknown[0]!r}; it accepts: {allowed}")
        kwargs: dict[str, Any] = {}
        for k, v in overrides.items():
            v = _coerce(k, v, params[k].default, key)
            _check_positive(k, v, key)
            least = fam.at_least.get(k)
            if least is not None and v < least:
                raise HybridError(f"override {k}={v} for model {key!r} must be at least {least} (its layers shrink "
                                  "the input below one pixel otherwise)")
            kwargs[k] = v
        return fam.make(key, **groups, **kwargs)
    module_like = ":" in key or "/" in key or key.endswith(".py")
    for fam in families():   # a family's name with a size it does not come in (inception-v4-0.5, vgg20)
        prefix = fam.template.split("{")[0]
        if (not module_like and "{" in fam.template and prefix and key.startswith(prefix)
                and re.fullmatch(r"[\d.,k-]+", key[len(prefix):])):
            raise HybridError(f"unknown model {name!r}: names of that family follow {fam.template} (e.g. "
                              f"{', '.join(fam.canonical[:3])}; `hybrid models` lists them)")
    if any(c in key for c in ".:/") or key.endswith(".py"):   # a Python module given where a zoo name goes
        mod = str(name).strip().removesuffix(".py").replace("/", ".").split(":")[0]
        raise HybridError(f"unknown model {name!r}: not a zoo model name (`hybrid models` lists them); for your "
                          f"own nn.Module, `hybrid capture --module {mod}:FACTORY` (a function returning (module, "
                          "inputs, target, loss_fn); docs/capture.md)")
    raise HybridError(f"unknown model {name!r}; available: {available_names()} (run `hybrid models`)")


def list_models() -> list[ModelSpec]:
    """One canonical spec per family and size named in the papers, in listing order."""
    return [get_model(n) for fam in families() for n in fam.canonical]


def parameter_count(spec: ModelSpec) -> int:
    """Number of distinct parameters (shared ones counted once), built on the meta device."""
    import torch

    with torch.device("meta"):
        model = spec.build()
    return sum(p.numel() for p in model.parameters())
