"""A user's own model from the command line: `--module pkg.module:factory`.

The factory is a function of no arguments that returns what a training step
needs, either as a tuple `(module, inputs, target, loss_fn)` or as a dict with
those keys (`inputs` may be one tensor or a tuple of positional inputs;
`kwargs` is optional in the dict form). `hybrid capture` traces it like a zoo
model and records the spec in the graph (`extra["module"]`), so `hybrid
execute` can rebuild the same model: it seeds torch with `--seed` and calls the
factory again, so the factory should build its weights from torch's global
generator (the usual `nn.Module` constructors do) and its inputs
deterministically. A spec is code and a graph file is data: `execute` imports
a graph's spec only when `--module` names it too or `--trust-graph-module` is
given (executor.preflight.module_to_run); `load_user_model` itself imports
whatever it is given.

`pkg.module` is imported with the current folder on `sys.path`, so a file
`mymodel.py` beside you is `--module mymodel:make`.
"""
from __future__ import annotations

import importlib
import inspect
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

from hybrid.errors import HybridError, first_line

FACTORY_CONTRACT = ("a function of no arguments returning (module, inputs, target, loss_fn) or a dict with keys "
                    "module, inputs, target, loss_fn (and optionally kwargs)")


@dataclass
class UserModel:
    spec: str
    module: Any                      # torch.nn.Module
    args: tuple
    target: Any
    loss_fn: Callable[..., Any] | None
    kwargs: dict[str, Any] | None = None


def _factory(spec: str) -> Callable[[], Any]:
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise HybridError(f"--module {spec!r}: expected pkg.module:factory, e.g. --module mymodel:make")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if missing and missing != mod_name and not mod_name.startswith(missing + "."):
            # the file was found; its own import of another package failed
            raise HybridError(f"--module {spec!r}: importing {mod_name!r} needs {missing!r}, which is not "
                              f"installed ({e}); install it in this environment") from None
        raise HybridError(f"--module {spec!r}: cannot import {mod_name!r} ({e}); run from the folder that holds it "
                          "or put it on PYTHONPATH") from None
    except Exception as e:  # noqa: BLE001 - the user's file can raise anything on import; one line
        raise HybridError(f"--module {spec!r}: importing {mod_name!r} raised {type(e).__name__}: "
                          f"{first_line(e)}") from None
    fn = mod
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise HybridError(f"--module {spec!r}: {mod_name!r} has no {attr!r}")
    if not callable(fn):
        raise HybridError(f"--module {spec!r}: {attr!r} is not a function; it must be {FACTORY_CONTRACT}")
    try:
        inspect.signature(fn).bind()
    except TypeError as e:   # it needs arguments, which the command line cannot give
        raise HybridError(f"--module {spec!r}: the factory must take no arguments ({e})") from None
    except ValueError:       # no signature to inspect (a builtin): let the call tell
        pass
    return fn


def _call(spec: str, fn: Callable[[], Any]) -> Any:
    """The factory's result; what it raises is the user's error, reported in one line."""
    try:
        return fn()
    except HybridError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's code can raise anything
        raise HybridError(f"--module {spec!r}: the factory raised {type(e).__name__}: {first_line(e)} "
                          "(call it in Python for the traceback)") from None


def load_user_model(spec: str) -> UserModel:
    """Import and call the factory named by `spec`; check what it returns."""
    import torch

    out = _call(spec, _factory(spec))
    if isinstance(out, dict):
        missing = [k for k in ("module", "inputs", "target", "loss_fn") if k not in out]
        if missing:
            raise HybridError(f"--module {spec!r}: the factory's dict lacks {', '.join(missing)}; it must be "
                              f"{FACTORY_CONTRACT}")
        module, inputs, target, loss_fn, kwargs = (out["module"], out["inputs"], out["target"], out["loss_fn"],
                                                   out.get("kwargs"))
    elif isinstance(out, (tuple, list)) and len(out) == 4:
        module, inputs, target, loss_fn = out
        kwargs = None
    else:
        what = (f"a {type(out).__name__} of {len(out)} values" if isinstance(out, (tuple, list))
                else type(out).__name__)
        raise HybridError(f"--module {spec!r}: the factory returned {what}; it must be {FACTORY_CONTRACT}")
    if not isinstance(module, torch.nn.Module):
        raise HybridError(f"--module {spec!r}: the factory's module is a {type(module).__name__}, not an nn.Module")
    # a tuple is the positional inputs, anything else one input (a list too: `forward(self, xs)`), as capture() reads
    # its args; a list was spread here, so a forward taking a list failed only under the CLI
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    if loss_fn is not None and not callable(loss_fn):
        raise HybridError(f"--module {spec!r}: loss_fn is not callable")
    return UserModel(spec, module, args, target, loss_fn, kwargs)
