"""LFM2 and LFM2-MoE (model types lfm2, lfm2_moe): gated short-convolution blocks beside grouped-query attention
blocks (two block layouts, ModelShape.block_layouts; LFM2-MoE's dense first blocks two more), against transformers
5.24 and peft 0.21 themselves: the count, shapes and parameters() order of the published configs, a config class's
defaults and tiny configs built on the meta device, the MLP width Lfm2MLP derives, the cache transformers fills
(keys and values, conv states), peft's adapters, the textbook activations and the refusals.

Expected values come from transformers and peft (built here), the model cards (LiquidAI/LFM2-1.2B: 1,170,340,608
parameters) and hand derivations in the comments."""

from __future__ import annotations

import pytest

import memmath as mm
from family_checks import built_model as _model, cache_storage_bytes as _cache_bytes
from family_checks import assert_built_like_transformers
from memmath.sharding import torch_tensors
from memmath.states import FullAttention, ShortConv, cache_bytes, layers_from_layer_types, short_conv_state_bytes
from validation.published_configs import CONFIG_CLASS_DEFAULTS, PUBLISHED_ACTIVE, PUBLISHED_CONFIGS

LFM2_1_2B = PUBLISHED_CONFIGS["LFM2-1.2B"]
LFM2_8B_A1B = PUBLISHED_CONFIGS["LFM2-8B-A1B"]
# four blocks, conv and attention in turn; intermediate_size 96 -> Lfm2MLP int(2 x 96 / 3) = 64, a multiple of 32
TINY = {"model_type": "lfm2", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "block_multiple_of": 32,
        "layer_types": ["conv", "full_attention", "conv", "full_attention"], "tie_embedding": False}
# conv biases, a width 4 convolution, head_dim 24 (a x d != h), full_attn_idxs in place of layer_types
TINY_BIAS = dict({k: v for k, v in TINY.items() if k != "layer_types"}, conv_bias=True, conv_L_cache=4, head_dim=24,
                 full_attn_idxs=[2])
# one dense block, then mixtures of experts of 4 experts (2 a token); the dense MLP at intermediate_size itself
TINY_MOE = {"model_type": "lfm2_moe", "hidden_size": 64, "intermediate_size": 80, "moe_intermediate_size": 32,
            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
            "num_experts": 4, "num_experts_per_tok": 2, "num_dense_layers": 1,
            "layer_types": ["conv", "full_attention", "conv", "full_attention"]}
LIVE_CONFIGS = {"LFM2-1.2B": LFM2_1_2B, "LFM2-350M": PUBLISHED_CONFIGS["LFM2-350M"],
                "Lfm2Config": CONFIG_CLASS_DEFAULTS["Lfm2Config"], "LFM2-8B-A1B": LFM2_8B_A1B, "tiny": TINY,
                "tiny-bias": TINY_BIAS, "tiny-moe": TINY_MOE, "tiny-moe-all-dense": dict(TINY_MOE, num_dense_layers=4),
                "tiny-moe-conv-bias": dict(TINY_MOE, conv_bias=True, conv_L_cache=2, tie_embedding=False)}



# ---- tensors ---------------------------------------------------------------------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("name", sorted(LIVE_CONFIGS))
def test_built_as_transformers_builds_it_in_its_order(torch, transformers, name):
    config = LIVE_CONFIGS[name]
    _, model = _model(torch, transformers, config)
    assert_built_like_transformers(torch, model, config)
    shape = mm.from_hf_config(config)
    assert [dims for _, dims in torch_tensors(shape)] == [tuple(p.shape) for p in model.parameters()]
    # and name by name, block by block
    for i in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{i}."
        theirs = [(n.removeprefix(prefix), tuple(p.shape)) for n, p in model.named_parameters() if n.startswith(prefix)]
        assert [(t.name, t.shape) for t in shape.block_layout(i).tensors("layer")] == theirs, i


def test_lfm2_1_2b_counts_to_its_card_by_hand():
    # LiquidAI/LFM2-1.2B's card: 1,170,340,608 parameters. h 2,048, vocabulary 65,536, tied head.
    h, v = 2048, 65536
    mlp = 3 * h * 8192  # w1, w3, w2 at int(2 x 12,288 / 3) = 8,192 (already a multiple of 256)
    attention = 2 * h * h + 2 * h * 512 + 2 * 64  # q and out_proj h x h, k and v h x 8 x 64, q/k layernorms of 64
    conv = h * 3 + h * 3 * h + h * h  # conv weight h x 1 x 3, in_proj h -> 3h, out_proj h -> h
    total = v * h + h + 16 * (mlp + 2 * h) + 6 * attention + 10 * conv
    shape = mm.from_hf_config(LFM2_1_2B)
    assert shape.n_params == total == 1_170_340_608
    assert shape.active_params == shape.n_params


