"""Human units on the command line: bytes (10GiB), bandwidth (12GB/s), durations (30m)."""
from __future__ import annotations

import math
import numbers
import re
from typing import Any

from hybrid.errors import HybridError

# The ranges every number read from a file or a flag must fall in (anything else is refused in one line naming
# the field): byte counts up to 64 PiB, so that sums over a graph's tensors stay exact in int64 and float64
# arithmetic never sees an infinity; durations up to 1e9 s (31 years); rates from 1 byte/s to 1 PB/s, so that
# bytes / rate stays finite; alignments up to 1 GiB.
MAX_BYTES = 2**56
MAX_SECONDS = 1e9
MAX_INTEGER = 2**1000   # JSON integers beyond this (hundreds of digits) are refused: math.isfinite overflows on them
MIN_RATE, MAX_RATE = 1.0, 1e15
MAX_ALIGNMENT = 2**30

_BYTE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15,
}
_TIME_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "m": 60.0, "min": 60.0,
               "h": 3600.0}
_NUM = r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*"


def _bits_refused(number: str, unit: str, text: Any, what: str, per_second: str = "") -> None:
    """A unit ending in a lowercase b (Mb, gb, Mib, b) reads as bits to a network or storage engineer (12Gb/s is
    1.5 GB/s) and as bytes to others: refused, naming the byte spellings, rather than read one way silently."""
    if not unit or unit[-1] != "b":
        return
    core = unit[:-1]
    binary = core[-1:] in ("i", "I")
    prefix = (core[:-1] if binary else core).upper()
    exp = {"K": 3, "M": 6, "G": 9, "T": 12, "P": 15}.get(prefix)
    if exp is None:
        spelled = f"{number}B{per_second}"
    elif binary:
        spelled = f"{number}{prefix}iB{per_second} (2^{exp // 3 * 10} bytes)"
    else:
        spelled = (f"{number}{prefix}B{per_second} (10^{exp} bytes) or {number}{prefix}iB{per_second} "
                   f"(2^{exp // 3 * 10} bytes)")
    raise HybridError(f"cannot read {what} {str(text).strip()!r}: a lowercase b means bits; for bytes write "
                      f"{spelled}")


def parse_bytes(text: str | int | float, what: str = "size") -> int:
    """'10GiB' -> 10737418240; plain numbers are bytes."""
    if isinstance(text, (int, float)):
        return checked_bytes(text, what)
    m = re.fullmatch(_NUM + r"([A-Za-z]*)\s*", str(text))
    if m:
        _bits_refused(m.group(1), m.group(2), text, what)
    negative = re.fullmatch(r"\s*-" + _NUM + r"([A-Za-z]*)\s*", str(text)) if not m else None
    if negative and negative.group(2).lower() in _BYTE_UNITS:
        raise HybridError(f"{what} cannot be negative, got {text!r}")
    if not m or m.group(2).lower() not in _BYTE_UNITS:
        raise HybridError(f"cannot read {what} {text!r}: write a number of bytes with an optional unit, e.g. 10GiB, 512MB, 1073741824")
    value = float(m.group(1)) * _BYTE_UNITS[m.group(2).lower()]
    if not value <= MAX_BYTES:   # also 1e400 (inf)
        raise HybridError(f"{what} {text!r} is more than {format_bytes(MAX_BYTES)}, the most this tool takes")
    if m.group(2).lower() in ("", "b") and value != int(value):   # `--memory 0.6` was read as 1 byte
        n = m.group(1)
        raise HybridError(f"cannot read {what} {str(text).strip()!r}: bytes are a whole number; write e.g. {n}GiB "
                          f"or {n}MiB (or a percentage of the peak, e.g. 60%, where the flag takes one)")
    if 0 < value < 1:   # `0.0006KB` was 1 byte, `0.0005KB` 0
        raise HybridError(f"cannot read {what} {str(text).strip()!r}: that is less than a byte")
    return int(round(value))


def parse_share(text: Any, what: str) -> float | None:
    """'50%' -> 0.5 (a share of the unswapped peak, where a command takes one); None for text without a
    trailing %, which is then a size. Refused outside (0%, 1000%]."""
    if not isinstance(text, str) or not text.strip().endswith("%"):
        return None
    t = text.strip()
    m = re.fullmatch(_NUM + "%", t)
    if not m:
        raise HybridError(f"cannot read {what} {t!r}: write a size (e.g. 64MiB) or a percentage of the unswapped "
                          "peak (e.g. 40%)")
    share = float(m.group(1)) / 100.0
    if not 0.0 < share <= 10.0:
        raise HybridError(f"{what} {t!r}: a percentage of the peak must be within (0%, 1000%]")
    return share


BARE_MEMORY_WARN = 1 << 20   # a device memory written without a unit below this many bytes: a unit forgotten


class UnitWarning(UserWarning):
    """A size read as written that was likely meant in another unit (`--memory 100`: 100 bytes)."""


