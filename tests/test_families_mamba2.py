"""The Mamba-2 hybrids: Granite 4.0's hybrid models (granitemoehybrid: Mamba-2 blocks beside attention blocks, two
block layouts of ModelShape.block_layouts, each with a mixture of experts and a shared MLP), Nemotron-H (nemotron_h:
one mixer a block, Mamba-2, attention, MLP or mixture of experts, up to four layouts) and Falcon-H1 (falcon_h1: Mamba-2
beside attention in every block), against transformers 5.24 and
peft 0.21 themselves: the count, shapes and parameters() order of published configs, the config classes' defaults
and tiny configs built on the meta device, the cache transformers fills on the CPU (keys and values, conv and SSM states),
peft's adapters, and the refusals.

Expected values come from transformers and peft (built here) and from hand derivations in the comments."""

from __future__ import annotations

import pytest

import memmath as mm
from family_checks import built_model as _model, cache_storage_bytes as _cache_bytes
from family_checks import assert_built_like_transformers
from memmath.sharding import torch_tensors
from memmath.states import FullAttention, Mamba2, cache_bytes, mamba2_state_bytes
from validation.published_configs import CONFIG_CLASS_DEFAULTS, PUBLISHED_HYBRID_CONFIGS, PUBLISHED_HYBRID_TOTALS

TINY_GRANITE = PUBLISHED_HYBRID_CONFIGS["granite-4.0-h-tiny"]
NEMOTRON_8B = PUBLISHED_HYBRID_CONFIGS["Nemotron-H-8B-Base-8K"]
NEMOTRON_DEFAULTS = CONFIG_CLASS_DEFAULTS["NemotronHConfig"]
GRANITE_DEFAULTS = CONFIG_CLASS_DEFAULTS["GraniteMoeHybridConfig"]
# four blocks, 2 attention; the Mamba-2 mixer 8 heads of 16 (expand 2 x 64), 2 groups of B and C of 16 values; the
# widths apart (expert 32, shared 48, head_dim 16) so that one read from the wrong field shows
GRANITE = {"model_type": "granitemoehybrid", "hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 4,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "num_local_experts": 4,
           "num_experts_per_tok": 2, "shared_intermediate_size": 48, "mamba_n_heads": 8, "mamba_d_state": 16,
           "mamba_n_groups": 2, "mamba_d_conv": 4, "layer_types": ["mamba", "attention", "mamba", "attention"],
           "tie_word_embeddings": True}
# granite-4.0-h-micro's kind: no experts (the shared MLP alone), with the biases the published configs leave off
GRANITE_DENSE = dict(GRANITE, num_local_experts=0, num_experts_per_tok=0, mamba_proj_bias=True,
                     mamba_conv_bias=False, tie_word_embeddings=False, attention_bias=True)





# ---- tensors: transformers' own build on the meta device --------------------------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("config", ["TINY_GRANITE", "GRANITE_DEFAULTS", "GRANITE", "GRANITE_DENSE"])
def test_granite_is_built_as_transformers_builds_it_in_its_order(torch, transformers, config):
    config = globals()[config]
    _, model = _model(torch, transformers, config)
    assert_built_like_transformers(torch, model, config)
    assert [dims for _, dims in torch_tensors(mm.from_hf_config(config))] == [tuple(p.shape)
                                                                             for p in model.parameters()]


@pytest.mark.live
def test_granite_s_block_tensors_are_named_as_transformers_names_them(torch, transformers):
    _, model = _model(torch, transformers, GRANITE_DENSE)
    shape = mm.from_hf_config(GRANITE_DENSE)
    for i in (0, 1):  # a Mamba-2 block, an attention block
        prefix = f"model.layers.{i}."
        theirs = [(n.removeprefix(prefix), tuple(p.shape)) for n, p in model.named_parameters() if n.startswith(prefix)]
        assert theirs == [(t.name, t.shape) for t in shape.block_layout(i).tensors("layer")]


