"""Inference memory: KV cache, weights in serving formats, the 1.2x rule of thumb, decode speed."""

import numpy as np
import pytest

import memmath as mm

GB = 10**9


def test_llama2_13b_kv_cache_at_8192_tokens():
    # kipply 2022, Transformer Inference Arithmetic: 2 (K, V) x 40 layers x 40 heads x 128 x 8192 tokens x 2 bytes = 6.7 GB.
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
    # Mistral-7B-v0.1's 4,096-token window: no quantized cache (QuantizedCache takes full-attention layers only)
    with pytest.raises(ValueError, match="sliding-window"):
        mm.kv_cache_bytes("mistral-7b", context_len=1000, kv_format="fp8")
    assert mm.kv_cache_bytes("llama-3-8b", context_len=1000, kv_format="fp8") * 2 == mm.kv_cache_bytes(
        "llama-3-8b", context_len=1000)
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
    assert m.rule_of_thumb == 16_800_000_000
    # Whole bytes, rounded up: 3 bf16 weights are 6 B, and 6 x 1.2 = 7.2 B needs 8.
    assert mm.inference_memory(mm.uniform_model(3, 1)).rule_of_thumb == 8
    # Exact where a float product is not: (10**15 - 1) fp32 weights are 4e15 - 4 B; x 1.2 = 4.8e15 - 4.8,
    # rounded up 4.8e15 - 4 (the float product 4e15-4 x 1.2 rounds to 4.8e15 - 5).
    huge = mm.inference_memory(mm.uniform_model(10**15 - 1, 1), weights_format="fp32")
    assert huge.rule_of_thumb == 4_799_999_999_999_996


def test_fp8_kv_cache_of_llama_3_8b_by_hand():
    m = mm.inference_memory("llama-3-8b", weights_format="nf4", kv_format="fp8", batch_size=4, context_len=8192)
    # 2 (K, V) x 32 layers x 8 kv heads x 128 x 8,192 tokens x 4 sequences x 1 B (meta-llama/Meta-Llama-3-8B config).
    assert m.kv_cache == 2 * 32 * 8 * 128 * 8192 * 4 == 2_147_483_648
    assert m.kv_cache == mm.kv_cache_bytes("llama-3-8b", context_len=8192, batch_size=4, kv_format="fp8")


def test_working_set_by_hand():
    # GPT-2 small, one 1024-token prefill in 16 bit (e = 2) with fused attention, term by term as
    # transformers allocates it (measured in validation/inference_working_set.py):
    # held all pass: token + position embeddings, 2*1024*768 + 2*1024*768 = 3,145,728 B;
    # the MLP phase is the peak: block input, attention output, residual, normed copy (4h) and
    # gelu_new's four 4h-wide tensors (4 x 3072): 2*1024*(4*768 + 4*3072) = 31,457,280 B.
    s = 1024
    assert mm.inference.working_set_bytes("gpt2", context_len=s) == 3_145_728 + 31_457_280
    # Eager attention adds the causal mask (2 B x s^2 = 2,097,152 B, held all pass) and moves the peak to
    # attention: input, normed, qkv (5h) plus scores and scaled scores for 12 heads,
    # 2*1024*5*768 + 2*2*12*1024^2 = 7,864,320 + 50,331,648 = 58,195,968 B.
    eager = mm.inference.working_set_bytes("gpt2", context_len=s, attention="eager")
    assert eager == 3_145_728 + 2_097_152 + 58_195_968


def test_decode_speed_is_bounded_by_bandwidth():
    # kipply 2022: each generated token reads every weight and the KV cache once. Llama-2-7B in bf16
    # (13,476,831,232 B) with a 2,048-token cache (1,073,741,824 B) on an H100 (3.35 TB/s):
    # 3.35e12 / 14,550,573,056 = 230.2 tokens/s at most.
    m = mm.inference_memory("llama-2-7b", context_len=2048)
    assert m.weights == 2 * 6_738_415_616 and m.kv_cache == 2**30
    assert mm.inference.decode_tokens_per_second(m, "H100 80GB") == pytest.approx(3.35e12 / 14_550_573_056)


def test_a_model_without_widths_still_gets_its_weights():
    m = mm.inference_memory(7e9)
    assert m.weights == 14 * GB and m.kv_cache == 0 and m.notes