def parse_memory(text: str | int | float, what: str = "--memory") -> int:
    """A device's memory, as `parse_bytes` reads it; text without a unit under 1 MiB (`--memory 100`, meant MiB
    or GiB: no graph runs in 100 bytes) is warned (UnitWarning), not refused: a bare number is bytes."""
    value = parse_bytes(text, what)
    if isinstance(text, str) and re.fullmatch(_NUM, text) and 0 < value < BARE_MEMORY_WARN:
        import warnings

        t = text.strip()
        warnings.warn(f"{what} {t} has no unit, so it is {counted(value, 'byte')}; write {t}MiB or {t}GiB "
                      f"(or {t}B to mean bytes)", UnitWarning, stacklevel=2)
    return value


def parse_bandwidth(text: str | int | float, what: str = "bandwidth") -> float:
    """'12GB/s' -> 12e9 bytes per second; numbers from Python are bytes per second. Text needs a unit (`--h2d 12`
    once meant 12 bytes per second, a makespan of 99 days); '12B/s' says bytes per second."""
    if isinstance(text, (int, float)):
        return checked_number(text, what, lo=MIN_RATE, hi=MAX_RATE)
    s = str(text).strip()
    per_second = s.lower().endswith("/s")
    if per_second:
        s = s[:-2]
    m = re.fullmatch(_NUM + r"([A-Za-z]*)\s*", s)
    if m:
        _bits_refused(m.group(1), m.group(2), text, what, "/s")
    if m and not m.group(2):   # a bare number: which unit was meant is not ours to guess (12/s suggested 12 B/s)
        raise HybridError(f"cannot read {what} {text!r}: give the number a unit, e.g. {s.strip()}GB/s (or "
                          f"{s.strip()}B/s for bytes per second)")
    if m and m.group(2).lower() in _BYTE_UNITS and not per_second:   # 12GB is a size: a rate says per second
        raise HybridError(f"cannot read {what} {text!r}: that is a size; a rate says per second, e.g. {s}/s")
    if not m or not m.group(2) or m.group(2).lower() not in _BYTE_UNITS:
        raise HybridError(f"cannot read {what} {text!r}: write bytes per second with a unit, e.g. 12GB/s, 25GiB/s")
    value = float(m.group(1)) * _BYTE_UNITS[m.group(2).lower()]
    if value <= 0:
        raise HybridError(f"{what} must be positive, got {text!r}")
    return checked_number(value, f"{what} {text!r}", lo=MIN_RATE, hi=MAX_RATE)


def parse_duration(text: str | int | float, what: str = "duration", short: bool = False) -> float:
    """'30m' -> 1800.0 seconds; '1h30m' and plain seconds work too.

    `short` is for durations of micro- to milliseconds (a per-transfer latency): there a bare number could
    mean any unit (`--latency 10` once meant 10 s, a makespan 187,136x the ideal), and `m` or `h` is almost
    surely a typo for ms, so both are refused (0 needs no unit). Numbers from Python are seconds.
    """
    if isinstance(text, (int, float)):
        return checked_number(text, what, lo=0.0, hi=MAX_SECONDS)
    s = str(text).strip().lower()
    if s.startswith("-"):
        raise HybridError(f"{what} must not be negative, got {text!r}")
    parts = re.findall(r"([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*([a-z]*)", s)
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
    return checked_number(total, f"{what} {text!r}", lo=0.0, hi=MAX_SECONDS)