def test_lfm2_8b_a1b_counts_by_hand():
    # 24 blocks (6 attention, 18 conv), the first two dense (7,168 wide), 22 with 32 experts of 1,792 (4 a token)
    h, v = 2048, 65536
    attention, conv = 2 * h * h + 2 * h * 512 + 2 * 64, h * 3 + 3 * h * h + h * h
    dense, moe = 3 * h * 7168, 32 * 3 * h * 1792 + 32 * h  # experts, router
    total = v * h + h + 6 * attention + 18 * conv + 2 * dense + 22 * moe + 24 * 2 * h
    shape = mm.from_hf_config(LFM2_8B_A1B)
    assert shape.n_params == total == 8_339_929_856
    assert shape.active_params == total - 22 * 28 * 3 * h * 1792 == PUBLISHED_ACTIVE["LFM2-8B-A1B"]
    assert shape.moe_blocks == 22


def test_the_layouts_follow_layer_types_full_attn_idxs_and_num_dense_layers():
    def kinds(config):
        return [(layout.block_kind, layout.n_experts, blocks) for layout, blocks in mm.from_hf_config(config).layouts()]

    assert kinds(TINY) == [("conv", 0, (0, 2)), ("", 0, (1, 3))]
    assert kinds(TINY_BIAS) == [("conv", 0, (0, 1, 3)), ("", 0, (2,))]  # full_attn_idxs [2]
    assert kinds(CONFIG_CLASS_DEFAULTS["Lfm2Config"]) == [("", 0, tuple(range(32)))]  # neither: all attention
    assert kinds(TINY_MOE) == [("conv", 0, (0,)), ("", 4, (1, 3)), ("conv", 4, (2,))]
    assert kinds(dict(TINY_MOE, num_dense_layers=2)) == [("conv", 0, (0,)), ("", 0, (1,)), ("conv", 4, (2,)),
                                                         ("", 4, (3,))]


@pytest.mark.parametrize("changes, width", [
    ({}, 8192),  # LFM2-1.2B: int(2 x 12,288 / 3) = 8,192, a multiple of 256
    ({"block_ff_dim": 6656, "intermediate_size": 1}, 4608),  # LFM2-350M: 4,437 -> 18 x 256; block_ff_dim preferred
    ({"block_ff_dim": 10240}, 6912),  # LFM2-700M: 6,826 -> 27 x 256
    ({"block_ffn_dim_multiplier": 1.5}, 12288),  # int(1.5 x 8,192) = 12,288
    ({"block_ffn_dim_multiplier": 1.3, "block_multiple_of": 1000}, 11000),  # int(1.3 x 8,192) = 10,649 -> 11 x 1,000
    ({"block_ffn_dim_multiplier": 2, "block_ff_dim": 1000, "block_multiple_of": 1}, 1332),  # 2 x int(2,000 / 3)
    ({"block_auto_adjust_ff_dim": False}, 12288),  # intermediate_size itself
])
def test_the_mlp_width_is_lfm2mlps(changes, width):
    assert mm.from_hf_config(dict(LFM2_1_2B, **changes)).intermediate_size == width


@pytest.mark.live
@pytest.mark.parametrize("changes", [dict(block_ffn_dim_multiplier=1.3, block_multiple_of=1000),
                                     dict(block_ffn_dim_multiplier=2, block_ff_dim=1000, block_multiple_of=1),
                                     dict(block_auto_adjust_ff_dim=False), dict(block_ff_dim=6656)])
def test_the_mlp_width_is_the_one_transformers_builds(torch, transformers, changes):
    config = dict(LFM2_1_2B, num_hidden_layers=2, layer_types=["conv", "full_attention"], **changes)
    _, model = _model(torch, transformers, config)
    assert mm.from_hf_config(config).intermediate_size == model.model.layers[0].feed_forward.w1.out_features


# ---- the cache -------------------------------------------------------------------------------------------------


