"""Block-wise absmax quantization (QLoRA's NF4, and int4/int8 for comparison), checked by hand."""

import numpy as np
import pytest

from memmath_lessons import blockwise as bw

# The NF4 code book as printed in Dettmers et al. 2023, appendix E (rounded to 4 decimals there).
NF4_PAPER = [-1.0, -0.6962, -0.5251, -0.3949, -0.2844, -0.1848, -0.0911, 0.0,
             0.0796, 0.1609, 0.2461, 0.3379, 0.4407, 0.5626, 0.7230, 1.0]


def test_nf4_levels_round_trip_exactly():
    absmax = 3.0
    values = np.array(NF4_PAPER) * absmax
    out, constants = bw.quantize_blockwise(values, "nf4", block=16)
    assert constants.tolist() == [3.0]
    assert np.allclose(out, values, atol=absmax * 1e-4)  # within the paper's 4-decimal rounding


def test_each_block_keeps_its_absmax_exactly():
    x = np.array([0.5, -2.0, 0.1, 0.0, 4.0, 1.0, -1.0, 3.9])
    out, constants = bw.quantize_blockwise(x, "nf4", block=4)
    assert constants.tolist() == [2.0, 4.0]
    assert out[1] == -2.0 and out[4] == 4.0


def test_int4_by_hand():
    # Block [0.3, -1.4, 0.7, 0.05], absmax 1.4: codes round(x / 1.4 * 7) = [2, -7, 4, 0] (0.25 rounds to 0),
    # dequantized code * 1.4 / 7 = [0.4, -1.4, 0.8, 0.0].
    out, _ = bw.quantize_blockwise([0.3, -1.4, 0.7, 0.05], "int4", block=4)
    assert np.allclose(out, [0.4, -1.4, 0.8, 0.0])


def test_padding_keeps_the_length():
    out, constants = bw.quantize_blockwise(np.arange(1, 101, dtype=float), "int8", block=64)
    assert out.shape == (100,) and constants.shape == (2,)


def test_nf4_beats_int4_on_normal_weights():
    # QLoRA's argument (section 3): normally distributed weights are better served by normal quantiles.
    x = np.random.default_rng(0).standard_normal(64 * 500)
    assert bw.quantization_error(x, "nf4") < bw.quantization_error(x, "int4")
    assert bw.quantization_error(x, "int8") < bw.quantization_error(x, "nf4")
    # Smaller blocks, smaller error (each block's absmax is closer to its own values).
    assert bw.quantization_error(x, "nf4", block=16) < bw.quantization_error(x, "nf4", block=256)


@pytest.mark.parametrize("call", [
    lambda: bw.quantize_blockwise([1.0], "bf16"),
    lambda: bw.quantize_blockwise([], "nf4"),
    lambda: bw.quantize_blockwise([np.nan], "nf4"),
    lambda: bw.quantize_blockwise([1.0], "nf4", block=0),
])
def test_bad_input_is_a_value_error(call):
    with pytest.raises(ValueError):
        call()
