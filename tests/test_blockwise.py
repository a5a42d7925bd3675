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


def test_storage_table_counts_the_papers_bits_and_measures_the_errors():
    # QLoRA (Dettmers et al. 2023, section 3): fp32 absmax per 64 weights = 32/64 = 0.5 bits; double quantization
    # 8/64 + 32/(64 x 256) = 0.127 bits. int4 and NF4 store 4 bits, bf16 16.
    weights = np.random.default_rng(0).standard_normal(4096)
    table = bw.storage_table(weights, block=64).set_index("storage")
    assert list(table.index) == ["bf16", "int4, fp32 constants", "NF4, fp32 constants", "NF4 + double quantization"]
    assert table["bits per weight"].tolist() == [16.0, 4.0, 4.0, 4.0]
    assert table["constants (bits per weight)"].tolist() == pytest.approx([0.0, 0.5, 0.5, 8 / 64 + 32 / (64 * 256)])
    assert table["total bits"].tolist() == pytest.approx([16.0, 4.5, 4.5, 4 + 8 / 64 + 32 / (64 * 256)])
    errors = table["mean error (share of mean |w|)"]
    # bf16 keeps 8 significant bits: a relative rounding error of at most 2^-9 per value.
    assert 0 < errors["bf16"] < 2**-9
    # NF4's levels sit at a normal distribution's quantiles: less error than int4's even grid on normal weights.
    assert errors["NF4, fp32 constants"] < errors["int4, fp32 constants"]
    assert errors["NF4 + double quantization"] == errors["NF4, fp32 constants"]  # the constants' storage only


def test_normalized_histogram_counts_whole_blocks_scaled_by_their_absmax():
    weights = np.random.default_rng(1).standard_normal(4096)
    bins = bw.normalized_histogram(weights, block=1000)  # 4 whole blocks of 1,000; the last 96 values are left out
    assert len(bins) == 50 and bins["weights"].sum() == 4000
    assert bins["start"].iloc[0] == -1.0 and bins["end"].iloc[-1] == 1.0
    # Each block's largest |w| lands on -1 or 1, so the outer bins hold 4 values between them at least.
    assert bins["weights"].iloc[0] + bins["weights"].iloc[-1] >= 4


def test_format_levels_are_nf4s_sixteen_and_int4s_fifteen():
    levels = bw.format_levels()
    nf4 = levels[levels["format"] == "NF4 levels"]["level"].tolist()
    int4 = levels[levels["format"] == "int4 levels"]["level"].tolist()
    assert np.allclose(nf4, NF4_PAPER, atol=1e-4)
    assert int4 == pytest.approx([k / 7 for k in range(-7, 8)])