# ---- memmath's prefill working set against what transformers allocated (recorded PyTorch measurements).
#
# Measured with validation/inference_working_set.py (torch 2.13.0+cpu, transformers 5.24.0): tiny
# GPT-2 (h=256, 4 layers, 8 heads, V=50,257) and LLaMA (h=256, I=688, 4 layers, 8 heads, 2 or 8 kv
# heads, V=32,000) models in bf16, one prefill with use_cache=True and logits_to_keep=1; the peak of
# live storages allocated during the pass (weights left out) minus the KV cache.
# (family, attention, seq_len, batch_size) -> measured bytes
MEASURED = {
    ("gpt2", "sdpa", 256, 1): 2_887_680, ("gpt2", "sdpa", 512, 2): 11_284_480, ("gpt2", "sdpa", 1024, 1): 11_550_720,
    ("gpt2", "eager", 256, 1): 4_067_328, ("gpt2", "eager", 512, 2): 21_245_952,
    ("gpt2", "eager", 1024, 1): 39_337_984,
    ("llama-gqa", "sdpa", 256, 1): 1_615_872, ("llama-gqa", "sdpa", 512, 2): 6_393_856,
    ("llama-gqa", "sdpa", 1024, 1): 6_463_488, ("llama-gqa", "eager", 256, 1): 6_195_200,
    ("llama-gqa", "eager", 512, 2): 46_206_976, ("llama-gqa", "eager", 1024, 1): 89_268_224,
    ("llama-mha", "eager", 256, 1): 5_933_056, ("llama-mha", "eager", 512, 2): 45_158_400,
    ("llama-mha", "eager", 1024, 1): 88_219_648,
}


def tiny(family):
    if family == "gpt2":
        return mm.models.gpt2_model(n_layers=4, hidden_size=256, n_heads=8, vocab_size=50257, max_positions=1024)
    kv = 2 if family == "llama-gqa" else 8
    return mm.models.llama_model(n_layers=4, hidden_size=256, n_heads=8, n_kv_heads=kv, intermediate_size=688,
                          vocab_size=32000)


@pytest.mark.parametrize("case", sorted(MEASURED))
def test_working_set_within_one_percent_of_transformers(case):
    family, attention, s, b = case
    predicted = mm.inference.working_set_bytes(tiny(family), context_len=s, batch_size=b, attention=attention)
    assert predicted == pytest.approx(MEASURED[case], rel=0.01)


def test_llama_eager_softmax_in_fp32_by_hand():
    # Llama-2-7B (h=4096, a=32, d=128, I=11008, MHA), bf16, s=4096, b=1, eager. Attention phase:
    # 2*4096*(2*4096 + 4096) per-token terms (block input, normed, q; no repeat_kv in MHA) = 100,663,296
    # + (2 + 4 + 4)*32*4096^2 scores = 5,368,709,120;
    # MLP phase 2*4096*(3*4096 + 3*11008) = 371,195,904 is smaller. Outside: embeddings 2*4096*4096,
    # cos/sin 2*2*4096*128, mask 2*4096^2 = 33,554,432 + 2,097,152 + 33,554,432.
    expected = 100_663_296 + 5_368_709_120 + 33_554_432 + 2_097_152 + 33_554_432
    got = mm.inference.working_set_bytes(mm.PRESETS["llama-2-7b"], context_len=4096, attention="eager")
    assert got == expected


def test_sweep_matches_points():
    import numpy as np

    shape = mm.PRESETS["llama-3-8b"]
    contexts = np.array([1, 64, 4096, 32768])
    swept = mm.inference.working_set_bytes(shape, context_len=contexts, attention="eager")
    for i, s in enumerate(contexts):
        assert swept[i] == mm.inference.working_set_bytes(shape, context_len=int(s), attention="eager")


# ---- Where "weights x 1.2" stops covering the detailed inference total (hand-derived expectations).
def test_llama_2_7b_bf16_one_sequence_by_hand():
    # Weights W = 2 x 6,738,415,616 = 13,476,831,232 B; the rule allows ceil(1.2 W) = 16,172,197,479 B.
    # Per token: KV 2 x 32 layers x 32 heads x 128 x 2 B = 524,288; working set (sdpa, LLaMA): token
    # embeddings 2 x 4096 + rotary cos/sin 2 x 2 x 128 = 8,704, plus the MLP phase 2 x (3 x 4096 +
    # 3 x 11008) = 90,624 (larger than attention's 32,768 and the head's 16,384 + 128,000 / s from
    # s = 2 on): 623,616 B per token. (16,172,197,479 - 13,476,831,232) / 623,616 = 4,322.1 -> 4,322.
    assert mm.inference.rule_of_thumb_context_limit("llama-2-7b") == 4322


