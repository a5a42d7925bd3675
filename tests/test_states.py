"""Caches and recurrent states per layer (memmath.states) against hand derivations from published configs and
against the caches transformers 5.24 really builds: a tiny model of each family on the CPU in bf16, a 10-token
prompt for 2 sequences and 2 decode steps, then the bytes of the storages behind every tensor the DynamicCache
holds (keys, values, conv and recurrent states), layer by layer.
"""

from __future__ import annotations

import pytest

from memmath.states import (
    ChunkedAttention, FullAttention, GatedDeltaNet, Hybrid, LatentAttention, Mamba2, NoCache, SlidingAttention,
    cache_bytes, cache_parts, chunked_attention_bytes, decompressed_latent_attention_bytes, full_attention_bytes,
    gated_deltanet_state_bytes, latent_attention_bytes, layers_from_layer_types, mamba2_state_bytes,
    sliding_attention_bytes, window_tokens,
)
from memmath.validate import FieldError

# ---- published configs, derived by hand ----------------------------------------------------------------------

# deepseek-ai/DeepSeek-V2-Lite config.json: 27 layers, kv_lora_rank 512, qk_rope_head_dim 64, 16 heads,
# qk_nope_head_dim 128, v_head_dim 128.
DEEPSEEK_V2_LITE = dict(layers=27, kv_lora_rank=512, qk_rope_head_dim=64, heads=16, qk_nope_head_dim=128,
                        v_head_dim=128)


def test_deepseek_v2_lite_caches_the_latent_1_02_gb_at_32k():
    c = DEEPSEEK_V2_LITE
    layers = [LatentAttention(kv_lora_rank=c["kv_lora_rank"], rope_head_dim=c["qk_rope_head_dim"])] * c["layers"]
    # 27 layers x 32,768 tokens x (512 + 64) values x 2 B = 1,019,215,872 B (1.02 GB).
    assert cache_bytes(layers, tokens=32768, batch=1, dtype="bf16") == 27 * 32768 * 576 * 2 == 1_019_215_872
    assert latent_attention_bytes(kv_lora_rank=512, rope_head_dim=64, tokens=32768, dtype="bfloat16") * 27 \
        == 1_019_215_872
    # The decompressed heads cached by releases up to 5.14: 16 x (128 + 64 + 128) = 5,120 values a token per layer,
    # 27 x 32,768 x 5,120 x 2 B = 9,059,696,640 B (9.06 GB), 8.9 times the latent.
    old = decompressed_latent_attention_bytes(heads=16, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                                              tokens=32768) * 27
    assert old == 27 * 32768 * 5120 * 2 == 9_059_696_640


def test_gpt_oss_20b_alternating_128_token_windows():
    # openai/gpt-oss-20b config.json: 24 layers alternating sliding (window 128) and full, 8 kv heads of 64.
    layers = [SlidingAttention(kv_heads=8, head_dim=64, window=128), FullAttention(kv_heads=8, head_dim=64)] * 12
    # At 32,768 tokens: 12 full layers x 2 x 8 x 64 x 32,768 x 2 B = 805,306,368 B and 12 sliding layers holding
    # the 128-token storage of their last torch.cat: 12 x 2 x 8 x 64 x 128 x 2 B = 3,145,728 B.
    parts = cache_parts(layers, tokens=32768)
    assert parts == {"sliding_attention": 3_145_728, "full_attention": 805_306_368}
    # Right after a 32,768-token prefill the sliding layers still hold the whole prompt.
    assert cache_bytes(layers, tokens=32768, after_prefill=True) == 24 * 2 * 8 * 64 * 32768 * 2


