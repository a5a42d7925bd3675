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


# ---- sliding windows, as transformers' DynamicCache keeps them --------------------------------------
from validation.published_configs import PUBLISHED_CONFIGS  # noqa: E402


def test_mistral_sliding_window_caps_the_cache():
    # Mistral-7B-v0.1: sliding_window 4096 on all 32 layers, 8 kv heads of 128. At 32,768 tokens each
    # layer holds the 4,096-token storage of its last torch.cat (a view of 4,095 tokens):
    # 2 x 32 x 8 x 128 x 4096 x 2 B = 536,870,912 B, an eighth of the full 4,294,967,296.
    mistral = mm.from_hf_config(PUBLISHED_CONFIGS["Mistral-7B-v0.1"])
    assert mm.kv_cache_bytes(mistral, context_len=32768) == 2 * 32 * 8 * 128 * 4096 * 2 == 536_870_912
    assert mm.kv_cache_bytes(mistral, context_len=32768, after_prefill=True) == 2 * 32 * 8 * 128 * 32768 * 2
    assert mm.kv_cache_bytes(mistral, context_len=1000) == 2 * 32 * 8 * 128 * 1000 * 2  # inside the window


def test_gemma_mixes_sliding_and_full_layers():
    # gemma-2-2b: 26 layers alternating sliding (4,096) and full, 4 kv heads of 256. At 8,192 tokens:
    # 13 x 4096 + 13 x 8192 tokens x 2 x 4 x 256 x 2 B.
    g2 = mm.from_hf_config(PUBLISHED_CONFIGS["gemma-2-2b"])
    assert mm.kv_cache_bytes(g2, context_len=8192) == (13 * 4096 + 13 * 8192) * 2 * 4 * 256 * 2
    # gemma-3-1b: 26 layers, every 6th full (4 of them), window 512, 1 kv head of 256.
    g3 = mm.from_hf_config(PUBLISHED_CONFIGS["gemma-3-1b-pt"])
    assert mm.kv_cache_bytes(g3, context_len=32768) == (22 * 512 + 4 * 32768) * 2 * 1 * 256 * 2
    lengths = np.array([100, 32768])
    assert list(mm.kv_cache_bytes(g3, context_len=lengths)) == [26 * 100 * 1024, (22 * 512 + 4 * 32768) * 1024]


@pytest.mark.live
@pytest.mark.parametrize("model_type, extra", [
    ("mistral", {}),
    ("gemma2", {"head_dim": 8}),
    ("gemma3_text", {"head_dim": 8, "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                                                     "full_attention"]}),
])
def test_kv_cache_matches_transformers_dynamic_cache(torch, transformers, model_type, extra):
    # A small model of each kind, a 20-token prompt and 3 decode steps on the CPU: the bytes of the
    # storages behind each layer's keys and values equal kv_cache_bytes at 23 tokens.
    config = dict(model_type=model_type, vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, sliding_window=8, torch_dtype="float32", **extra)
    hf_config = transformers.AutoConfig.for_model(**config)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config).eval()

    def stored(cache):
        return sum(t.untyped_storage().nbytes() for layer in cache.layers for t in (layer.keys, layer.values))

    with torch.no_grad():
        cache = model(torch.randint(0, 64, (2, 20)), use_cache=True).past_key_values
        prefill = stored(cache)
        for _ in range(3):
            cache = model(torch.randint(0, 64, (2, 1)), cache=cache, use_cache=True).past_key_values
    shape = mm.from_hf_config(config)
    assert stored(cache) == mm.kv_cache_bytes(shape, context_len=23, batch_size=2, kv_format="fp32")
    assert prefill == mm.kv_cache_bytes(shape, context_len=20, batch_size=2, kv_format="fp32", after_prefill=True)


def test_int8_is_llm_int8_with_one_scale_per_output_row():
    # bitsandbytes Linear8bitLt: int8 weight + fp32 SCB per output row. Llama-2-7B per block, rows of
    # q, k, v, o (4,096 each), gate, up (11,008 each), down (4,096): 42,496 rows x 4 B x 32 blocks;
    # embeddings, norms and lm_head stay in bf16 (transformers' get_keys_to_not_convert keeps lm_head).
    m = mm.inference_memory("llama-2-7b", weights_format="int8")
    assert m.quantization_constants == 42_496 * 4 * 32 == 5_439_488
    linear = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    assert m.weights == linear + 2 * (6_738_415_616 - linear)
    assert "per output row" in m.weights_layout and "output head" in m.weights_layout
    moe = mm.inference_memory("mixtral-8x7b", weights_format="nf4").weights_layout
    assert "routed experts" in moe and "router" in moe
