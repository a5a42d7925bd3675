"""Units: integer bytes inside, GB (10**9) or GiB (2**30) only at display, always labelled."""

import re

import numpy as np
import pytest

import memmath as mm

GB, GIB, MIB = 10**9, 2**30, 2**20


def test_the_articles_14_gb_is_decimal():
    # The article: 7B parameters x 2 bytes = 14 GB, decimal gigabytes.
    assert mm.format_bytes(14 * GB) == "14.00 GB"
    # The same bytes in binary units: 14e9 / 2**30 = 13.0385 GiB.
    assert mm.format_bytes(14 * GB, "GiB") == "13.04 GiB"


def test_gpu_memory_as_nvidia_smi_reports_it():
    # nvidia-smi on an RTX 4090 reports an RTX 4090 ("24 GB") as 24564 MiB = 25,757,220,864 bytes:
    # 25.76 GB in decimal units, 23.99 GiB in binary units.
    rtx4090 = 24564 * MIB
    assert rtx4090 == 25_757_220_864
    assert mm.format_bytes(rtx4090, "GB") == "25.76 GB"
    assert mm.format_bytes(rtx4090, "GiB") == "23.99 GiB"
    assert mm.format_bytes(rtx4090, "MiB", digits=0) == "24,564 MiB"
    # An A100 80GB reports 81920 MiB = exactly 80 GiB = 85.90 GB.
    assert mm.format_bytes(81920 * MIB, "GiB") == "80.00 GiB"
    assert mm.format_bytes(81920 * MIB, "GB") == "85.90 GB"


def test_units_are_labelled_and_case_insensitive():
    assert mm.format_bytes(1536, "kib") == "1.50 KiB"
    assert mm.format_bytes(1234567, "B") == "1,234,567 B"
    assert mm.format_bytes(2 * 10**12, "TB", digits=1) == "2.0 TB"
    assert mm.to_unit(3 * GIB, "GiB") == 3.0 and mm.to_unit(3 * GB, "gb") == 3.0


def test_to_unit_divides_arrays_for_charts():
    assert np.array_equal(mm.to_unit(np.array([GB, 2 * GB]), "GB"), [1.0, 2.0])


@pytest.mark.parametrize("text, count", [
    ("7B", 7 * 10**9), ("7b", 7 * 10**9), ("350M", 350 * 10**6), ("1.5e9", 1_500_000_000),
    ("124,439,808", 124_439_808), ("70B", 70 * 10**9), ("1.3T", 1_300_000_000_000), ("500k", 500_000),
    ("1_000", 1000), (" 13B ", 13 * 10**9), ("6.7 B", 6_700_000_000),
])
def test_parse_count(text, count):
    assert mm.units.parse_count(text) == count


def test_parse_count_accepts_numbers():
    assert mm.units.parse_count(7e9) == 7 * 10**9 and mm.units.parse_count(np.int64(5)) == 5


@pytest.mark.parametrize("text, n_bytes", [
    ("24 GiB", 24 * GIB), ("14.00 GB", 14 * GB), ("512 MiB", 512 * MIB), ("1,024 B", 1024),
    ("24564MiB", 24564 * MIB), ("1.5 tb", 1_500_000_000_000), ("0 GB", 0),
])
def test_parse_bytes(text, n_bytes):
    assert mm.parse_bytes(text) == n_bytes


@pytest.mark.parametrize("unit", ["B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"])
def test_format_then_parse_round_trips_within_display_precision(unit):
    for n in (0, 1, 999, 123_456_789, 14 * GB, 24564 * MIB, 56 * GB + 7, 10**15 + 3):
        back = mm.parse_bytes(mm.format_bytes(n, unit))
        # Two decimals of the unit (whole bytes for "B") lose at most half a display step.
        step = 1 if unit == "B" else mm.UNITS[unit] / 100
        assert abs(back - n) <= step / 2 + 1, (n, unit)


@pytest.mark.parametrize("text, n_bytes", [
    ("24GiB", 24 * GIB), ("1.5 GiB", 3 * 2**29), ("1,343MiB", 1343 * MIB), ("0", 0), ("25759066358B", 25_759_066_358),
    ("1e-70GB", None), ("0.5KB", 500),
])
def test_whole_bytes_reads_a_size_exactly(text, n_bytes):
    # A Fraction, never a float: 1.5 GiB is 3 x 2**29 bytes; 1e-70 GB is a fraction of a byte, refused.
    if n_bytes is None:
        with pytest.raises(ValueError, match="not a whole number of bytes"):
            mm.units.whole_bytes("size", text)
    else:
        assert mm.units.whole_bytes("size", text) == n_bytes


@pytest.mark.parametrize("text, words", [
    ("0.3B", "'0.3B' is 0.3 bytes, not a whole number of bytes; give whole bytes, such as 0B"),
    ("23.99GiB", "is 25,759,066,357.76 bytes"),  # 23.99 x 2**30 = 25,759,066,357.76, by hand
    ("1,5GB", "a comma groups thousands"), ("1e999999999GB", "more than 1e+308 bytes"), ("", "size is empty"),
    ("lots", "(units B, KB"), ("2000PiB", "to 1,024 PiB (1,152,921,504,606,846,976 bytes)"),
])
def test_whole_bytes_refuses_what_is_not_a_whole_size_in_range_by_name(text, words):
    with pytest.raises(mm.validate.FieldError, match=re.escape(words)) as caught:
        mm.units.whole_bytes("size", text)  # at most 2**60 bytes = 1,024 PiB
    assert caught.value.field == "size" and str(caught.value).startswith("size ")
