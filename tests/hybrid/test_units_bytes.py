"""One way to write a size: hybrid.units.format_bytes, three significant digits in binary units."""
from __future__ import annotations

import re

import pytest

from hybrid.errors import HybridError
from hybrid.units import format_bytes


def test_format_bytes_never_writes_scientific_notation() -> None:
    # 1000-1023 of a unit have four digits before the point: whole, as people read them (not 1.02e+03 KiB)
    assert format_bytes(1018 * 1024) == "1018 KiB" and format_bytes(1000 * 2**20) == "1000 MiB"
    assert format_bytes(999.6 * 1024) == "1000 KiB"
    assert format_bytes(2**20 - 1) == "1 MiB" and format_bytes(1023.4 * 1024) == "1023 KiB"   # 1024 KiB is 1 MiB
    for n in (1, 1023, 1024, 1536, 999 * 1024, 1000 * 1024, 1023 * 2**30, 5 * 2**50, 2**63):
        assert "e" not in format_bytes(n).split()[0], n


def test_format_bytes_keeps_three_significant_digits() -> None:
    assert format_bytes(1536) == "1.5 KiB" and format_bytes(150 * 2**20) == "150 MiB"
    assert format_bytes(1023) == "1023 B" and format_bytes(0) == "0 B"
    assert format_bytes(62.93 * 2**20) == "62.9 MiB"


def test_two_sizes_compared_read_apart() -> None:
    from hybrid.units import format_bytes_apart

    assert format_bytes_apart(2 * 2**20 + 4096, 2 * 2**20) == ("2 MiB (2101248 B)", "2 MiB (2097152 B)")
    assert format_bytes_apart(3 * 2**20, 2 * 2**20) == ("3 MiB", "2 MiB")
    assert format_bytes_apart(2**20, 2**20) == ("1 MiB", "1 MiB")


def test_counted_says_the_noun_in_its_number() -> None:
    from hybrid.units import counted

    assert counted(1, "window") == "1 window" and counted(0, "window") == "0 windows"
    assert counted(2, "window") == "2 windows" and counted(3, "child", "children") == "3 children"


@pytest.mark.parametrize("text, fix", [("64Mb", "64MB (10^6 bytes) or 64MiB (2^20 bytes)"),
                                       ("64mb", "64MB (10^6 bytes) or 64MiB (2^20 bytes)"),
                                       ("512b", "512B"), ("2Gb", "2GB (10^9 bytes) or 2GiB (2^30 bytes)")])
def test_a_lowercase_b_is_bits_and_refused_with_both_byte_spellings(text, fix) -> None:
    """64Mb was read as 64 MB without a word; to a network engineer it is 8 MB."""
    from hybrid.units import parse_bytes

    with pytest.raises(HybridError, match=re.escape(f"cannot read size {text!r}: a lowercase b means bits; for "
                                                    f"bytes write {fix}")):
        parse_bytes(text)


def test_a_bandwidth_in_gigabits_is_refused_and_bytes_and_binary_units_still_read() -> None:
    from hybrid.units import parse_bandwidth, parse_bytes

    with pytest.raises(HybridError, match=re.escape("for bytes write 12GB/s (10^9 bytes) or 12GiB/s")):
        parse_bandwidth("12Gb/s")
    assert parse_bandwidth("12GB/s") == 12e9 and parse_bytes("64MiB") == 64 << 20 and parse_bytes("64MB") == 64e6
    assert parse_bytes("1kB") == 1000 and parse_bytes(" 64 MiB ") == 64 << 20 and parse_bytes("1e3MiB") == 1000 << 20
    for binary_bits in ("64Mib", "64mib"):    # mebibits: refused alike, naming the byte spelling
        with pytest.raises(HybridError, match=r"a lowercase b means bits; for bytes write 64MiB \(2\^20 bytes\)$"):
            parse_bytes(binary_bits)


def test_a_change_is_said_with_digits_enough_and_an_overflow_never_reads_as_none() -> None:
    from hybrid.units import format_change

    assert [format_change(x) for x in (0.1, 4e-7, -3e-5, 1e-9, 0.0)] == ["+10.00%", "+0.00004%", "-0.003%", "", ""]
    assert format_change(512 / 80 / 2**30, noise=0) == "+0.0000006%"      # 512 B over 80 GiB: not ''


def test_a_device_memory_without_a_unit_under_1_mib_is_warned_not_refused() -> None:
    """`hybrid place --memory 100` placed every op on the CPU ("needs 552 MiB of 100 B usable") without a word."""
    import warnings

    from hybrid.units import UnitWarning, parse_memory

    with pytest.warns(UnitWarning, match=r"--memory 100 has no unit, so it is 100 bytes; write 100MiB or 100GiB"):
        assert parse_memory("100") == 100
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parse_memory("100B") == 100 and parse_memory("20971520") == 20 << 20 and parse_memory(100) == 100


@pytest.mark.parametrize("text", ["0.6", "12.5", "0.5B", "1e-3"])
def test_a_fraction_of_a_byte_is_refused(text: str) -> None:
    """`--memory 0.6` (a share of the peak meant, written without %) was read as 1 byte, with only a warning."""
    from hybrid.errors import HybridError
    from hybrid.units import parse_bytes, parse_memory

    with pytest.raises(HybridError, match=rf"cannot read --memory '{text}': bytes are a whole number; write e.g. .*GiB"):
        parse_memory(text)
    assert parse_bytes("1.5KiB") == 1536 and parse_bytes("12.0") == 12 and parse_bytes("1e3") == 1000
    for tiny in ("0.0006KB", "1e-4KiB"):   # with a unit, under a byte: 1 byte and 0 bytes, said nothing
        with pytest.raises(HybridError, match=rf"cannot read --memory '{tiny}': that is less than a byte"):
            parse_memory(tiny)


def test_a_negative_size_is_refused_as_negative_and_a_large_ratio_is_written_whole() -> None:
    import pytest

    from hybrid.errors import HybridError
    from hybrid.units import format_ratio, parse_bytes

    with pytest.raises(HybridError, match=r"^--memory cannot be negative, got '-1GiB'$"):
        parse_bytes("-1GiB", "--memory")
    for text in ("-x", "-1x"):   # no size: the unit's message, not the sign's
        with pytest.raises(HybridError, match=f"cannot read --memory '{text}'"):
            parse_bytes(text, "--memory")
    assert [format_ratio(r) for r in (1970.4, 2514.9, 999.6, 99.94, 0.0312)] == [
        "1,970", "2,515", "1,000", "99.9", "0.0312"]


def test_a_finding_s_times_read_in_units_and_two_times_the_tolerance_parts_read_apart() -> None:
    from hybrid.validator.context import fmt_t

    assert fmt_t(1.0000000015) != fmt_t(1.0) == "1 s"
    assert fmt_t(0.9999999999) == "999.9999999 ms" and fmt_t(4.50046667e-05) == "45.0046667 us"
    assert fmt_t(2.5e-13) == "0.00025 ns" and fmt_t(0.0) == "0 s" and fmt_t(-0.002) == "-2 ms"
