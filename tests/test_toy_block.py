"""The numpy transformer block of lessons 5 and 6: shapes, adapters at zero, FLOPs, LoRA merging, timing."""

import math

import numpy as np
import pytest

from memmath_lessons import toy_block as tb


@pytest.fixture(scope="module")
def small():
    block = tb.make_block(64, 4, seed=0)
    return block, tb.make_input(16, 64, seed=5)


def test_output_keeps_the_input_shape(small):
    block, x = small
    assert tb.block_forward(x, block).shape == (16, 64)
    assert tb.block_forward(x, block, tb.make_adapters(64, 8, zero_up=False)).shape == (16, 64)


def test_adapters_at_zero_init_give_exactly_the_base_output(small):
    # Houlsby et al. 2019: with the up-projection at zero an adapter is the identity (its skip).
    block, x = small
    base = tb.block_forward(x, block)
    assert np.array_equal(tb.block_forward(x, block, tb.make_adapters(64, 8, zero_up=True)), base)
    moved = tb.block_forward(x, block, tb.make_adapters(64, 8, zero_up=False))
    assert not np.allclose(moved, base)


def test_adapter_parameter_count_by_hand():
    # Two adapters, each h*m + m (down) + m*h + h (up): h=256, m=64 -> 2 * (32,768 + 64 + 256) = 66,176.
    assert tb.make_adapters(256, 64).n_params == 66_176


def test_trace_lists_base_and_adapter_steps(small):
    block, x = small
    with_adapters = tb.trace_frame(x, block, tb.make_adapters(64, 8))
    assert len(with_adapters) == 7
    assert list(with_adapters["trains?"]).count("yes") == 2
    assert len(tb.trace_frame(x, block)) == 5
    assert set(with_adapters["tensor shape"]) == {"16 x 64"}


def test_block_matches_a_pytorch_reference(small):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    block, x = small
    adapters = tb.make_adapters(64, 8, zero_up=False)
    w = {k: torch.tensor(v, dtype=torch.float64) for k, v in block.weights.items()}
    a = {k: torch.tensor(v, dtype=torch.float64) for k, v in adapters.weights.items()}
    t = torch.tensor(x, dtype=torch.float64)

    def heads(z):
        return z.reshape(16, 4, 16).transpose(0, 1)

    ctx = F.scaled_dot_product_attention(heads(t @ w["q"]), heads(t @ w["k"]), heads(t @ w["v"]))
    attn = ctx.transpose(0, 1).reshape(16, 64) @ w["o"]
    attn = attn + F.gelu(attn @ a["attn_down"] + a["attn_down_bias"], approximate="tanh") @ a["attn_up"] + a["attn_up_bias"]
    h1 = F.layer_norm(t + attn, (64,), w["ln1_gain"], w["ln1_bias"], eps=1e-12)
    mlp = F.gelu(h1 @ w["up"], approximate="tanh") @ w["down"]
    mlp = mlp + F.gelu(mlp @ a["mlp_down"] + a["mlp_down_bias"], approximate="tanh") @ a["mlp_up"] + a["mlp_up_bias"]
    expected = F.layer_norm(h1 + mlp, (64,), w["ln2_gain"], w["ln2_bias"], eps=1e-12).numpy()
    assert np.allclose(tb.block_forward(x, block, adapters), expected, atol=2e-4)


def test_flops_by_hand():
    # s=128, h=256: 24*128*256^2 = 201,326,592 plus 4*128^2*256 = 16,777,216 -> 218,103,808.
    assert tb.block_flops(128, 256) == 218_103_808
    # Two adapters of m=64: 2 adapters x 2 matmuls x 2*s*h*m = 8 * 128 * 256 * 64 = 16,777,216.
    assert tb.adapter_flops(128, 256, 64) == 16_777_216
    assert math.isclose(tb.adapter_flop_overhead(128, 256, 64), 2 * 64 / (6 * 256 + 128))


def test_merged_lora_weight_gives_the_same_output():
    lora = tb.make_lora(96, 48, 8, alpha=16.0, trained=True)
    x = tb.make_input(10, 96)
    merged = tb.merge_lora(lora)
    assert merged.shape == (48, 96)
    assert np.allclose(tb.lora_forward(x, lora), x @ merged.T, rtol=1e-5, atol=1e-6)
    assert lora.n_params == 8 * (96 + 48)  # r x (d_in + d_out), Hu et al. 2021
    assert lora.scaling == 2.0


def test_lora_at_initialisation_changes_nothing():
    lora = tb.make_lora(32, 32, 4, trained=False)
    assert np.array_equal(tb.merge_lora(lora), lora.W)


def test_timing_interleaves_and_respects_the_budget(small):
    block, x = small
    times = tb.time_forward(x, block, tb.make_adapters(64, 8), repeats=6, budget_s=5.0)
    assert len(times) == 12
    assert list(times["variant"][:4]) == ["base", "with adapters", "with adapters", "base"]
    assert (times["seconds"] > 0).all() and np.isfinite(times["seconds"]).all()
    quick = tb.time_forward(x, block, tb.make_adapters(64, 8), repeats=1000, budget_s=0.0)
    assert len(quick) == 6  # stops after the minimum of three pairs
    summary = tb.timing_summary(times)
    assert list(summary["variant"]) == ["base", "with adapters"]
    assert (summary["25th pct (ms)"] <= summary["median (ms)"]).all()
    assert tb.median_ratio(times) > 0
    by_variant = times.groupby("variant")["seconds"]
    assert tb.fastest_ratio(times) == by_variant.min()["with adapters"] / by_variant.min()["base"]


def test_blas_threads_are_restored():
    calls = tb.openblas_thread_calls()
    if calls is None:
        pytest.skip("numpy's BLAS is not OpenBLAS here")
    before = calls[1]()
    with tb.blas_threads(1) as in_effect:
        assert in_effect == 1
    assert calls[1]() == before


@pytest.mark.parametrize("call", [
    lambda: tb.make_block(100, 3),
    lambda: tb.make_adapters(64, 0),
    lambda: tb.make_input(0, 64),
    lambda: tb.make_lora(8, 8, 9),
    lambda: tb.block_forward(np.zeros((4, 32), np.float32), tb.make_block(64, 4)),
])
def test_bad_input_is_a_value_error(call):
    with pytest.raises(ValueError):
        call()


def test_time_variants_times_every_variant_in_turn():
    calls = []
    times = tb.time_variants({"a": lambda: calls.append("a"), "b": lambda: calls.append("b"), "c": lambda: calls.append("c")},
                             repeats=4, budget_s=5.0, warmup=0, threads=None, min_timing_s=0.0)
    assert calls == list("abc" "cba" "abc" "cba")
    assert list(times["variant"]) == calls
    assert times.attrs["calls_per_timing"] == 1
    assert times.attrs["blas_threads"] is None
    with pytest.raises(ValueError):
        tb.time_variants({})


def test_a_fast_call_is_repeated_within_one_timing():
    calls = []
    times = tb.time_variants({"a": lambda: calls.append(1)}, repeats=3, budget_s=5.0, warmup=1, min_timing_s=0.001)
    number = times.attrs["calls_per_timing"]
    assert number > 1  # appending to a list takes far less than a millisecond
    assert len(calls) == 1 + 3 * number  # one warm-up call, then three timings of `number` calls