def test_qwen3_next_linear_layers_hold_a_fixed_state():
    # Qwen/Qwen3-Next-80B-A3B-Instruct config.json: 48 layers, every 4th full attention (2 kv heads of 256), the
    # other 36 gated DeltaNet with 16 key heads and 32 value heads of 128, conv kernel 4.
    delta = GatedDeltaNet(key_heads=16, value_heads=32, key_head_dim=128, value_head_dim=128, conv_kernel=4)
    layers = ([delta] * 3 + [FullAttention(kv_heads=2, head_dim=256)]) * 12
    # Per DeltaNet layer: conv (2 x 16 x 128 + 32 x 128) x 4 x 2 B = 65,536 B (bf16) and the recurrent state
    # 32 x 128 x 128 x 4 B = 2,097,152 B (fp32), at any length.
    for tokens in (1, 4096, 262144):
        assert cache_parts(layers, tokens=tokens)["gated_deltanet"] == 36 * (65_536 + 2_097_152)
    assert cache_parts(layers, tokens=4096)["full_attention"] == 12 * 2 * 2 * 256 * 4096 * 2


def test_window_tokens_holds_the_window_once_decoding():
    # DynamicSlidingWindowLayer shows window - 1 tokens, a view of the window-long storage of its last torch.cat.
    assert window_tokens(128, 1000) == 128
    assert window_tokens(128, 100) == 100
    assert window_tokens(128, 1000, after_prefill=True) == 1000
    assert chunked_attention_bytes(kv_heads=8, head_dim=128, chunk=8192, tokens=32768) \
        == sliding_attention_bytes(kv_heads=8, head_dim=128, window=8192, tokens=32768) == 2 * 8 * 128 * 8192 * 2


def test_states_do_not_grow_with_the_context_and_scale_with_the_batch():
    mamba = dict(heads=8, head_dim=64, state_size=128, n_groups=1, conv_kernel=4)
    one = mamba2_state_bytes(**mamba, batch=1)
    # conv (8 x 64 + 2 x 1 x 128) x 4 x 2 B = 6,144 B; SSM 8 x 64 x 128 x 4 B = 262,144 B.
    assert one == 6_144 + 262_144
    assert mamba2_state_bytes(**mamba, batch=3) == 3 * one
    assert mamba2_state_bytes(**mamba, state_dtype="bf16") == 6_144 + 131_072
    assert Mamba2(**mamba).nbytes(tokens=1) == Mamba2(**mamba).nbytes(tokens=1_000_000) == one
    assert gated_deltanet_state_bytes(key_heads=2, value_heads=4, key_head_dim=8, value_head_dim=16, conv_kernel=4,
                                      batch=2) == 2 * (2 * 2 * 8 + 4 * 16) * 4 * 2 + 2 * 4 * 8 * 16 * 4


def test_hybrid_and_no_cache_layers():
    hybrid = Hybrid((Mamba2(heads=3, head_dim=16, state_size=8, n_groups=1, conv_kernel=4),
                     FullAttention(kv_heads=2, head_dim=8)))
    parts = cache_parts([hybrid, NoCache("reuses layer 0's keys and values")], tokens=12, batch=2)
    assert parts == {"mamba2": 2 * 64 * 4 * 2 + 2 * 3 * 16 * 8 * 4, "full_attention": 2 * 2 * 2 * 8 * 12 * 2,
                     "no_cache": 0}
    assert full_attention_bytes(kv_heads=1, head_dim=192, value_head_dim=128, tokens=10) == (192 + 128) * 10 * 2


@pytest.mark.parametrize("call, field", [
    (lambda: cache_bytes([FullAttention(2, 8)], tokens=0), "tokens"),
    (lambda: cache_bytes([FullAttention(2, 8)], tokens=10, batch=-1), "batch"),
    (lambda: SlidingAttention(kv_heads=2, head_dim=8, window=0), "window"),
    (lambda: Mamba2(heads=2, head_dim=8, state_size=0, n_groups=1, conv_kernel=4), "state_size"),
    (lambda: latent_attention_bytes(kv_lora_rank=512, rope_head_dim=64, tokens=1.5), "tokens"),
])
def test_bad_input_names_the_field(call, field):
    with pytest.raises(FieldError) as error:
        call()
    assert error.value.field == field


