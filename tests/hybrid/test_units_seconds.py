"""One way to write a time: hybrid.units.format_seconds, whose digits a table may raise."""
from __future__ import annotations

import math

from hybrid.report.compare import seconds_text
from hybrid.units import format_seconds


def test_format_seconds_picks_the_unit_by_magnitude_and_takes_digits() -> None:
    assert format_seconds(0.01061) == "10.61 ms" and format_seconds(12.5) == "12.5 s"
    assert format_seconds(-0.0025) == "-2.5 ms"                   # a negative difference, not "-2500 us"
    assert format_seconds(0.0106123456, digits=7) == "10.61235 ms"
    assert format_seconds(math.inf) == "inf" and format_seconds(-math.inf) == "-inf"
    assert format_seconds(math.nan) == "nan"


def test_format_seconds_picks_the_unit_of_the_rounded_value() -> None:
    """0.99996 s to 4 digits rounds to 1: it read "1000 ms" (the unit was chosen before rounding)."""
    assert format_seconds(0.99996) == "1 s" and format_seconds(-0.99996) == "-1 s"
    assert format_seconds(0.00099996) == "1 ms" and format_seconds(0.9994) == "999.4 ms"
    assert format_seconds(0.99996, digits=6) == "999.96 ms"
    assert format_seconds(0.0) == "0 s"


def test_a_table_cell_is_format_seconds_or_empty() -> None:
    for t in (0.01061, 12.5, -0.0025, 3e-7, 0.0):
        assert seconds_text(t, 6) == format_seconds(t, 6)
    assert seconds_text(math.nan) == "" and seconds_text(None) == ""


def test_a_duration_takes_exponents_and_a_negative_one_is_named_negative() -> None:
    """`--time-limit 1e1` said "unknown time unit 'e'" and `-5` "cannot read ... write e.g. 90s"."""
    import pytest

    from hybrid.errors import HybridError
    from hybrid.units import parse_duration

    assert parse_duration("1e1") == 10.0 and parse_duration("2.5e-3s") == 0.0025 and parse_duration("1h30m") == 5400
    with pytest.raises(HybridError, match=r"--time-limit must not be negative, got '-5'"):
        parse_duration("-5", "--time-limit")
