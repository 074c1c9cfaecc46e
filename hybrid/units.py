"""Human units on the command line: bytes (10GiB), bandwidth (12GB/s), durations (30m)."""
from __future__ import annotations

import re

from hybrid.errors import HybridError

_BYTE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
}
_TIME_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "m": 60.0, "min": 60.0,
               "h": 3600.0}
_NUM = r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*"


def parse_bytes(text: str | int | float, what: str = "size") -> int:
    """'10GiB' -> 10737418240; plain numbers are bytes."""
    if isinstance(text, (int, float)):
        return int(text)
    m = re.fullmatch(_NUM + r"([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _BYTE_UNITS:
        raise HybridError(f"cannot read {what} {text!r}: write a number of bytes with an optional unit, e.g. 10GiB, 512MB, 1073741824")
    return int(round(float(m.group(1)) * _BYTE_UNITS[m.group(2).lower()]))


def parse_bandwidth(text: str | int | float, what: str = "bandwidth") -> float:
    """'12GB/s' -> 12e9 bytes per second; plain numbers are bytes per second."""
    if isinstance(text, (int, float)):
        return float(text)
    s = str(text).strip()
    if s.lower().endswith("/s"):
        s = s[:-2]
    m = re.fullmatch(_NUM + r"([A-Za-z]*)\s*", s)
    if not m or m.group(2).lower() not in _BYTE_UNITS:
        raise HybridError(f"cannot read {what} {text!r}: write bytes per second with a unit, e.g. 12GB/s, 25GiB/s")
    value = float(m.group(1)) * _BYTE_UNITS[m.group(2).lower()]
    if value <= 0:
        raise HybridError(f"{what} must be positive, got {text!r}")
    return value


def parse_duration(text: str | int | float, what: str = "duration", short: bool = False) -> float:
    """'30m' -> 1800.0 seconds; '1h30m' and plain seconds work too.

    `short` is for durations of micro- to milliseconds (a per-transfer latency): there a bare number could
    mean any unit (`--latency 10` once meant 10 s, a makespan 187,136x the ideal), and `m` or `h` is almost
    surely a typo for ms, so both are refused (0 needs no unit). Numbers from Python are seconds.
    """
    if isinstance(text, (int, float)):
        return float(text)
    s = str(text).strip().lower()
    parts = re.findall(r"([0-9]*\.?[0-9]+)\s*([a-z]*)", s)
    if not parts or "".join(a + b for a, b in parts) != s.replace(" ", ""):
        example = "10us, 5ms, 800ns" if short else "90s, 30m, 1h, 1h30m"
        raise HybridError(f"cannot read {what} {text!r}: write e.g. {example}")
    total = 0.0
    for num, unit in parts:
        if unit not in _TIME_UNITS:
            raise HybridError(f"unknown time unit {unit!r} in {what} {text!r}: use ns, us, ms, s, m (minutes) or h")
        if short and unit == "" and float(num) != 0:
            raise HybridError(f"{what} {text} needs a unit, e.g. {num}us or {num}ms")
        if short and unit in ("m", "min", "h"):
            raise HybridError(f"{what} {text} is {float(num) * _TIME_UNITS[unit]:g} seconds ({unit} is "
                              f"{'minutes' if unit != 'h' else 'hours'}); for milliseconds write {num}ms")
        total += float(num) * _TIME_UNITS[unit]
    return total


def format_bytes(n: float) -> str:
    """Binary units, three significant digits: 1.50 GiB."""
    n = float(n)
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def format_seconds(t: float) -> str:
    if t == float("inf"):
        return "inf"
    if t >= 1:
        return f"{t:.4g} s"
    if t >= 1e-3:
        return f"{t * 1e3:.4g} ms"
    return f"{t * 1e6:.4g} us"


def round_up(n, align: int):
    """`n` (an int or an int array) rounded up to a multiple of `align`: the bytes an aligned copy occupies
    (docs/formats.md, rule 5) and an aligned offset."""
    return (n + align - 1) // align * align