def test_limit_is_the_boundary():
    limit = mm.inference.rule_of_thumb_context_limit("mistral-7b", batch_size=4)
    at = mm.inference_memory("mistral-7b", batch_size=4, context_len=limit)
    past = mm.inference_memory("mistral-7b", batch_size=4, context_len=limit + 1)
    assert at.total <= at.rule_of_thumb < past.total


def test_llama_3_8b_gqa_by_hand():
    # W = 2 x 8,030,261,248 = 16,060,522,496 B; ceil(1.2 W) - W = 3,212,104,500 B of allowance.
    # Per token: KV 2 x 32 x 8 kv heads x 128 x 2 B = 131,072 (4x less than Llama-2-7B's 32 heads);
    # working set 2 x 4096 + 4 x 128 = 8,704 outside + MLP 2 x (3 x 4096 + 3 x 14336) = 110,592:
    # 250,368 B per token. 3,212,104,500 / 250,368 = 12,829.6 -> 12,829.
    assert mm.inference.rule_of_thumb_context_limit("llama-3-8b") == 12829


def test_zero_when_one_token_overflows_and_cap_when_it_never_does():
    assert mm.inference.rule_of_thumb_context_limit("gpt2", batch_size=2**20) == 0
    assert mm.inference.rule_of_thumb_context_limit("llama-3-70b", max_context=64) == 64


def test_needs_layer_widths():
    with pytest.raises(ValueError, match="layers"):
        mm.inference.rule_of_thumb_context_limit(7e9)


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


# The model types read from config.json, measured the same way (validation/inference_working_set.py --new:
# h=256, 4 layers, 8 heads, V=32,000, bf16; the configs in its CONFIGS). The GPT-NeoX, MoE, Gemma 2/3
# and Qwen2-MoE terms of working_set_bytes were written after these measurements, to fit them: not held out.
MEASURED_NEW = {
    ("gemma", "sdpa", 256, 1): 1_615_872, ("gemma", "sdpa", 512, 2): 6_393_856,
    ("gemma", "eager", 256, 1): 6_195_200, ("gemma", "eager", 512, 2): 46_206_976,
    ("gemma2", "eager", 256, 1): 6_326_288, ("gemma2", "eager", 512, 2): 47_255_568,
    ("gemma3", "sdpa", 256, 1): 1_615_904, ("gemma3", "sdpa", 512, 2): 6_393_888,
    ("gemma3", "eager", 256, 1): 6_326_304, ("gemma3", "eager", 512, 2): 47_255_584,
    ("neox", "sdpa", 256, 1): 1_583_104, ("neox", "sdpa", 512, 2): 6_311_936,
    ("neox", "eager", 256, 1): 6_301_696, ("neox", "eager", 512, 2): 46_682_112,
    ("mixtral", "sdpa", 256, 1): 2_250_784, ("mixtral", "sdpa", 512, 2): 8_933_408,
    ("mixtral", "eager", 256, 1): 6_195_200, ("mixtral", "eager", 512, 2): 46_206_976,
    ("qwen2moe", "sdpa", 256, 1): 1_826_848, ("qwen2moe", "sdpa", 512, 2): 7_237_664,
    ("qwen2moe", "eager", 256, 1): 6_326_272, ("qwen2moe", "eager", 512, 2): 47_255_552,
    ("qwen3moe", "sdpa", 256, 1): 2_701_376, ("qwen3moe", "sdpa", 512, 2): 10_735_680,
    ("qwen3moe", "eager", 256, 1): 6_195_200, ("qwen3moe", "eager", 512, 2): 46_206_976,
}
from validation.working_set_configs import CONFIGS as NEW_CONFIGS, SIZES as NEW_SIZES  # noqa: E402


@pytest.mark.parametrize("case", sorted(MEASURED_NEW))
def test_working_set_of_the_new_model_types_within_one_percent(case):
    family, attention, s, b = case
    shape = mm.from_hf_config(dict(NEW_CONFIGS[family], **NEW_SIZES))
    predicted = mm.inference.working_set_bytes(shape, context_len=s, batch_size=b, attention=attention)
    assert predicted == pytest.approx(MEASURED_NEW[case], rel=0.01)


