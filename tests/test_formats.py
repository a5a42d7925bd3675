"""Number formats: sizes, ranges and rounding, checked against IEEE-754 facts and numpy/torch casts."""

from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import memmath as mm


# ---- sizes --------------------------------------------------------------------------------------
# Storage bits: IEEE-754 (fp32, fp16), Google's bfloat16, OCP FP8 spec (2023), two's-complement ints,
# QLoRA's 4-bit NormalFloat; TF32 is stored as a 32-bit fp32 word (NVIDIA A100 whitepaper).
@pytest.mark.parametrize("name, bits, nbytes", [
    ("fp32", 32, 4), ("tf32", 32, 4), ("fp16", 16, 2), ("bf16", 16, 2), ("fp8_e4m3", 8, 1),
    ("fp8_e5m2", 8, 1), ("int8", 8, 1), ("int4", 4, 0.5), ("nf4", 4, 0.5),
])
def test_bits_and_bytes_per_element(name, bits, nbytes):
    fmt = mm.get_format(name)
    assert (fmt.bits, fmt.bytes) == (bits, nbytes)


def test_a_4_bit_value_costs_half_a_byte_and_whole_tensors_round_up_once():
    # 3 int4 values = 12 bits = 1.5 bytes -> 2 whole bytes (ceil(n * bits / 8)); not 3 x ceil(0.5).
    assert mm.get_format("int4").bytes_for(3) == 2
    # The article: 7e9 parameters x 2 bytes = 14,000,000,000 bytes.
    assert mm.get_format("bf16").bytes_for(7 * 10**9) == 14_000_000_000


# ---- floating-point facts -----------------------------------------------------------------------
@pytest.mark.parametrize("name, exponent, mantissa", [
    # IEEE-754 binary32/binary16; bfloat16 = fp32's 8 exponent bits + 7; TF32 = 8 + 10;
    # OCP FP8: E4M3 and E5M2.
    ("fp32", 8, 23), ("fp16", 5, 10), ("bf16", 8, 7), ("tf32", 8, 10), ("fp8_e4m3", 4, 3), ("fp8_e5m2", 5, 2),
])
def test_exponent_and_mantissa_bits(name, exponent, mantissa):
    fmt = mm.get_format(name)
    assert (fmt.exponent_bits, fmt.mantissa_bits) == (exponent, mantissa)


def test_largest_finite_values():
    # numpy's finfo is an independent implementation of the IEEE formats.
    assert mm.get_format("fp16").max_value == 65504.0 == float(np.finfo(np.float16).max)
    assert mm.get_format("fp32").max_value == float(np.finfo(np.float32).max)
    # bfloat16: (2 - 2**-7) * 2**127 = 3.3895313892515355e38 (torch.finfo(torch.bfloat16).max).
    assert mm.get_format("bf16").max_value == 3.3895313892515355e38
    # OCP FP8 spec: E4M3 max 448 (S.1111.110; 1111.111 is NaN), E5M2 max 57344 (IEEE-like, has inf).
    assert mm.get_format("fp8_e4m3").max_value == 448.0
    assert mm.get_format("fp8_e5m2").max_value == 57344.0
    assert not mm.get_format("fp8_e4m3").has_inf and mm.get_format("fp8_e5m2").has_inf


def test_machine_epsilon():
    assert mm.get_format("fp16").epsilon == float(np.finfo(np.float16).eps) == 2.0**-10
    assert mm.get_format("fp32").epsilon == float(np.finfo(np.float32).eps) == 2.0**-23
    assert mm.get_format("bf16").epsilon == 2.0**-7  # 0.0078125 (torch.finfo(torch.bfloat16).eps)
    assert mm.get_format("fp8_e4m3").epsilon == 0.125 and mm.get_format("fp8_e5m2").epsilon == 0.25


def test_smallest_normal():
    assert mm.get_format("fp16").smallest_normal == float(np.finfo(np.float16).tiny)  # 2**-14
    assert mm.get_format("fp32").smallest_normal == float(np.finfo(np.float32).tiny)  # 2**-126
    assert mm.get_format("bf16").smallest_normal == 2.0**-126  # same exponent range as fp32
    assert mm.get_format("fp8_e4m3").smallest_normal == 2.0**-6  # OCP FP8: bias 7
    assert mm.get_format("fp8_e5m2").smallest_normal == 2.0**-14  # OCP FP8: bias 15


