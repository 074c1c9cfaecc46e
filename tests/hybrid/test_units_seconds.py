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


def test_a_table_cell_is_format_seconds_or_empty() -> None:
    for t in (0.01061, 12.5, -0.0025, 3e-7, 0.0):
        assert seconds_text(t, 6) == format_seconds(t, 6)
    assert seconds_text(math.nan) == "" and seconds_text(None) == ""