def checked_number(value: Any, what: str, *, lo: float = 0.0, hi: float = math.inf, integer: bool = False) -> Any:
    """`value` if it is a finite number (not a bool) in [lo, hi], as an int when `integer` (then it must be
    whole); else a HybridError naming `what`. The one range check for numbers read from files and flags."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise HybridError(f"{what} must be a number, got {value!r}")
    if isinstance(value, numbers.Integral) and abs(value) > MAX_INTEGER:
        raise HybridError(f"{what} is out of range: an integer of {len(str(abs(value)))} digits")
    if not math.isfinite(value):
        raise HybridError(f"{what} must be a finite number, got {value!r}")
    if integer:
        if value != int(value):
            raise HybridError(f"{what} must be a whole number, got {value!r}")
        if isinstance(value, float) and abs(value) >= 2**53:   # 9007199254740993.0 reads as 2**53
            raise HybridError(f"{what} must be written as an integer (no decimal point or exponent): as {value!r} "
                              "it may not be the number written, a float being exact only below 2^53")
        value = int(value)
    elif not isinstance(value, float):
        value = float(value)
    if value < lo:
        raise HybridError(f"{what} must be at least {lo:g}, got {value!r}" if lo else
                          f"{what} must not be negative, got {value!r}")
    if value > hi:
        limit = format_bytes(hi) if integer and hi >= 2**10 else f"{hi:g}"
        raise HybridError(f"{what} must be at most {limit}, got {value!r}")
    return value


def checked_bytes(value: Any, what: str, lo: int = 0) -> int:
    """A byte count read from a file or a flag: a whole number in [lo, MAX_BYTES]."""
    return checked_number(value, what, lo=lo, hi=MAX_BYTES, integer=True)


_BINARY_UNITS = (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))  # largest first


def shown_id(text: str) -> str:
    """An id (or other string from a file) as a message shows it: as written where it prints as one plain line,
    else quoted with escapes, so a newline or a lone surrogate in a file cannot split or break the message."""
    return text if isinstance(text, str) and text.isprintable() else repr(text)


def format_bytes(n: float) -> str:
    """Binary units, three significant digits: 1.5 GiB; 1000-1023 of a unit whole (1018 KiB), not 1.02e+03."""
    n = float(n)
    for unit, scale in _BINARY_UNITS:
        if abs(n) >= scale:
            v = n / scale
            text = f"{v:.3g}"
            if "e" in text:    # 1000-1023.4: whole; 1023.5 and up reads as the next unit
                text = f"{v:.0f}"
                if text == "1024" and unit != "PiB":
                    return format_bytes(1024 * scale)
            return f"{text} {unit}"
    return f"{int(n)} B"


def format_bytes_exact(n: int) -> str:
    """A size people read with its exact bytes beside, where a few bytes matter (an arena against a capacity, a
    peak a few KiB under the memory)."""
    return f"{format_bytes(n)} ({int(n)} B)" if n >= 1024 else f"{int(n)} B"


def format_bytes_apart(a: int, b: int) -> tuple[str, str]:
    """Two sizes compared in one message ("needs A, but the device has B"): with their exact bytes beside where
    the rounded figures read the same (not "needs 2 MiB, but the device has 2 MiB")."""
    fa, fb = format_bytes(a), format_bytes(b)
    return (format_bytes_exact(a), format_bytes_exact(b)) if fa == fb and int(a) != int(b) else (fa, fb)


def listed(items: "list[str]", most: int = 3) -> str:
    """`a, b, c and 2 more`: the first `most` of `items`, and how many are left out."""
    return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most else "")


def counted(n: int, word: str, plural: str | None = None) -> str:
    """`n` and the noun in its number: "1 window", "3 windows" (`plural` where adding an s is wrong)."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def format_change(share: float, *, noise: float = 1e-6) -> str:
    """A relative change as a signed percentage with digits enough to show it ('-0.003%', never '-0.00%' nor
    '4e-05%'); '' where it is under `noise` percent (float noise by default), so callers can say "the same".
    `noise=0` for a figure that must not read as none where it is not zero (an overflow of 512 B in 80 GiB)."""
    pct = 100 * float(share)
    if not abs(pct) > noise or pct == 0:     # NaN too
        return ""
    if abs(pct) >= 0.005:
        return f"{pct:+.2f}%"
    if abs(pct) < 1e-8:
        return f"{'+' if pct > 0 else '-'}<0.00000001%"
    digits = min(8, max(3, -math.floor(math.log10(abs(pct) * (1 + 1e-9)))))   # 0.000999.. reads 0.001
    return f"{pct:+.{digits}f}%"


def format_bytes_up(n: int) -> str:
    """`n` bytes as `format_bytes` writes them (binary units, three significant digits), rounded up
    rather than to the nearest: a floor ("no plan runs with less") must never read below the bytes it stands for
    (4,198,016 B is 4.01 MiB here, not 4 MiB)."""
    n = int(n)
    for i, (unit, scale) in enumerate(_BINARY_UNITS):
        if n >= scale:
            places = max(0, 3 - len(str(n // scale)))          # decimals that give three significant digits
            tenths = -(-n * 10**places // scale)                # ceil(n / scale) at that precision, exactly
            if tenths >= 1024 * 10**places and i > 0:           # 1023.x rounds up to the next unit's 1
                return f"1 {_BINARY_UNITS[i - 1][0]}"
            text = f"{tenths / 10**places:.{places}f}"
            return f"{text.rstrip('0').rstrip('.') if places else text} {unit}"
    return f"{n} B"


def format_ratio(r: float) -> str:
    """A ratio for people: 3 significant digits, and a large one whole with thousands separated (1,970, not
    1.97e+03)."""
    r = float(r)
    if math.isinf(r) or math.isnan(r):
        return str(r)
    return f"{r:,.0f}" if abs(r) >= 999.5 else f"{r:.3g}"     # 999.6 would read 1e+03 at 3 digits


def format_seconds(t: float, digits: int = 4) -> str:
    """`t` seconds in s, ms, us or ns (by its magnitude, so a negative difference reads like a positive one) with
    `digits` significant digits; a table that must tell two close times apart asks for more (the validator's
    findings ask for 12, enough to read apart two times its 1 ns tolerance parts)."""
    t = float(t)
    if math.isinf(t) or math.isnan(t):
        return str(t)
    if t == 0:
        return "0 s"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        # the unit of the rounded value: 0.99996 s to 4 digits is "1 s", not "1000 ms"
        if float(f"{abs(t) / scale:.{digits}g}") >= 1:
            return f"{t / scale:.{digits}g} {unit}"
    return f"{t * 1e9:.{digits}g} ns"


def round_up(n, align: int):
    """`n` (an int or an int array) rounded up to a multiple of `align`: the bytes an aligned copy occupies
    (docs/formats.md, rule 5) and an aligned offset."""
    return (n + align - 1) // align * align