def test_the_layouts_follow_layer_types_in_either_spelling():
    layouts = [(layout.block_kind, blocks) for layout, blocks in mm.from_hf_config(GRANITE).layouts()]
    assert layouts == [("linear_attention", (0, 2)), ("", (1, 3))]
    for config in (dict(GRANITE, layer_types=["linear_attention", "full_attention"] * 2),
                   {**{k: v for k, v in GRANITE.items() if k != "layer_types"},
                    "layers_block_type": ["mamba", "attention"] * 2}):
        assert mm.from_hf_config(config) == mm.from_hf_config(GRANITE)
    # no layer_types: every block a Mamba-2 block (GraniteMoeHybridConfig.__post_init__)
    unnamed = mm.from_hf_config({k: v for k, v in GRANITE.items() if k != "layer_types"})
    assert [(layout.block_kind, blocks) for layout, blocks in unnamed.layouts()] == [("linear_attention", (0, 1, 2, 3))]


def test_granite_4_h_tiny_counts_by_hand():
    shape = mm.from_hf_config(TINY_GRANITE)
    h, v = 1536, 100352
    # a Mamba-2 block: inner 48 x 64 = 3,072, conv_dim 3,072 + 2 x 1 x 128 = 3,328; dt_bias, A_log, D (48 each),
    # conv1d 3,328 x 4 and its bias, in_proj h x (2 x 3,072 + 2 x 128 + 48), norm 3,072, out_proj 3,072 x h
    mamba = 3 * 48 + 3328 * 4 + 3328 + h * 6448 + 3072 + 3072 * h
    # an attention block: q and o h x 12 x 128, k and v h x 4 x 128
    attention = 2 * h * 1536 + 2 * h * 512
    # every block: two norms, the router 64 x h, 64 experts 3 x h x 512, the shared MLP 3 x h x 1,024
    mlp = 2 * h + 64 * h + 64 * 3 * h * 512 + 3 * h * 1024
    assert shape.n_params == v * h + h + 36 * (mamba + mlp) + 4 * (attention + mlp) == 6_939_037_248
    assert shape.n_params - shape.active_params == 40 * 58 * 3 * h * 512  # the 58 unrouted experts of each block
    assert abs(shape.n_params / PUBLISHED_HYBRID_TOTALS["granite-4.0-h-tiny"] - 1) < 0.01  # the card's 7B


# ---- the cache: what transformers fills on the CPU ----------------------------------------------------------------
@pytest.mark.live
def test_the_cache_is_what_transformers_fills(torch, transformers):
    hf, model = _model(torch, transformers, GRANITE, device="cpu")
    cache = transformers.DynamicCache(config=hf)
    with torch.no_grad():
        ids = torch.randint(0, GRANITE["vocab_size"], (2, 20))
        model(ids, past_key_values=cache, use_cache=True)
        for _ in range(3):
            model(ids[:, :1], past_key_values=cache, use_cache=True)
    shape = mm.from_hf_config(GRANITE)
    assert _cache_bytes(torch, cache) == mm.kv_cache_bytes(shape, context_len=23, batch_size=2)
    # block 0: a conv state of 2 x (128 + 2 x 2 x 16) x 4 values in bf16, an SSM state of 2 x 8 x 16 x 16 in fp32
    mamba = cache.layers[0]
    assert tuple(mamba.conv_states[0].shape) == (2, 192, 4) and mamba.conv_states[0].dtype == torch.bfloat16
    assert tuple(mamba.recurrent_states[0].shape) == (2, 8, 16, 16)
    assert mamba.recurrent_states[0].dtype == torch.float32
    # memmath.states says the same: two Mamba-2 mixers and two attention layers of 2 heads of 16
    layers = [Mamba2(heads=8, head_dim=16, state_size=16, n_groups=2, conv_kernel=4), FullAttention(2, 16)] * 2
    assert cache_bytes(layers, tokens=23, batch=2) == mm.kv_cache_bytes(shape, context_len=23, batch_size=2)


def test_the_h_tiny_cache_by_hand():
    # 4 attention blocks: 2 x 4 heads x 128 x 2 B a token; 36 Mamba-2 blocks: a conv state 3,328 x 4 in bf16 and a
    # 48 x 64 x 128 fp32 SSM state (mamba2_state_bytes), at any context
    shape = mm.from_hf_config(TINY_GRANITE)
    mamba = mamba2_state_bytes(heads=48, head_dim=64, state_size=128, n_groups=1, conv_kernel=4)
    assert mamba == 3328 * 4 * 2 + 48 * 64 * 128 * 4
    for tokens in (1, 32768):
        assert mm.kv_cache_bytes(shape, context_len=tokens) == 4 * 2 * 4 * 128 * 2 * tokens + 36 * mamba


