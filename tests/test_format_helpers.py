"""Format helpers: absmax_scale (the block scale of integer and NF4 quantization) and float_step (hand-derived values)."""

import pytest

import memmath as mm


def test_scales_map_the_block_max_to_the_largest_level():
    assert mm.absmax_scale("int8", 1.27) == pytest.approx(0.01)  # 1.27 / 127
    assert mm.absmax_scale("int4", 7.0) == 1.0  # 7 / 7
    assert mm.absmax_scale("nf4", 0.5) == 0.5  # nf4's largest level is 1.0
    assert mm.absmax_scale("bf16", 123.0) == 1.0  # floats need no scale


def test_rounding_with_the_scale():
    # 0.1 in a block whose largest magnitude is 1: round(0.1 x 127) = round(12.7) = 13 steps of 1/127.
    assert mm.round_to_format(0.1, "int8", scale=mm.absmax_scale("int8", 1.0)) == pytest.approx(13 / 127)
    # Without a scale (scale 1) int8 stores whole numbers: 0.1 becomes 0.
    assert mm.round_to_format(0.1, "int8") == 0.0
    # The block's largest value itself is stored exactly.
    assert mm.round_to_format(-2.5, "int4", scale=mm.absmax_scale("int4", 2.5)) == pytest.approx(-2.5)


def test_bad_absmax_is_a_value_error():
    with pytest.raises(ValueError, match="absmax"):
        mm.absmax_scale("int8", 0.0)


def test_float_step_is_the_ieee_spacing():
    assert mm.float_step("bf16", 300.7) == 2.0  # 256 <= 300.7 < 512: 2**(8 - 7)
    assert mm.float_step("bf16", 70_000) == 512.0  # 2**16 <= 70,000: 2**(16 - 7)
    assert mm.float_step("fp16", 1.0) == 2.0**-10  # fp16's epsilon
    assert mm.float_step("fp16", 0.0) == 2.0**-24  # fp16's subnormal step: 2**(1 - 15 - 10)
    # The step is what rounding actually does: 300.7 + half a step rounds up to the next value.
    assert mm.round_to_format(301.0, "bf16") in (300.0, 302.0)
    with pytest.raises(ValueError, match="float format"):
        mm.float_step("int8", 1.0)