def test_range_against_precision_the_lessons_compare():
    # bf16 keeps fp32's range with fewer digits; fp16 the opposite (the lesson's point).
    bf16, fp16 = mm.get_format("bf16"), mm.get_format("fp16")
    assert bf16.max_value > 1e38 > fp16.max_value and bf16.epsilon > fp16.epsilon
    # log10(2**8) = 2.41 significant digits for bf16; log10(2**11) = 3.31 for fp16.
    assert bf16.decimal_digits == pytest.approx(2.408, abs=1e-3)
    assert fp16.decimal_digits == pytest.approx(3.311, abs=1e-3)


# ---- names --------------------------------------------------------------------------------------
@pytest.mark.parametrize("spelling, name", [
    ("bfloat16", "bf16"), ("float32", "fp32"), ("half", "fp16"), ("float16", "fp16"), ("fp8", "fp8_e4m3"),
    ("torch.bfloat16", "bf16"), (" BF16 ", "bf16"), ("float8_e4m3fn", "fp8_e4m3"), ("e5m2", "fp8_e5m2"),
    ("float", "fp32"), ("NF4", "nf4"), ("4bit", "int4"),
])
def test_common_spellings_resolve(spelling, name):
    assert mm.get_format(spelling).name == name


def test_a_format_passes_through():
    fmt = mm.get_format("bf16")
    assert mm.get_format(fmt) is fmt