# ---- peft's adapters ----------------------------------------------------------------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("config, targets, modules", [
    ("GRANITE", ("q", "v"), ["q_proj", "v_proj"]),
    ("GRANITE", ("gate", "up", "down"), ["input_linear", "output_linear"]),  # the shared MLP, gate and up fused
    ("GRANITE_DENSE", ("q", "k", "v", "o", "down"), ["q_proj", "k_proj", "v_proj", "o_proj", "output_linear"]),
])
def test_lora_is_peft_s(torch, transformers, peft, config, targets, modules):
    config = globals()[config]
    _, model = _model(torch, transformers, config, device="cpu")
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=modules, lora_alpha=8))
    theirs = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert mm.LoRA(rank=4, targets=targets).trainable_params(mm.from_hf_config(config)) == theirs


def test_lora_on_q_and_v_by_hand():
    # the two attention blocks' q_proj (64 -> 64) and v_proj (64 -> 32) at rank 4
    assert mm.LoRA(rank=4, targets=("q", "v")).trainable_params(mm.from_hf_config(GRANITE)) == 2 * (
        4 * (64 + 64) + 4 * (64 + 32))


@pytest.mark.live
def test_lora_on_the_experts_is_peft_s_param_wrapper(torch, transformers, peft):
    # memmath's "experts": gate_up_proj at rank 2r and down_proj at rank r per expert (peft's target_parameters)
    _, model = _model(torch, transformers, GRANITE, device="cpu")
    lora = peft.get_peft_model(model, peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=[], target_parameters=["experts.gate_up_proj", "experts.down_proj"],
        rank_pattern={r".*\.gate_up_proj": 8}))
    theirs = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert mm.LoRA(rank=4, targets=("experts",)).trainable_params(mm.from_hf_config(GRANITE)) == theirs


@pytest.mark.live
def test_lora_all_on_attention_blocks_alone_is_peft_s_all_linear(torch, transformers, peft):
    config = dict(GRANITE, layer_types=["attention"] * 4)
    _, model = _model(torch, transformers, config, device="cpu")
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules="all-linear", lora_alpha=8))
    theirs = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert mm.LoRA(rank=4, targets="all").trainable_params(mm.from_hf_config(config)) == theirs


# ---- refusals ------------------------------------------------------------------------------------------------------
def test_what_memmath_cannot_count_is_refused_by_name():
    shape = mm.from_hf_config(TINY_GRANITE)
    with pytest.raises(ValueError, match="in_proj and out_proj"):
        mm.LoRA(targets="all").trainable_params(shape)
    with pytest.raises(ValueError, match="no q_proj"):
        mm.from_hf_config(dict(GRANITE, layer_types=["mamba"] * 4)).lora_adapter_copies(("q",))
    with pytest.raises(ValueError, match="layer_types"):
        mm.from_hf_config(dict(GRANITE, layer_types=["mamba", "moe"] * 2))
    with pytest.raises(ValueError, match="mamba_d_head"):
        mm.from_hf_config(dict(GRANITE, mamba_d_head=32))
    with pytest.raises(ValueError, match="position_embedding_type"):
        mm.from_hf_config(dict(GRANITE, position_embedding_type="alibi"))
    with pytest.raises(ValueError, match="output_router_logits"):
        mm.from_hf_config(dict(GRANITE, output_router_logits=True))
    # traced down transformers' PyTorch path only: the Mamba-2 CUDA kernels save other tensors (Run.mixer_kernels)
    assert shape.architecture.traced and "mamba-ssm" in shape.architecture.mixer_kernels


# ---- Nemotron-H ---------------------------------------------------------------------------------------------------
# five blocks: Mamba-2, attention, MLP, MoE, Mamba-2; the mixer 8 heads of 16, 2 groups of B and C of 16 values
NEMOTRON = {"model_type": "nemotron_h", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 5,
            "hybrid_override_pattern": "M*-EM", "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "vocab_size": 128, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "moe_shared_expert_intermediate_size": 48, "mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 16,
            "n_groups": 2, "conv_kernel": 4}