def test_moe_working_set_by_hand():
    # Mixtral-8x7B (h=4096, 8 experts of I=14,336, 2 per token), bf16, s=4096, b=1, SDPA. The MoE block's
    # peak is its SwiGLU moment (I > 1.25h): per token 3h (block input, residual, normed input), the
    # router's 8 logits, then S = 2t rows: fp32 top-k weights and int64 indices (12 B a row), the sort's
    # two int64 vectors (16), the sorted fp32 weights (4) and histc's fp32 input (4); the gathered input
    # (h) and gate_up, SiLU, product (4I) per row; histc and offsets 8 B per expert.
    t, h, inner, rows = 4096, 4096, 14336, 2 * 4096
    moe = 2 * t * 3 * h + 2 * t * 8 + rows * (12 + 16 + 4 + 4) + 2 * rows * (h + 4 * inner) + 8 * 8
    outside = 2 * t * h + 2 * 2 * t * 128  # token embeddings, rotary cos and sin
    shape = mm.PRESETS["mixtral-8x7b"]
    assert mm.inference.working_set_bytes(shape, context_len=4096) == outside + moe


# ---- a mixture of experts' decode step reads its shared tensors and the experts its tokens reach ------------
# Qwen/Qwen3-30B-A3B's config.json: hidden 2048, 48 layers, 32 query heads and 4 key/value heads of 128,
# moe_intermediate_size 768, 128 experts, 8 per token, vocabulary 151,936, untied head.
QWEN3_MOE_SHARED_PER_LAYER = (
    2048 * 4096 + 2 * 512 * 2048 + 4096 * 2048  # q (32 x 128 wide), k and v (4 x 128), o
    + 2 * 2048 + 2 * 128  # the two RMSNorms, q_norm and k_norm
    + 128 * 2048)  # the router
QWEN3_MOE_EXPERT = 3 * 2048 * 768  # gate, up and down of one expert
QWEN3_MOE_OUTSIDE = 2 * 151936 * 2048 + 2048  # embeddings, untied head, final norm


def test_qwen3_moe_active_parameters_by_hand():
    # 48 x (18,874,368 + 4,352 + 262,144 + 8 x 4,718,592) + 622,331,904 = 3,353,032,704: the card's "3.3B activated".
    active = 48 * (QWEN3_MOE_SHARED_PER_LAYER + 8 * QWEN3_MOE_EXPERT) + QWEN3_MOE_OUTSIDE
    assert mm.PRESETS["qwen3-30b-a3b"].active_params == active == 3_353_032_704


def test_a_moe_token_at_batch_1_reads_its_active_parameters():
    # bf16: 3,353,032,704 x 2 B = 6,706,065,408 B read per step (6.71 GB), not the 61.06 GB of all its weights;
    # plus the cache at 2,048 tokens, 2 x 48 x 4 x 128 x 2 B x 2048 = 201,326,592 B. An H200 reads 4.8 TB/s
    # (NVIDIA's datasheet): 4.8e12 / 6,907,392,000 = 694.9 tokens/s at most.
    m = mm.inference_memory("qwen3-30b-a3b", context_len=2048)
    active = 48 * (QWEN3_MOE_SHARED_PER_LAYER + 8 * QWEN3_MOE_EXPERT) + QWEN3_MOE_OUTSIDE
    assert m.weights_read == 2 * active == 6_706_065_408
    assert m.weights == 2 * (48 * (QWEN3_MOE_SHARED_PER_LAYER + 128 * QWEN3_MOE_EXPERT) + QWEN3_MOE_OUTSIDE)
    assert m.kv_cache == 2 * 48 * 4 * 128 * 2 * 2048 == 201_326_592
    assert m.read_per_step == 6_907_392_000
    assert mm.inference.decode_tokens_per_second(m, "H200") == pytest.approx(4.8e12 / 6_907_392_000)


def test_a_batch_reaches_at_most_batch_x_k_experts_per_layer():
    # Qwen3-30B-A3B routes each token to 8 of 128 experts: a step of B tokens reads min(128, 8B) experts per
    # layer at most (distinct experts, the assumption); 16 tokens can reach all 128, and then every weight is read.
    from memmath.inference import routed_experts_reached
    batches = np.array([1, 2, 4, 8, 16, 32])
    assert list(routed_experts_reached("qwen3-30b-a3b", batches)) == [8, 16, 32, 64, 128, 128]
    assert routed_experts_reached("llama-3-8b", 4) == 0
    m = mm.inference_memory("qwen3-30b-a3b", context_len=1024, batch_size=batches)
    stored_outside_experts = 2 * (48 * QWEN3_MOE_SHARED_PER_LAYER + QWEN3_MOE_OUTSIDE)
    expected = stored_outside_experts + 2 * 48 * np.minimum(128, 8 * batches) * QWEN3_MOE_EXPERT
    assert list(m.weights_read) == list(expected)
    assert m.weights_read[-1] == m.weights  # bf16 has no constants: all of it
    dense = mm.inference_memory("llama-3-8b", weights_format="nf4", batch_size=8)
    assert dense.weights_read == dense.weights + dense.quantization_constants