def test_layer_types_pick_the_cache_layer_transformers_picks():
    full, sliding = FullAttention(kv_heads=8, head_dim=64), SlidingAttention(kv_heads=8, head_dim=64, window=128)
    mamba = Mamba2(heads=4, head_dim=16, state_size=8, n_groups=1, conv_kernel=4)
    # Legacy names ("mamba", "attention") as configuration_utils.py remaps them; "moe" and "mlp" hold nothing.
    layers = layers_from_layer_types(["mamba", "attention", "moe", "hybrid", "hybrid_sliding"], full=full,
                                     sliding=sliding, linear=mamba)
    assert layers == [mamba, full, NoCache("no attention"), Hybrid((mamba, full)), Hybrid((mamba, sliding))]
    # Gemma 3n's kv_sharing_modes: "reuse" layers hold nothing, whatever their type.
    shared = layers_from_layer_types(["sliding_attention", "full_attention"] * 2, full=full, sliding=sliding,
                                     kv_sharing_modes=[None, None, "reuse", "reuse"])
    assert [layer.kind for layer in shared] == ["sliding_attention", "full_attention", "no_cache", "no_cache"]
    with pytest.raises(ValueError, match="pass sliding="):
        layers_from_layer_types(["sliding_attention"], full=full)
    with pytest.raises(ValueError, match="not modelled"):
        layers_from_layer_types(["indexed_attention"], full=full)
    with pytest.raises(ValueError, match="one entry per layer"):
        layers_from_layer_types(["full_attention"], full=full, kv_sharing_modes=[None, "reuse"])


def test_bad_layers_and_formats_are_refused():
    with pytest.raises(ValueError, match="at least one"):
        cache_bytes([], tokens=10)
    with pytest.raises(TypeError, match="layer records"):
        cache_bytes(["full_attention"], tokens=10)
    with pytest.raises(TypeError, match="list of layer records"):
        cache_bytes("full_attention", tokens=10)
    with pytest.raises(TypeError, match="layer records"):
        Hybrid((FullAttention(2, 8), "mamba"))
    assert FullAttention(kv_heads=2.0, head_dim=8).kv_heads == 2 and type(FullAttention(2.0, 8).kv_heads) is int
    with pytest.raises(ValueError, match="format must be one of"):
        cache_bytes([FullAttention(2, 8)], tokens=10, dtype="bf17")


# ---- what transformers 5.24 builds ---------------------------------------------------------------------------

PROMPT, STEPS, BATCH = 10, 2, 2  # a 10-token prompt, 2 decode steps: 12 tokens of context in 2 sequences
BASE = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            num_hidden_layers=2)


def _stored(torch, cache):
    """Bytes per layer of the storages behind a cache's keys, values, conv and recurrent states (each once)."""
    seen, per_layer = set(), []
    for layer in cache.layers:
        tensors = [getattr(layer, "keys", None), getattr(layer, "values", None)]
        for states in ("conv_states", "recurrent_states"):
            tensors += list((getattr(layer, states, None) or {}).values())
        total = 0
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().data_ptr() not in seen:
                seen.add(tensor.untyped_storage().data_ptr())
                total += tensor.untyped_storage().nbytes()
        per_layer.append(total)
    return per_layer


def _run(torch, transformers, model_type, **config):
    """A tiny bf16 model's config and DynamicCache after the prompt and STEPS decode steps, with the cache's bytes per
    layer right after the prefill and at the end."""
    hf_config = transformers.AutoConfig.for_model(model_type, **config)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config).eval().to(torch.bfloat16)
    with torch.no_grad():
        cache = model(torch.randint(0, 64, (BATCH, PROMPT)), use_cache=True).past_key_values
        after_prefill = _stored(torch, cache)
        for _ in range(STEPS):
            cache = model(torch.randint(0, 64, (BATCH, 1)), cache=cache, use_cache=True).past_key_values
    return hf_config, cache, after_prefill, _stored(torch, cache)