# ---- rounding -----------------------------------------------------------------------------------
def _same(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


EDGE_VALUES = np.array([
    0.0, -0.0, 1.0, -1.0, 0.1, 1 / 3, 65504.0, 65519.99, 65520.0, 1e5, -1e5, 2.0**-14, 2.0**-24, 2.0**-25,
    2.0**-25 * 1.0000001, 3 * 2.0**-26, 1e-8, 6e-8, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 2047.5, 2049.0,
    np.inf, -np.inf, np.nan, 1e300, 5e-324,
])


def test_fp16_rounding_matches_numpy():
    # numpy.float16(float64) is an independent IEEE round-to-nearest-even implementation.
    with np.errstate(over="ignore"):
        expected = EDGE_VALUES.astype(np.float16).astype(np.float64)
    assert _same(mm.formats.round_to_format(EDGE_VALUES, "fp16"), expected)


def test_fp32_rounding_matches_numpy():
    values = np.concatenate([EDGE_VALUES, [3.4028235677973366e38, 3.4028235e38 * 1.0000001, 1e-45, 7e-46]])
    with np.errstate(over="ignore"):
        expected = values.astype(np.float32).astype(np.float64)
    assert _same(mm.formats.round_to_format(values, "fp32"), expected)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_fp16_and_fp32_rounding_match_numpy_for_any_float(x):
    with np.errstate(over="ignore"):
        assert _same(mm.formats.round_to_format(x, "fp16"), np.float16(x))
        assert _same(mm.formats.round_to_format(x, "fp32"), np.float32(x))


def test_bf16_rounding_by_hand():
    # bf16 values near 1 are 2**-7 apart. 1 + 2**-8 is a tie between 1 (even mantissa) and
    # 1 + 2**-7 (odd): ties go to even -> 1. 1 + 3 * 2**-8 ties between 1 + 2**-7 (odd) and
    # 1 + 2**-6 (even) -> 1 + 2**-6. Just above the tie rounds up.
    assert mm.formats.round_to_format(1 + 2.0**-8, "bf16") == 1.0
    assert mm.formats.round_to_format(1 + 3 * 2.0**-8, "bf16") == 1 + 2.0**-6
    assert mm.formats.round_to_format(1 + 2.0**-8 + 2.0**-20, "bf16") == 1 + 2.0**-7
    # 0.1 = 1.6 x 2**-4; 1.6 / 2**-7 = 204.8 -> 205 -> 205 x 2**-11 = 0.10009765625.
    assert mm.formats.round_to_format(0.1, "bf16") == 0.10009765625
    # Past (2 - 2**-8) x 2**127 (halfway to the next power) bf16 overflows to infinity.
    assert mm.formats.round_to_format(3.3895313892515355e38, "bf16") == 3.3895313892515355e38
    assert mm.formats.round_to_format((2 - 2.0**-8) * 2.0**127, "bf16") == np.inf


def test_fp8_rounding_by_hand():
    # E4M3 (OCP): near 0.1 the step is 2**-7 (exponent -4, 3 mantissa bits): 0.1 / 2**-7 = 12.8 -> 13
    # -> 0.1015625. 464 is the tie between 448 (mantissa 110, even) and the NaN code -> 448; above it
    # E4M3 has no infinity: NaN (OCP non-saturating conversion). Smallest subnormal 2**-9; half of it ties to 0.
    e4m3 = "fp8_e4m3"
    assert mm.formats.round_to_format(0.1, e4m3) == 0.1015625
    assert mm.formats.round_to_format(464.0, e4m3) == 448.0
    assert np.isnan(mm.formats.round_to_format(470.0, e4m3))
    assert mm.formats.round_to_format(2.0**-9, e4m3) == 2.0**-9 and mm.formats.round_to_format(2.0**-10, e4m3) == 0.0
    # E5M2: steps of 2**13 = 8192 at the top; 61440 ties between 57344 (mantissa 11, odd) and 65536
    # (even, but past the largest finite value) -> inf.
    assert mm.formats.round_to_format(61439.0, "fp8_e5m2") == 57344.0
    assert mm.formats.round_to_format(61440.0, "fp8_e5m2") == np.inf
    assert mm.formats.round_to_format(-1e9, "fp8_e5m2") == -np.inf


def test_integer_formats_round_and_clip_with_a_scale():
    # int8: round(x / scale) clipped to [-128, 127], times scale.
    assert _same(mm.formats.round_to_format([0.26, -0.26, 100.0, -100.0], "int8", scale=0.5), [0.5, -0.5, 63.5, -64.0])
    # int4: [-8, 7].
    assert _same(mm.formats.round_to_format([7.4, 9.0, -9.0], "int4"), [7.0, 7.0, -8.0])


def test_nf4_levels_are_the_normal_quantiles_of_qlora():
    # Dettmers et al. 2023 (QLoRA), NF4: 8 quantiles of N(0, 1) over [0.5, offset] for the positive
    # half, 7 for the negative half, plus an exact zero, normalised to [-1, 1]; offset 0.9677083
    # (bitsandbytes create_normal_map). Rebuilt here with the standard library's normal quantiles.
    ppf, offset = NormalDist().inv_cdf, 0.9677083

    def linspace(a, b, n):
        return [a + (b - a) * i / (n - 1) for i in range(n)]

    positive = [ppf(p) for p in linspace(offset, 0.5, 9)[:-1]]
    negative = [-ppf(p) for p in linspace(offset, 0.5, 8)[:-1]]
    levels = sorted(positive + [0.0] + negative)
    levels = [v / max(abs(v) for v in levels) for v in levels]
    assert np.allclose(mm.formats.NF4_LEVELS, levels, atol=1e-6)
    # nf4 rounds to the nearest level times the block's absmax.
    assert mm.formats.round_to_format(0.5, "nf4", scale=2.0) == pytest.approx(2 * 0.24611230194568634)


# ---- live: torch's own casts ----------------------------------------------------------------------
def _float32_samples(seed=0, n=20000):
    rng = np.random.default_rng(seed)
    values = np.concatenate([
        rng.standard_normal(n) * 10.0 ** rng.integers(-45, 39, n),
        rng.standard_normal(n) * 300, rng.uniform(-600, 600, n), rng.uniform(-70000, 70000, n),
        [0.0, -0.0, np.inf, -np.inf, np.nan, 448.0, 464.0, 57344.0, 61440.0, 2.0**-9, 2.0**-10, 2.0**-16, 2.0**-17],
    ])
    with np.errstate(over="ignore"):
        return values.astype(np.float32)  # torch casts from float32: compare on float32 inputs


@pytest.mark.live
def test_bf16_rounding_matches_torch(torch):
    x = _float32_samples()
    expected = torch.from_numpy(x).to(torch.bfloat16).to(torch.float64).numpy()
    assert _same(mm.formats.round_to_format(x.astype(np.float64), "bf16"), expected)


@pytest.mark.live
def test_fp8_e5m2_rounding_matches_torch(torch):
    x = _float32_samples(1)
    expected = torch.from_numpy(x).to(torch.float8_e5m2).to(torch.float64).numpy()
    assert _same(mm.formats.round_to_format(x.astype(np.float64), "fp8_e5m2"), expected)


@pytest.mark.live
def test_fp8_e4m3_rounding_matches_torch_inside_the_range(torch):
    # Within the range (|x| up to the 464 tie, which rounds to 448) torch and memmath agree exactly.
    # Beyond it they differ on purpose: torch 2.13 saturates to +-448, memmath follows the OCP
    # non-saturating conversion and returns NaN (E4M3 has no infinity).
    x = _float32_samples(2)
    inside = np.isnan(x) | (np.abs(x) <= 464)
    expected = torch.from_numpy(x[inside]).to(torch.float8_e4m3fn).to(torch.float64).numpy()
    assert _same(mm.formats.round_to_format(x[inside].astype(np.float64), "fp8_e4m3"), expected)


@pytest.mark.live
def test_format_facts_match_torch_finfo(torch):
    for name, dtype in [("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16),
                        ("fp8_e4m3", torch.float8_e4m3fn), ("fp8_e5m2", torch.float8_e5m2)]:
        info, fmt = torch.finfo(dtype), mm.get_format(name)
        assert (fmt.bits, fmt.max_value, fmt.epsilon, fmt.smallest_normal) == (
            info.bits, info.max, info.eps, info.smallest_normal), name


# ---- Format helpers: absmax_scale (the block scale of integer and NF4 quantization) and float_step (hand-derived values).
def test_scales_map_the_block_max_to_the_largest_level():
    assert mm.formats.absmax_scale("int8", 1.27) == pytest.approx(0.01)  # 1.27 / 127
    assert mm.formats.absmax_scale("int4", 7.0) == 1.0  # 7 / 7
    assert mm.formats.absmax_scale("nf4", 0.5) == 0.5  # nf4's largest level is 1.0
    assert mm.formats.absmax_scale("bf16", 123.0) == 1.0  # floats need no scale


def test_rounding_with_the_scale():
    # 0.1 in a block whose largest magnitude is 1: round(0.1 x 127) = round(12.7) = 13 steps of 1/127.
    assert mm.formats.round_to_format(0.1, "int8", scale=mm.formats.absmax_scale("int8", 1.0)) == pytest.approx(13 / 127)
    # Without a scale (scale 1) int8 stores whole numbers: 0.1 becomes 0.
    assert mm.formats.round_to_format(0.1, "int8") == 0.0
    # The block's largest value itself is stored exactly.
    assert mm.formats.round_to_format(-2.5, "int4", scale=mm.formats.absmax_scale("int4", 2.5)) == pytest.approx(-2.5)


def test_bad_absmax_is_a_value_error():
    with pytest.raises(ValueError, match="absmax"):
        mm.formats.absmax_scale("int8", 0.0)


def test_float_step_is_the_ieee_spacing():
    assert mm.formats.float_step("bf16", 300.7) == 2.0  # 256 <= 300.7 < 512: 2**(8 - 7)
    assert mm.formats.float_step("bf16", 70_000) == 512.0  # 2**16 <= 70,000: 2**(16 - 7)
    assert mm.formats.float_step("fp16", 1.0) == 2.0**-10  # fp16's epsilon
    assert mm.formats.float_step("fp16", 0.0) == 2.0**-24  # fp16's subnormal step: 2**(1 - 15 - 10)
    # The step is what rounding actually does: 300.7 + half a step rounds up to the next value.
    assert mm.formats.round_to_format(301.0, "bf16") in (300.0, 302.0)
    with pytest.raises(ValueError, match="float format"):
        mm.formats.float_step("int8", 1.0)