# every bias on; tie_word_embeddings changes nothing (NemotronHForCausalLM ties no weights)
NEMOTRON_BIASED = dict(NEMOTRON, use_bias=True, use_conv_bias=False, mlp_bias=True, tie_word_embeddings=True)


def _bf16_but_the_router(torch, model):
    """transformers keeps each MoE block's router weight (mixer.gate.weight) in fp32 under a 16-bit load
    (_keep_in_fp32_modules_strict), which memmath does not model: the rest is bf16."""
    return {p.dtype for n, p in model.named_parameters() if not n.endswith("mixer.gate.weight")} == {torch.bfloat16}


@pytest.mark.live
@pytest.mark.parametrize("config", ["NEMOTRON_8B", "NEMOTRON_DEFAULTS", "NEMOTRON", "NEMOTRON_BIASED"])
def test_nemotron_is_built_as_transformers_builds_it_in_its_order(torch, transformers, config):
    config = globals()[config]
    _, model = _model(torch, transformers, config)
    shape = mm.from_hf_config(config)
    params = list(model.parameters())
    assert shape.n_params == sum(p.numel() for p in params) and _bf16_but_the_router(torch, model)
    assert [dims for _, dims in torch_tensors(shape)] == [tuple(p.shape) for p in params]
    prefix = "model.layers.3."  # the MoE block of the tiny configs, the fourth of the 8B's, name by name
    theirs = [(n.removeprefix(prefix), tuple(p.shape)) for n, p in model.named_parameters() if n.startswith(prefix)]
    assert theirs == [(t.name, t.shape) for t in shape.block_layout(3).tensors("layer")]


def test_nemotron_s_layouts_follow_its_pattern_in_any_spelling():
    layouts = [(layout.block_kind, blocks) for layout, blocks in mm.from_hf_config(NEMOTRON).layouts()]
    assert layouts == [("linear_attention", (0, 4)), ("", (1,)), ("mlp", (2,)), ("moe", (3,))]
    listed = {k: v for k, v in NEMOTRON.items() if k != "hybrid_override_pattern"}
    for key, kinds in (("layers_block_type", ["linear_attention", "full_attention", "mlp", "moe", "linear_attention"]),
                       ("layer_types", ["mamba", "attention", "mlp", "moe", "mamba"])):
        assert mm.from_hf_config(dict(listed, **{key: kinds})) == mm.from_hf_config(NEMOTRON)
    # the legacy kwargs win where a config names them (NemotronHConfig.__post_init__ pops them into the fields)
    assert mm.from_hf_config(dict(NEMOTRON, n_groups=4, mamba_n_groups=2)) == mm.from_hf_config(NEMOTRON)
    assert mm.from_hf_config(dict(NEMOTRON, conv_kernel=2, mamba_d_conv=4)) == mm.from_hf_config(NEMOTRON)


def test_nemotron_h_8b_counts_by_hand():
    shape = mm.from_hf_config(NEMOTRON_8B)
    h, v = 4096, 131072
    # a Mamba-2 block: inner 128 x 64 = 8,192, conv_dim 8,192 + 2 x 8 x 128 = 10,240; dt_bias, A_log, D (128 each),
    # conv1d 10,240 x 4 and its bias, in_proj h x (8,192 + 10,240 + 128), norm 8,192, out_proj 8,192 x h
    mamba = 3 * 128 + 10240 * 5 + h * 18560 + 8192 + 8192 * h
    attention = 2 * h * 4096 + 2 * h * 1024  # q and o h x 32 x 128, k and v h x 8 x 128
    mlp = 2 * h * 21504  # up_proj and down_proj
    # 24 Mamba-2, 4 attention and 24 MLP blocks, each with its norm; the embedding, norm_f and lm_head
    assert shape.n_params == 2 * v * h + h + 24 * (mamba + h) + 4 * (attention + h) + 24 * (mlp + h) == 8_100_852_736
    assert abs(shape.n_params / PUBLISHED_HYBRID_TOTALS["Nemotron-H-8B-Base-8K"] - 1) < 0.02  # the card's 8B
    # the cache: 4 attention blocks, 2 x 8 heads x 128 x 2 B a token; 24 Mamba-2 blocks, a conv state 10,240 x 4
    # in bf16 and a 128 x 64 x 128 fp32 SSM state; the MLP blocks none
    mamba_state = mamba2_state_bytes(heads=128, head_dim=64, state_size=128, n_groups=8, conv_kernel=4)
    for tokens in (1, 8192):
        assert mm.kv_cache_bytes(shape, context_len=tokens) == 4 * 2 * 8 * 128 * 2 * tokens + 24 * mamba_state


