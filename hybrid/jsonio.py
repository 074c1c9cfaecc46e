"""Strict JSON for graph and plan files: finite numbers only, read and written.

Python's json module reads and writes `NaN`, `Infinity` and `1e400` (as inf), which other parsers reject and
which no figure of a graph or plan may be. Reading refuses them naming the field (`events[3].start_s`);
writing refuses them before a byte is written, so no command leaves a file a strict parser cannot read. An
object with a key twice is refused (Python keeps the last one silently), and files nested deeper than Python's
recursion allows are refused in one line too.
"""
from __future__ import annotations

import json
import math
from typing import Any

from hybrid.errors import FormatError, HybridError


class _NonFinite(Exception):
    pass


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise _NonFinite(text)
    return v


def _no_constant(text: str) -> float:
    raise _NonFinite(text)


def non_finite_path(obj: Any, path: str = "") -> tuple[str, Any] | None:
    """Where in `obj` (a parsed JSON value) the first non-finite number is, as `a.b[3].c`, with the value."""
    stack: list[tuple[str, Any]] = [(path, obj)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, float):
            if not math.isfinite(v):
                return where or "(top level)", v
        elif isinstance(v, dict):
            stack.extend((f"{where}.{k}" if where else str(k), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, (list, tuple)):
            stack.extend((f"{where}[{i}]", x) for i, x in reversed(list(enumerate(v))))
    return None


# Files up to this size have every float checked as it is parsed (a Python call per float: ~30% slower
# than json's C parser alone). Larger ones (plans of 10^5 ops) refuse NaN and Infinity tokens as they are
# parsed, at C speed, and leave an overflowing literal (1e400, read as inf) to the readers' checks of every
# typed field (hybrid.units.checked_number); an untyped extra field holding one is refused when written.
EVERY_FLOAT_BELOW = 8 << 20


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are unique: Python's json keeps the last of a repeated key, so
    `{"id": "a1", "bytes": -5, "id": "a2", "bytes": 1000}` read as a2 of 1000 bytes, the rest unseen."""
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _DuplicateKey(k)
            seen.add(k)
    return d


def loads_strict(data: bytes | str, where: str) -> Any:
    """The JSON value in `data`; a FormatError naming `where` (the file) for anything that is not strict JSON
    with finite numbers and unique keys in every object, or is nested too deeply to read."""
    try:
        if len(data) > EVERY_FLOAT_BELOW:
            return json.loads(data, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
        return json.loads(data, parse_float=_finite_float, parse_constant=_no_constant,
                          object_pairs_hook=_unique_keys)
    except _DuplicateKey as e:
        raise FormatError(f"{where}: key {e.args[0]!r} appears twice in one object; a file holds each field "
                          "once (JSON readers disagree on which of the two counts)") from None
    except _NonFinite as e:
        # rare: parse again, permissively, to name the field that holds it
        try:
            found = non_finite_path(json.loads(data))
        except (ValueError, RecursionError):
            found = None
        field = f"field {found[0]} is {e.args[0]}" if found else f"it holds {e.args[0]}"
        raise FormatError(f"{where}: {field}; numbers must be finite (strict JSON has no NaN or Infinity, and "
                          "1e400 overflows)") from None
    except json.JSONDecodeError as e:
        raise FormatError(f"{where}: not JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except UnicodeDecodeError:
        raise FormatError(f"{where}: not JSON (not UTF-8 text)") from None
    except RecursionError:
        raise FormatError(f"{where}: JSON nested too deeply to read; a graph or plan file is a few levels "
                          "deep") from None


def dumps_strict(obj: Any, what: str, **kwargs: Any) -> str:
    """json.dumps with `allow_nan=False`: a non-finite figure is a HybridError naming its field, raised before
    anything is written."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:
        found = non_finite_path(obj)
        if found is None:
            raise
        raise HybridError(f"{what}: field {found[0]} is {found[1]!r}; not written (a written file holds finite "
                          "numbers only)") from None


def report_json(obj: Any, **kwargs: Any) -> str:
    """A command's `--json` report: strict JSON, a figure that does not apply (NaN, an infinite bound) written as
    null, as `hybrid info --json` does (Python's `NaN` is not JSON: a script's parser refused optimize's rows)."""
    def clean(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if hasattr(x, "item") and callable(x.item) and getattr(x, "ndim", None) == 0:   # numpy scalars
            return clean(x.item())
        return x

    return json.dumps(clean(obj), allow_nan=False, **kwargs)
