"""Inference memory: KV cache, weights in serving formats, the 1.2x rule of thumb, decode speed."""

import numpy as np
import pytest

import memmath as mm

GB = 10**9


def test_llama2_13b_kv_cache_at_8192_tokens():
    # REFERENCE.md: 2 (K, V) x 40 layers x 40 heads x 128 x 8192 tokens x 2 bytes = 6.7 GB.
    kv = mm.kv_cache_bytes("llama-2-13b", context_len=8192, kv_format="bf16")
    assert kv == 2 * 40 * 40 * 128 * 8192 * 2 == 6_710_886_400
    assert mm.format_bytes(kv, digits=1) == "6.7 GB"


def test_kv_cache_per_token_of_llama2_7b_is_half_a_mebibyte():
    # kipply 2022: 2 x n_layers x d_model x 2 bytes per token = 2 x 32 x 4096 x 2 = 524,288 B.
    assert mm.kv_cache_bytes("llama-2-7b", context_len=1) == 524_288 == 2**19


def test_grouped_query_attention_divides_the_cache():
    # Ainslie et al. 2023: kv_heads instead of heads; Llama-2-70B keeps 8 of 64: 8x smaller.
    gqa = mm.kv_cache_bytes("llama-2-70b", context_len=4096)
    mha = mm.kv_cache_bytes(mm.PRESETS["llama-2-70b"].with_changes(n_kv_heads=64), context_len=4096)
    assert mha == 8 * gqa == 2 * 80 * 64 * 128 * 4096 * 2


def test_kv_cache_formats_and_batches():
    one = mm.kv_cache_bytes("mistral-7b", context_len=1000)
    assert mm.kv_cache_bytes("mistral-7b", context_len=1000, kv_format="fp8") * 2 == one
    assert mm.kv_cache_bytes("mistral-7b", context_len=1000, batch_size=16) == 16 * one
    lengths = np.array([1000, 2000, 4000])
    assert list(mm.kv_cache_bytes("mistral-7b", context_len=lengths)) == [one, 2 * one, 4 * one]


def test_weights_in_serving_formats():
    # The article: 7B x 2 B = 14 GB; int8 1 B/param; int4 0.5 B plus one fp32 absmax per 64 values
    # (0.5 bits = 1/16 B per param); nf4 with double quantization 0.127 bits.
    n = 7 * 10**9
    seven_b = mm.uniform_model(n, 32)
    assert mm.inference_memory(seven_b, weights_format="bf16").weights == 14 * GB
    assert mm.inference_memory(seven_b, weights_format="fp32").weights == 28 * GB
    int8 = mm.inference_memory(seven_b, weights_format="int8")
    assert (int8.weights, int8.quantization_constants) == (n, 4 * n // 64)
    int4 = mm.inference_memory(seven_b, weights_format="int4")
    assert (int4.weights, int4.quantization_constants) == (n // 2, 4 * n // 64)
    nf4 = mm.inference_memory(seven_b, weights_format="nf4")
    blocks = n // 64
    assert nf4.quantization_constants == blocks + 4 * -(-blocks // 256)


def test_rule_of_thumb_is_weights_times_1_2():
    # EleutherAI via accelerate's docs: memory ~ weights x 1.2. For 14 GB of weights: 16.8 GB.
    m = mm.inference_memory(mm.uniform_model(7e9, 32))
    assert m.rule_of_thumb == 16_800_000_000 and mm.RULE_OF_THUMB_FACTOR == 1.2


def test_total_is_the_sum_of_its_parts():
    m = mm.inference_memory("llama-3-8b", weights_format="nf4", kv_format="fp8", batch_size=4, context_len=8192)
    assert m.total == sum(m.parts().values())
    assert m.kv_cache == mm.kv_cache_bytes("llama-3-8b", context_len=8192, batch_size=4, kv_format="fp8")


def test_working_set_by_hand():
    # GPT-2 small, one 1024-token prefill in 16 bit (e = 2) with fused attention, term by term as
    # transformers allocates it (measured in validation/inference_working_set.py):
    # held all pass: token + position embeddings, 2*1024*768 + 2*1024*768 = 3,145,728 B;
    # the MLP phase is the peak: block input, attention output, residual, normed copy (4h) and
    # gelu_new's four 4h-wide tensors (4 x 3072): 2*1024*(4*768 + 4*3072) = 31,457,280 B.
    s = 1024
    assert mm.working_set_bytes("gpt2", context_len=s) == 3_145_728 + 31_457_280
    # Eager attention adds the causal mask (2 B x s^2 = 2,097,152 B, held all pass) and moves the peak to
    # attention: input, normed, qkv (5h) plus scores and scaled scores for 12 heads,
    # 2*1024*5*768 + 2*2*12*1024^2 = 7,864,320 + 50,331,648 = 58,195,968 B.
    eager = mm.working_set_bytes("gpt2", context_len=s, attention="eager")
    assert eager == 3_145_728 + 2_097_152 + 58_195_968


def test_decode_speed_is_bounded_by_bandwidth():
    # kipply 2022: each generated token reads every weight and the KV cache once. Llama-2-7B in bf16
    # (13,476,831,232 B) with a 2,048-token cache (1,073,741,824 B) on an H100 (3.35 TB/s):
    # 3.35e12 / 14,550,573,056 = 230.2 tokens/s at most.
    m = mm.inference_memory("llama-2-7b", context_len=2048)
    assert m.weights == 2 * 6_738_415_616 and m.kv_cache == 2**30
    assert mm.decode_tokens_per_second(m, "H100 80GB") == pytest.approx(3.35e12 / 14_550_573_056)


def test_a_model_without_widths_still_gets_its_weights():
    m = mm.inference_memory(7e9)
    assert m.weights == 14 * GB and m.kv_cache == 0 and m.notes