@pytest.mark.live
def test_nemotron_s_cache_is_what_transformers_fills(torch, transformers):
    hf, model = _model(torch, transformers, NEMOTRON, device="cpu")
    cache = transformers.DynamicCache(config=hf)
    with torch.no_grad():
        ids = torch.randint(0, NEMOTRON["vocab_size"], (2, 20))
        model(ids, past_key_values=cache, use_cache=True)
        for _ in range(3):
            model(ids[:, :1], past_key_values=cache, use_cache=True)
    shape = mm.from_hf_config(NEMOTRON)
    assert _cache_bytes(torch, cache) == mm.kv_cache_bytes(shape, context_len=23, batch_size=2)
    mixer = Mamba2(heads=8, head_dim=16, state_size=16, n_groups=2, conv_kernel=4)
    assert cache_bytes([mixer, FullAttention(2, 16), mixer], tokens=23, batch=2) == mm.kv_cache_bytes(
        shape, context_len=23, batch_size=2)


@pytest.mark.live
@pytest.mark.parametrize("targets, modules, parameters", [
    (("q", "v"), ["q_proj", "v_proj"], []),
    (("up", "down"), ["up_proj", "down_proj"], []),  # the MLP block's and the MoE block's shared expert's
    (("o", "experts", "router"), ["o_proj"], ["experts.up_proj", "experts.down_proj", "gate.weight"]),
])
def test_nemotron_lora_is_peft_s(torch, transformers, peft, targets, modules, parameters):
    _, model = _model(torch, transformers, NEMOTRON_BIASED, device="cpu")
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=modules, target_parameters=parameters,
                                                      lora_alpha=8))
    theirs = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert mm.LoRA(rank=4, targets=targets).trainable_params(mm.from_hf_config(NEMOTRON_BIASED)) == theirs


def test_nemotron_s_refusals_name_the_field():
    with pytest.raises(ValueError, match="in_proj and out_proj"):
        mm.LoRA(targets="all").trainable_params(mm.from_hf_config(NEMOTRON_8B))
    with pytest.raises(ValueError, match="not gated"):
        mm.from_hf_config(NEMOTRON).lora_adapter_copies(("gate",))
    for change, field in ((dict(moe_latent_size=32), "moe_latent_size"), (dict(sliding_window=64), "sliding_window"),
                          (dict(num_hidden_layers=4), "num_hidden_layers"),
                          (dict(hybrid_override_pattern="M*-EX"), "hybrid_override_pattern"),
                          (dict(mamba_ssm_cache_dtype="bfloat16"), "mamba_ssm_cache_dtype"),
                          (dict(mlp_hidden_act="silu"), "mlp_hidden_act"),
                          (dict(use_conv_bias="yes"), "use_conv_bias")):
        with pytest.raises(ValueError, match=field):
            mm.from_hf_config(dict(NEMOTRON, **change))
    # traced down transformers' PyTorch path only (tests/test_families_mamba2_trace.py)
    record = mm.from_hf_config(NEMOTRON).architecture
    assert record.traced and "mamba-ssm" in record.mixer_kernels


# ---- Falcon-H1 ----------------------------------------------------------------------------------------------------
FALCON_DEFAULTS = CONFIG_CLASS_DEFAULTS["FalconH1Config"]
# two blocks; the mixer 6 heads of 16 (mamba_d_ssm 96, not 2 x 64), 2 groups of B and C of 16 values
FALCON = {"model_type": "falcon_h1", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "mamba_d_ssm": 96, "mamba_n_heads": 6,
          "mamba_d_state": 16, "mamba_n_groups": 2}