@pytest.mark.live
@pytest.mark.parametrize("config", ["TINY", "TINY_BIAS", "TINY_MOE"])
def test_the_cache_is_what_transformers_fills(torch, transformers, config):
    config = globals()[config]
    hf, model = _model(torch, transformers, config, device="cpu")
    cache = transformers.DynamicCache(config=hf)
    with torch.no_grad():
        ids = torch.randint(0, config["vocab_size"], (2, 9))
        model(ids, past_key_values=cache, use_cache=True)
        after_prefill = _cache_bytes(torch, cache)
        for _ in range(3):
            model(ids[:, :1], past_key_values=cache, use_cache=True)
    shape = mm.from_hf_config(config)
    assert after_prefill == mm.kv_cache_bytes(shape, context_len=9, batch_size=2, after_prefill=True)
    assert _cache_bytes(torch, cache) == mm.kv_cache_bytes(shape, context_len=12, batch_size=2)
    # a conv block's state: batch x hidden_size x conv_L_cache in the model's dtype
    conv = cache.layers[0].conv_states[0]
    assert tuple(conv.shape) == (2, 64, config.get("conv_L_cache", 3)) and conv.dtype == torch.bfloat16
    # the same bytes layer by layer from memmath.states, the layers picked from the config's layer_types
    full = FullAttention(kv_heads=2, head_dim=config.get("head_dim", 16))
    layers = layers_from_layer_types(hf.layer_types, full=full, linear=ShortConv(64, config.get("conv_L_cache", 3)))
    assert cache_bytes(layers, tokens=12, batch=2) == _cache_bytes(torch, cache)


def test_the_1_2b_cache_by_hand():
    # 6 attention blocks: 2 x 8 heads x 64 x 2 B a token; 10 conv blocks: 2,048 x 3 values in bf16 at any context
    shape = mm.from_hf_config(LFM2_1_2B)
    assert short_conv_state_bytes(channels=2048, conv_kernel=3) == 12_288
    for tokens in (1, 32768):
        assert mm.kv_cache_bytes(shape, context_len=tokens) == 6 * 2 * 8 * 64 * 2 * tokens + 10 * 12_288
    assert mm.kv_cache_bytes(shape, context_len=4096, batch_size=3, kv_format="fp32") == 3 * (
        6 * 2 * 8 * 64 * 4 * 4096 + 10 * 2048 * 3 * 4)


# ---- peft ------------------------------------------------------------------------------------------------------
LFM2_PEFT = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj", "gate": "w1", "up": "w3", "down": "w2"}


@pytest.mark.live
@pytest.mark.parametrize("config, targets", [
    ("TINY", ("q", "v")), ("TINY", ("o",)), ("TINY", ("q", "k", "v", "o", "gate", "up", "down")),
    ("TINY_BIAS", ("o", "down")), ("TINY_MOE", ("q", "v")), ("TINY_MOE", ("o", "gate", "up", "down"))])
def test_lora_is_peft_s(torch, transformers, peft, config, targets):
    config = globals()[config]
    _, model = _model(torch, transformers, config, device="cpu")
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=[LFM2_PEFT[t] for t in targets],
                                                      lora_alpha=8))
    theirs = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert mm.LoRA(rank=4, targets=targets).trainable_params(mm.from_hf_config(config)) == theirs


def test_lora_on_o_reaches_the_conv_blocks_out_proj_by_hand():
    # TINY: two attention blocks' out_proj (64 -> 64) and two conv blocks' out_proj (64 -> 64), peft's "out_proj"
    assert mm.LoRA(rank=4, targets=("o",)).trainable_params(mm.from_hf_config(TINY)) == 4 * 4 * (64 + 64)


@pytest.mark.live
def test_lfm2_moe_router_and_experts_are_peft_s_target_parameters(torch, transformers, peft):
    # peft 0.21 does not convert lfm2_moe: its router and experts are reached as target_parameters (the experts'
    # fused gate_up_proj at rank 2r), in the order experts.gate_up_proj, experts.down_proj, gate.weight
    _, model = _model(torch, transformers, TINY_MOE, device="cpu")
    lora = peft.get_peft_model(model, peft.LoraConfig(
        r=4, target_modules=["q_proj"], target_parameters=["gate.weight", "experts.gate_up_proj", "experts.down_proj"],
        rank_pattern={r".*\.gate_up_proj": 8}, lora_alpha=8))
    shape = mm.from_hf_config(TINY_MOE)
    theirs = [tuple(p.shape) for n, p in lora.named_parameters() if p.requires_grad and ".layers.1." in n]
    ours = []
    for _, d_in, d_out, k in shape.block_layout(1).lora_adapters(("q", "router", "experts")):
        ours += [(k * 4, d_in), (d_out, k * 4)]
    assert ours == theirs
    assert mm.LoRA(rank=4, targets=("q", "router", "experts")).trainable_params(shape) == sum(
        p.numel() for p in lora.parameters() if p.requires_grad)


