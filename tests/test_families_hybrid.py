"""Qwen3-Next and Qwen 3.5's language model: gated DeltaNet linear-attention blocks beside gated full-attention blocks (two block layouts,
ModelShape.block_layouts), against transformers 5.24 and peft 0.21 themselves: the count, shapes and parameters()
order of the published config and a tiny one built on the meta device, the cache transformers fills (keys and
values, conv and recurrent states), peft's adapters, and the refusals.

Expected values come from transformers and peft (built here) and from hand derivations in the comments."""

from __future__ import annotations

import pytest

import memmath as mm
from family_checks import built_model as _model, cache_storage_bytes as _cache_bytes
from family_checks import assert_built_like_transformers
from memmath.sharding import torch_tensors
from validation.published_configs import CONFIG_CLASS_DEFAULTS, PUBLISHED_CONFIGS

PUBLISHED = PUBLISHED_CONFIGS["Qwen3-Next-80B-A3B-Instruct"]
# six blocks: 1-3 and 5-6 linear attention, 4 full (full_attention_interval 4); block 3 dense (mlp_only_layers)
TINY = dict(PUBLISHED, hidden_size=64, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, linear_key_head_dim=8, linear_value_head_dim=16,
            linear_num_key_heads=2, linear_num_value_heads=4, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=32, shared_expert_intermediate_size=48, vocab_size=128, mlp_only_layers=[2])





@pytest.mark.live
@pytest.mark.parametrize("config", [PUBLISHED, TINY], ids=["80b-a3b", "tiny"])
def test_built_as_transformers_builds_it_in_its_order(torch, transformers, config):
    _, model = _model(torch, transformers, config)
    assert_built_like_transformers(torch, model, config)
    assert [dims for _, dims in torch_tensors(mm.from_hf_config(config))] == [tuple(p.shape)
                                                                             for p in model.parameters()]


def test_the_layouts_follow_layer_types_and_mlp_only_layers():
    layouts = [(layout.block_kind, layout.n_experts, blocks) for layout, blocks in mm.from_hf_config(TINY).layouts()]
    assert layouts == [("linear_attention", 4, (0, 1, 4, 5)), ("linear_attention", 0, (2,)), ("", 4, (3,))]


def test_the_80b_counts_by_hand():
    shape = mm.from_hf_config(PUBLISHED)
    h, v = 2048, 151936
    # a linear-attention block: dt_bias and A_log (32 each), conv1d 8,192 x 4 (2 x 16 x 128 + 32 x 128 channels),
    # in_proj_qkvz h x 12,288, in_proj_ba h x 64, norm 128, out_proj 4,096 x h
    linear = 2 * 32 + 8192 * 4 + h * 12288 + h * 64 + 128 + 4096 * h
    # a full-attention block: q_proj h x 2 x 16 x 256 (query and gate), k and v h x 512 each, o 4,096 x h, q/k norms
    full = h * 8192 + 2 * h * 512 + 4096 * h + 2 * 256
    # the MoE: router 512 x h, experts 512 x 3 x h x 512, shared expert 3 x h x 512 and its gate h; two norms
    moe = 512 * h + 512 * 3 * h * 512 + 3 * h * 512 + h
    total = 2 * v * h + h + 36 * (linear + moe + 2 * h) + 12 * (full + moe + 2 * h)
    assert shape.n_params == total == 79_674_391_296


@pytest.mark.live
def test_the_cache_is_what_transformers_fills(torch, transformers):
    hf, model = _model(torch, transformers, TINY, device="cpu")
    cache = transformers.DynamicCache(config=hf)
    with torch.no_grad():
        ids = torch.randint(0, TINY["vocab_size"], (2, 20))
        model(ids, past_key_values=cache, use_cache=True)
        for _ in range(3):
            model(ids[:, :1], past_key_values=cache, use_cache=True)
    assert _cache_bytes(torch, cache) == mm.kv_cache_bytes(mm.from_hf_config(TINY), context_len=23, batch_size=2)


def test_the_80b_cache_by_hand():
    # 12 full-attention blocks: 2 x 2 heads x 256 x 2 B a token; 36 linear ones: a conv state 8,192 x 4 in bf16 and
    # a 32 x 128 x 128 fp32 recurrent state, at any context
    shape = mm.from_hf_config(PUBLISHED)
    for tokens in (1, 32768):
        assert mm.kv_cache_bytes(shape, context_len=tokens) == 12 * 2 * 2 * 256 * 2 * tokens + 36 * (
            8192 * 4 * 2 + 32 * 128 * 128 * 4)


@pytest.mark.live
def test_lora_on_q_and_v_is_peft_s(torch, transformers, peft):
    _, model = _model(torch, transformers, TINY, device="cpu")
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_alpha=8))
    theirs = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert mm.LoRA(rank=4, targets=("q", "v")).trainable_params(mm.from_hf_config(TINY)) == theirs
    # by hand: the one full-attention block's q_proj (64 -> 128, query and gate) and v_proj (64 -> 32)
    assert theirs == 4 * (64 + 128) + 4 * (64 + 32)