def _mapped(hf_config, layers):
    """layers_from_layer_types on the config transformers built, given the records of `layers` by kind: the
    mapping from layer_types names to cache layers, checked against the cache transformers picked."""
    parts = [part for layer in layers for part in (layer.parts if isinstance(layer, Hybrid) else (layer,))]

    def pick(kinds):
        return next((part for part in parts if isinstance(part, kinds)), None)

    # A config without layer_types (DeepSeek's) is all full attention (cache_utils.get_layer_types_and_kwargs).
    layer_types = getattr(hf_config, "layer_types", None) or ["full_attention"] * hf_config.num_hidden_layers
    return layers_from_layer_types(layer_types, kv_sharing_modes=getattr(hf_config, "kv_sharing_modes", None),
                                   full=pick((FullAttention, LatentAttention)), sliding=pick(SlidingAttention),
                                   chunked=pick(ChunkedAttention), linear=pick((Mamba2, GatedDeltaNet)))


def _predicted(layers, tokens=PROMPT + STEPS, after_prefill=False):
    return [cache_bytes([layer], tokens=tokens, batch=BATCH, dtype="bf16", after_prefill=after_prefill)
            for layer in layers]


@pytest.mark.live
@pytest.mark.parametrize("model_type, extra", [
    ("deepseek_v2", dict(q_lora_rank=None, n_group=1, topk_group=1)),
    ("deepseek_v3", dict(q_lora_rank=8, n_group=1, topk_group=1)),
])
def test_latent_attention_matches_transformers(torch, transformers, model_type, extra):
    # cache.update receives the latent [2, 1, 12, kv_lora_rank] and the rotary key [2, 1, 12, qk_rope_head_dim].
    hf_config, cache, _, measured = _run(
        torch, transformers, model_type, **{**BASE, "num_key_value_heads": 4}, kv_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=8, moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=1, **extra)
    assert tuple(cache.layers[0].keys.shape) == (2, 1, 12, 16) and tuple(cache.layers[0].values.shape) == (2, 1, 12, 8)
    layers = [LatentAttention(kv_lora_rank=16, rope_head_dim=8)] * 2
    assert measured == _predicted(layers) == _predicted(_mapped(hf_config, layers))
    # The heads the releases up to 5.14 cached would take 4 x (8 + 8 + 8) / (16 + 8) = 4 times as much here.
    assert sum(measured) * 4 == 2 * decompressed_latent_attention_bytes(
        heads=4, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, tokens=12, batch=2)


MAMBA = dict(mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2)


@pytest.mark.live
@pytest.mark.parametrize("model_type, extra, layers", [
    # Bamba: a Mamba-2 layer (conv 64 + 2 x 1 x 8 channels) and an attention layer (attn_layer_indices).
    ("bamba", dict(**MAMBA, mamba_n_groups=1, attn_layer_indices=[1]),
     [Mamba2(heads=4, head_dim=16, state_size=8, n_groups=1, conv_kernel=4), FullAttention(kv_heads=2, head_dim=8)]),
    # GraniteMoeHybrid: two groups of B and C.
    ("granitemoehybrid", dict(**MAMBA, mamba_n_groups=2, layer_types=["mamba", "attention"], num_local_experts=2,
                              num_experts_per_tok=1),
     [Mamba2(heads=4, head_dim=16, state_size=8, n_groups=2, conv_kernel=4), FullAttention(kv_heads=2, head_dim=8)]),
    # Falcon-H1: Mamba-2 (mamba_d_ssm 48 = 3 heads of 16) beside attention in every layer.
    ("falcon_h1", dict(MAMBA, mamba_n_heads=3, mamba_d_ssm=48, mamba_n_groups=1),
     [Hybrid((Mamba2(heads=3, head_dim=16, state_size=8, n_groups=1, conv_kernel=4),
              FullAttention(kv_heads=2, head_dim=8)))] * 2),
    # Nemotron-H: "M*-" is a Mamba-2 layer, an attention layer and an MLP layer (no cache).
    ("nemotron_h", dict(num_hidden_layers=3, hybrid_override_pattern="M*-", mamba_num_heads=4, mamba_head_dim=16,
                        ssm_state_size=8, conv_kernel=4, expand=2, n_groups=2, head_dim=8),
     [Mamba2(heads=4, head_dim=16, state_size=8, n_groups=2, conv_kernel=4), FullAttention(kv_heads=2, head_dim=8),
      NoCache()]),
    # Qwen3-Next: gated DeltaNet (2 key heads of 8, 4 value heads of 16) and full attention.
    ("qwen3_next", dict(linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
                        linear_value_head_dim=16, linear_conv_kernel_dim=4, head_dim=8,
                        layer_types=["linear_attention", "full_attention"], num_experts=2, num_experts_per_tok=1,
                        moe_intermediate_size=16, shared_expert_intermediate_size=16),
     [GatedDeltaNet(key_heads=2, value_heads=4, key_head_dim=8, value_head_dim=16, conv_kernel=4),
      FullAttention(kv_heads=2, head_dim=8)]),
    # Qwen3.5's text model: the same gated DeltaNet cache.
    ("qwen3_5_text", dict(linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
                          linear_value_head_dim=16, linear_conv_kernel_dim=4, head_dim=8,
                          layer_types=["linear_attention", "full_attention"]),
     [GatedDeltaNet(key_heads=2, value_heads=4, key_head_dim=8, value_head_dim=16, conv_kernel=4),
      FullAttention(kv_heads=2, head_dim=8)]),
])
def test_recurrent_states_match_transformers(torch, transformers, model_type, extra, layers):
    hf_config, cache, after_prefill, measured = _run(torch, transformers, model_type, **{**BASE, **extra})
    assert measured == _predicted(layers) == _predicted(_mapped(hf_config, layers))
    assert after_prefill == _predicted(layers, tokens=PROMPT)  # the states the same size, attention 10 tokens
    # The conv state is in the model's dtype, the recurrent state in fp32.
    state_layer = cache.layers[0]
    assert state_layer.conv_states[0].dtype == torch.bfloat16
    assert state_layer.recurrent_states[0].dtype == torch.float32