def test_mixtral_in_nf4_reads_nf4_attention_and_two_bf16_experts_per_layer():
    # mistralai/Mixtral-8x7B-v0.1: hidden 4096, 32 layers, 8 key/value heads, expert width 14,336, 2 of 8 experts,
    # vocabulary 32,000. Through transformers + bitsandbytes only q, k, v, o are nn.Linear (nf4, 0.5 B a weight,
    # and per matrix ceil(n/64) 8-bit constants + 4 B per 256 of them); the experts, router, norms, embeddings and
    # head stay bf16. Per layer: q and o 4096 x 4096 (262,144 blocks, 1,024 groups: 266,240 B of constants each),
    # k and v 1024 x 4096 (65,536 blocks: 66,560 B each).
    attention = (2 * 4096 * 4096 + 2 * 1024 * 4096) // 2 + 2 * 266_240 + 2 * 66_560
    two_experts = 2 * 2 * 3 * 4096 * 14336
    norms_and_router = 2 * (2 * 4096 + 8 * 4096)
    outside = 2 * (2 * 32000 * 4096 + 4096)
    m = mm.inference_memory("mixtral-8x7b", weights_format="nf4")
    assert m.weights_read == 32 * (attention + two_experts + norms_and_router) + outside == 23_767_883_776
    # bf16 at batch 1: the card's 12.9B active parameters, 12,879,925,248 x 2 B.
    assert mm.inference_memory("mixtral-8x7b").weights_read == 2 * 12_879_925_248


def test_the_command_line_gives_the_moe_decode_bound(capsys):
    # `memmath infer --json` plans with the same memory (plan_serving): 4.8e12 / (6,706,065,408 + 201,326,592).
    import json
    from memmath import cli
    status = cli.main(["infer", "qwen3-30b-a3b", "--gpu", "H200", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0
    assert report["decode_tokens_per_second_upper_bound"] == pytest.approx(4.8e12 / 6_907_392_000)


def test_weights_read_cannot_exceed_what_is_stored():
    with pytest.raises(ValueError, match="weights_read"):
        mm.inference.InferenceMemory(10, 2, 0, 0, "bf16", "bf16", weights_read=13)
    assert mm.inference.InferenceMemory(10, 2, 5, 0, "bf16", "bf16").read_per_step == 17


def test_two_schemes_for_one_model_in_one_format():
    # Llama-2-13B (meta-llama/Llama-2-13b-hf: hidden 5120, MLP 13,824, 40 layers, vocabulary 32,000, untied head).
    # Every weight in the format (a bare parameter count, as lesson 1's first figure): nf4 with double-quantized
    # constants, 13,015,864,320 / 2 + 203,372,880 (blocks of 64) + 4 x 794,426 (groups of 256) = 6,714,482,744 B;
    # int8 with one fp32 scale per 64 values, 13,015,864,320 + 4 x 203,372,880 = 13,829,355,840 B.
    n = 13_015_864_320
    every_nf4 = mm.inference_memory(n, weights_format="nf4")
    every_int8 = mm.inference_memory(n, weights_format="int8")
    assert every_nf4.weights + every_nf4.quantization_constants == n // 2 + 203_372_880 + 4 * 794_426 == 6_714_482_744
    assert every_int8.weights + every_int8.quantization_constants == n + 4 * 203_372_880 == 13_829_355_840
    # As transformers loads it with bitsandbytes (replace_with_bnb_linear converts nn.Linear only): per layer four
    # 5120 x 5120 attention matrices and three 5120 x 13,824 MLP matrices (317,194,240 weights); embeddings, head
    # and norms (328,094,720 values) in bf16. nf4 constants per matrix: ceil(n/64) + 4 x ceil(blocks/256), 416,000 B
    # for an attention matrix and 1,123,200 B for an MLP one. int8: one fp32 scale per output row.
    linear, rest = 40 * 317_194_240, 2 * 32000 * 5120 + 40 * 2 * 5120 + 5120
    loaded_nf4 = mm.inference_memory("llama-2-13b", weights_format="nf4")
    loaded_int8 = mm.inference_memory("llama-2-13b", weights_format="int8")
    assert loaded_nf4.weights + loaded_nf4.quantization_constants == (
        linear // 2 + 2 * rest + 40 * (4 * 416_000 + 3 * 1_123_200)) == 7_201_418_240
    assert loaded_int8.weights + loaded_int8.quantization_constants == (
        linear + 2 * rest + 40 * 4 * (4 * 5120 + 2 * 13824 + 5120)) == 13_352_478_720