# every bias and the mixer's gated norm on, head_dim named (24, not 64 / 4), the inner width mamba_expand x h
FALCON_FULL = dict(FALCON, head_dim=24, mamba_rms_norm=True, mamba_proj_bias=True, projectors_bias=True,
                   mamba_conv_bias=False, attention_bias=True, mlp_bias=True, tie_word_embeddings=True,
                   mamba_d_ssm=None, mamba_n_heads=8)


@pytest.mark.live
@pytest.mark.parametrize("config", ["FALCON_DEFAULTS", "FALCON", "FALCON_FULL"])
def test_falcon_h1_is_built_as_transformers_builds_it_in_its_order(torch, transformers, config):
    config = globals()[config]
    _, model = _model(torch, transformers, config)
    assert_built_like_transformers(torch, model, config)
    shape = mm.from_hf_config(config)
    assert [dims for _, dims in torch_tensors(shape)] == [tuple(p.shape) for p in model.parameters()]
    theirs = [(n.removeprefix("model.layers.0."), tuple(p.shape)) for n, p in model.named_parameters()
              if n.startswith("model.layers.0.")]
    assert theirs == [(t.name, t.shape) for t in shape.tensors("layer")]


def test_falcon_h1_defaults_count_by_hand():
    h, v = 4096, 128000
    # the mixer: inner 1,024 (128 heads of 8), conv_dim 1,024 + 2 x 256 = 1,536; dt_bias, A_log, D; conv1d 1,536 x 4
    # and its bias; in_proj h x (1,024 + 1,536 + 128); out_proj 1,024 x h; no gated norm (mamba_rms_norm false)
    mamba = 3 * 128 + 1536 * 5 + h * 2688 + 1024 * h
    attention = 2 * h * 4096 + 2 * h * 1024
    mlp = 3 * h * 14336
    assert mm.from_hf_config(FALCON_DEFAULTS).n_params == 2 * v * h + h + 32 * (mamba + attention + mlp + 2 * h)


@pytest.mark.live
def test_falcon_h1_s_cache_is_what_transformers_fills(torch, transformers):
    hf, model = _model(torch, transformers, FALCON, device="cpu")
    cache = transformers.DynamicCache(config=hf)
    with torch.no_grad():
        ids = torch.randint(0, FALCON["vocab_size"], (2, 20))
        model(ids, past_key_values=cache, use_cache=True)
        for _ in range(3):
            model(ids[:, :1], past_key_values=cache, use_cache=True)
    shape = mm.from_hf_config(FALCON)
    assert _cache_bytes(torch, cache) == mm.kv_cache_bytes(shape, context_len=23, batch_size=2)
    # every block both: 2 heads of 16 keys and values a token, a conv state 96 + 2 x 2 x 16 = 160 x 4 in bf16 and a
    # 6 x 16 x 16 fp32 SSM state
    mixer = Mamba2(heads=6, head_dim=16, state_size=16, n_groups=2, conv_kernel=4)
    assert mm.kv_cache_bytes(shape, context_len=23, batch_size=2) == 2 * (
        cache_bytes([mixer, FullAttention(2, 16)], tokens=23, batch=2))


@pytest.mark.live
@pytest.mark.parametrize("targets, modules", [(("q", "v"), ["q_proj", "v_proj"]),
                                              (("k", "o", "gate", "up", "down"),
                                               ["k_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])])
def test_falcon_h1_lora_is_peft_s(torch, transformers, peft, targets, modules):
    _, model = _model(torch, transformers, FALCON_FULL, device="cpu")
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=modules, lora_alpha=8))
    theirs = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert mm.LoRA(rank=4, targets=targets).trainable_params(mm.from_hf_config(FALCON_FULL)) == theirs


def test_falcon_h1_s_refusals_name_the_field():
    with pytest.raises(ValueError, match="in_proj and out_proj"):
        mm.LoRA(targets="all").trainable_params(mm.from_hf_config(FALCON))
    with pytest.raises(ValueError, match="mamba_d_head"):
        mm.from_hf_config(dict(FALCON, mamba_d_head=32))
    with pytest.raises(ValueError, match="mamba_n_heads"):
        mm.from_hf_config(dict(FALCON, mamba_n_heads=7))
    # traced down transformers' PyTorch path only (tests/test_families_mamba2_trace.py)
    record = mm.from_hf_config(FALCON).architecture
    assert record.traced and "mamba-ssm" in record.mixer_kernels