SLIDING = dict(BASE, num_hidden_layers=4, head_dim=8)


@pytest.mark.live
@pytest.mark.parametrize("model_type, extra, layers", [
    # gpt-oss: alternating sliding (a 4-token window here) and full layers.
    ("gpt_oss", dict(sliding_window=4, num_local_experts=2, num_experts_per_tok=1),
     [SlidingAttention(kv_heads=2, head_dim=8, window=4), FullAttention(kv_heads=2, head_dim=8)] * 2),
    # Llama 4: three chunked layers (4-token chunks) and a full NoPE layer every 4th.
    ("llama4_text", dict(attention_chunk_size=4, num_local_experts=2, num_experts_per_tok=1, intermediate_size_mlp=64,
                         no_rope_layer_interval=4),
     [ChunkedAttention(kv_heads=2, head_dim=8, chunk=4)] * 3 + [FullAttention(kv_heads=2, head_dim=8)]),
    # Gemma 3n: sliding and full alternating; the last 2 layers (num_kv_shared_layers) reuse earlier ones' cache.
    ("gemma3n_text", dict(num_hidden_layers=6, sliding_window=4, num_kv_shared_layers=2,
                          layer_types=["sliding_attention", "full_attention"] * 3, laurel_rank=4,
                          hidden_size_per_layer_input=4, vocab_size_per_layer_input=64, altup_num_inputs=2,
                          activation_sparsity_pattern=[0.0] * 6),
     [SlidingAttention(kv_heads=2, head_dim=8, window=4), FullAttention(kv_heads=2, head_dim=8)] * 2
     + [NoCache("shared KV"), NoCache("shared KV")]),
])
def test_windows_chunks_and_shared_layers_match_transformers(torch, transformers, model_type, extra, layers):
    hf_config, cache, after_prefill, measured = _run(torch, transformers, model_type, **{**SLIDING, **extra})
    assert measured == _predicted(layers) == _predicted(_mapped(hf_config, layers))
    # A sliding layer shows window - 1 = 3 tokens: a view of the 4-token storage of its last torch.cat.
    assert cache.layers[0].keys.shape[-2] == 3
    assert after_prefill == _predicted(layers, tokens=PROMPT, after_prefill=True)