def test_what_memmath_cannot_count_is_refused_by_name():
    shape = mm.from_hf_config(PUBLISHED)
    with pytest.raises(ValueError, match="in_proj_qkvz"):
        mm.LoRA(targets="all").trainable_params(shape)
    with pytest.raises(ValueError, match="blocks differ"):
        mm.Run(model=shape, seq_len=512, n_gpus=2, tp=2)
    with pytest.raises(ValueError, match="layer_types"):
        mm.from_hf_config(dict(PUBLISHED, layer_types=["full_attention"] * 3))
    # traced on transformers' PyTorch path of the linear attention only: a run under its CUDA kernels (a GPU's default)
    # is refused by name (tests/test_families_deltanet_trace.py holds the trace to autograd)
    assert "--mixer-kernels torch" in mm.requirement(mm.Run(model=shape, seq_len=512)).reason


# ---- Qwen 3.5's language models: the split linear-attention projections, a dense MLP or a MoE ----------------
QWEN3_5 = {"model_type": "qwen3_5_text", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 8,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "linear_key_head_dim": 8,
           "linear_value_head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "vocab_size": 128,
           "tie_word_embeddings": False}
QWEN3_5_DEFAULTS = CONFIG_CLASS_DEFAULTS["Qwen3_5TextConfig"]  # the config class's own defaults
# Qwen 3.5 MoE's language model: the same blocks with a mixture of experts and a gated shared expert in each
QWEN3_5_MOE = {"model_type": "qwen3_5_moe_text", "hidden_size": 64, "num_hidden_layers": 8, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16, "linear_key_head_dim": 8, "linear_value_head_dim": 16,
               "linear_num_key_heads": 2, "linear_num_value_heads": 4, "vocab_size": 128, "num_experts": 4,
               "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
               "tie_word_embeddings": False}




@pytest.mark.live
@pytest.mark.parametrize("config", ["QWEN3_5", "QWEN3_5_DEFAULTS", "QWEN3_5_MOE", "Qwen3_5MoeTextConfig"])
def test_qwen3_5_is_built_as_transformers_builds_it_in_its_order(torch, transformers, config):
    config = globals().get(config) or CONFIG_CLASS_DEFAULTS[config]  # the dense and the MoE text models
    _, model = _model(torch, transformers, config)
    assert_built_like_transformers(torch, model, config)
    assert [dims for _, dims in torch_tensors(mm.from_hf_config(config))] == [tuple(p.shape)
                                                                             for p in model.parameters()]


@pytest.mark.live
@pytest.mark.parametrize("config, targets", [("QWEN3_5", ("q", "v", "down")), ("QWEN3_5_MOE", ("q", "v"))])
def test_qwen3_5_cache_and_adapters_are_transformers_and_peft_s(torch, transformers, peft, config, targets):
    # the dense model's down_proj is its MLP's; peft converts the MoE model's MLP names onto the routed experts
    config = globals()[config]
    hf, model = _model(torch, transformers, config, device="cpu")
    cache = transformers.DynamicCache(config=hf)
    with torch.no_grad():
        ids = torch.randint(0, config["vocab_size"], (2, 12))
        model(ids, past_key_values=cache, use_cache=True)
        model(ids[:, :1], past_key_values=cache, use_cache=True)
    shape = mm.from_hf_config(config)
    assert _cache_bytes(torch, cache) == mm.kv_cache_bytes(shape, context_len=13, batch_size=2)
    modules = [{"q": "q_proj", "v": "v_proj", "down": "down_proj"}[t] for t in targets]
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=modules, lora_alpha=8))
    assert mm.LoRA(rank=4, targets=targets).trainable_params(shape) == sum(
        p.numel() for p in lora.parameters() if p.requires_grad)
    with pytest.raises(ValueError, match="in_proj_qkv"):
        mm.LoRA(targets="all").trainable_params(shape)


def test_qwen3_5_moe_class_defaults_by_hand():
    # 40 blocks, 30 linear attention (16 x 128 keys, 32 x 128 values, kernel 4) and 10 full (16 heads and 2 key/value
    # heads of 256, q gated); 256 experts of 512 (8 a token), a shared expert of 512 and its gate; vocabulary 248,320
    h, v = 2048, 248320
    linear = 2 * 32 + 8192 * 4 + 128 + 4096 * h + h * 8192 + h * 4096 + 2 * h * 32
    full = h * 8192 + 2 * h * 512 + 4096 * h + 2 * 256
    moe = 256 * h + 256 * 3 * h * 512 + 3 * h * 512 + h
    shape = mm.from_hf_config(CONFIG_CLASS_DEFAULTS["Qwen3_5MoeTextConfig"])
    assert shape.n_params == 2 * v * h + h + 30 * (linear + moe + 2 * h) + 10 * (full + moe + 2 * h)
    assert shape.n_params - shape.active_params == 40 * 248 * 3 * h * 512  # the unrouted experts