@pytest.mark.live
@pytest.mark.parametrize("config", ["TINY", "TINY_MOE"])
def test_all_linear_is_refused_since_peft_adapts_in_proj(torch, transformers, peft, config):
    config = globals()[config]
    _, model = _model(torch, transformers, config, device="cpu")
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules="all-linear", lora_alpha=8))
    assert any(".conv.in_proj.lora_A" in n for n, _ in lora.named_parameters())
    with pytest.raises(ValueError, match="in_proj"):
        mm.LoRA(targets="all").trainable_params(mm.from_hf_config(config))


def test_lfm2_moe_mlp_targets_reach_the_dense_blocks_only():
    shape = mm.from_hf_config(TINY_MOE)
    copies = {a.module: n for a, n in shape.lora_adapter_copies(("gate", "up", "down"))}
    assert copies == {"w1": 1, "w3": 1, "w2": 1}  # block 0 only
    with pytest.raises(ValueError, match="'gate' does not exist"):
        mm.from_hf_config(dict(TINY_MOE, num_dense_layers=0)).layouts()[0][0].lora_adapters(("gate",))


# ---- activations, the command line and what is refused -----------------------------------------------------------
def test_textbook_activations_leave_the_attention_kernel_out_of_conv_blocks():
    # eager keeps a x s x s scores (softmax output, e bytes), SDPA a 4 a s log-sum-exp, in attention blocks only:
    # 6 of LFM2-1.2B's 16 (32 heads, s = 1,024, batch 1, bf16, no dropout)
    shape, s = mm.from_hf_config(LFM2_1_2B), 1024
    saved = {kind: mm.training_memory(mm.Run(shape, seq_len=s, attention=kind, activations="textbook")).activations
             for kind in ("eager", "sdpa")}
    assert saved["eager"] - saved["sdpa"] == 6 * (32 * s * s * 2 - 4 * 32 * s)
    # the trace replays the PyTorch path only (tests/test_families_lfm2_trace.py): a run names which one it takes
    assert shape.architecture.mixer_kernels == "causal-conv1d's kernels"


@pytest.mark.parametrize("config, field", [
    ({k: v for k, v in TINY_MOE.items() if k != "layer_types"}, "layer_types"),
    (dict(TINY, layer_types=["conv", "sliding_attention", "conv", "conv"]), "layer_types"),
    (dict(TINY, layer_types=["conv"]), "layer_types"),
    (dict(TINY_BIAS, full_attn_idxs="2"), "full_attn_idxs"),
    (dict(TINY, block_ffn_dim_multiplier=0), "block_ffn_dim_multiplier"),
    (dict(TINY, block_ffn_dim_multiplier="1.0"), "block_ffn_dim_multiplier"),
    (dict(TINY, block_ffn_dim_multiplier=None), "block_ffn_dim_multiplier"),  # Lfm2Config's strict field too
    (dict(TINY, intermediate_size=1), "intermediate_size"),  # int(2 / 3) = 0 wide
    (dict(TINY_MOE, output_router_logits=True), "output_router_logits"),
    (dict(TINY, conv_L_cache=0), "conv_L_cache"),
])
def test_what_memmath_cannot_read_is_refused_by_name(config, field):
    with pytest.raises(ValueError, match=field):
        mm.from_hf_config(config)


def test_the_command_line_reads_lfm2_and_refuses_all_linear_by_name(tmp_path, capsys):
    import json

    from memmath import cli

    path = tmp_path / "config.json"
    path.write_text(json.dumps(LFM2_1_2B))
    assert cli.main(["infer", str(path), "--context", "32768"]) == 0
    assert "1,170,340,608 parameters" in " ".join(capsys.readouterr().out.split())
    assert cli.main(["train", str(path), "--seq", "2048"]) == 0
    capsys.readouterr()
    assert cli.main(["train", str(path), "--method", "lora", "--targets", "all"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "in_proj" in err and "Traceback" not in err
