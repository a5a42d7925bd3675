"""Gemma 4's language model (model_type gemma4_text) against transformers 5.24 and peft 0.21 themselves: the count,
shapes and parameters() order of Gemma4TextConfig's defaults and of small configs exercising every option (sliding
and full blocks of different head sizes, attention_k_eq_v, shared-KV blocks with double-wide MLPs, per-layer input
embeddings, the MoE block, an untied head), saved configs read back, peft's adapters, the cache transformers fills
on the CPU, and the refusals.

No published Gemma 4 config.json is at hand (no hub access): the full-size config is Gemma4TextConfig's defaults
(validation/published_configs.py CONFIG_CLASS_DEFAULTS). Expected values come from transformers and peft (built
here) and from hand derivations in the comments."""

from __future__ import annotations

import json

import pytest

import memmath as mm
from family_checks import cache_storage_bytes as _cache_bytes
from family_checks import assert_built_like_transformers
from memmath import cli
from memmath.architectures import ARCHITECTURES
from memmath.architectures._refused import refusal
from memmath.sharding import torch_tensors
from validation.published_configs import CONFIG_CLASS_DEFAULTS

DEFAULTS = CONFIG_CLASS_DEFAULTS["Gemma4TextConfig"]
S, F = "sliding_attention", "full_attention"
# eight blocks: 2 and 5 full, the last forced full; blocks 5-7 share keys and values with blocks 4 (sliding) and 2
# (full) when num_kv_shared_layers is 3
SMALL = {"model_type": "gemma4_text", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 8,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "global_head_dim": 32,
         "vocab_size": 128, "vocab_size_per_layer_input": 100, "hidden_size_per_layer_input": 8,
         "layer_types": [S, S, F, S, S, F, S, F], "sliding_window": 8}
EVERY_OPTION = dict(SMALL, num_global_key_value_heads=1, attention_k_eq_v=True, num_kv_shared_layers=3,
                    use_double_wide_mlp=True, enable_moe_block=True, num_experts=4, top_k_experts=2,
                    moe_intermediate_size=24, tie_word_embeddings=False)
CONFIGS = {
    "defaults": DEFAULTS, "every-option": EVERY_OPTION,
    "no-per-layer-input": dict(SMALL, hidden_size_per_layer_input=0),
    "shared-kv": dict(SMALL, num_kv_shared_layers=3),
    "shared-kv-double-mlp": dict(SMALL, num_kv_shared_layers=3, use_double_wide_mlp=True),
    "k-eq-v": dict(SMALL, attention_k_eq_v=True, num_global_key_value_heads=1),
    "k-eq-v-own-heads": dict(SMALL, attention_k_eq_v=True),
    "global-heads-without-k-eq-v": dict(SMALL, num_global_key_value_heads=1),  # ignored: no k_eq_v
    "moe": dict(SMALL, enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=24),
    "untied": dict(SMALL, tie_word_embeddings=False),
}


def _hf(transformers, config):
    return transformers.AutoConfig.for_model("gemma4_text", **{k: v for k, v in config.items() if k != "model_type"})


def _model(torch, transformers, config, device="meta"):
    hf = _hf(transformers, config)
    torch.manual_seed(0)
    if device == "meta":
        with torch.device("meta"):
            return hf, transformers.AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16)
    return hf, transformers.AutoModelForCausalLM.from_config(hf, dtype=torch.float32).eval()


# ---- 1. the parameters --------------------------------------------------------------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_built_as_transformers_builds_it_in_its_order(torch, transformers, name):
    _, model = _model(torch, transformers, CONFIGS[name])
    assert_built_like_transformers(torch, model, CONFIGS[name])
    assert [dims for _, dims in torch_tensors(mm.from_hf_config(CONFIGS[name]))] == [tuple(p.shape)
                                                                                   for p in model.parameters()]


@pytest.mark.live
@pytest.mark.parametrize("name", ["defaults", "every-option", "k-eq-v"])
def test_a_saved_config_reads_as_the_config_it_was_saved_from(transformers, name):
    # save_pretrained writes per_layer_config (each full block's head_dim and kv heads) and no global_head_dim
    saved = _hf(transformers, CONFIGS[name]).to_dict()
    assert "per_layer_config" in saved and "global_head_dim" not in saved
    assert mm.from_hf_config(saved) == mm.from_hf_config(dict(CONFIGS[name], use_cache=True))


def test_the_config_class_defaults_count_by_hand():
    h, v, i, ple = 2304, 262144, 9216, 256
    outside = v * h + v * 30 * ple + h * 30 * ple + ple + h  # embeddings, per-layer table, its projection and norm; norm
    per_layer = h * ple + ple * h + h  # per_layer_input_gate, per_layer_projection, post_per_layer_input_norm
    mlp_norms = 3 * h * i + 4 * h
    sliding = h * 8 * 256 + 2 * h * 4 * 256 + 8 * 256 * h + 2 * 256  # q, k, v (4 heads of 256), o, q/k norms
    full = h * 8 * 512 + 2 * h * 4 * 512 + 8 * 512 * h + 2 * 512  # at global_head_dim 512
    total = outside + 25 * (sliding + mlp_norms + per_layer) + 5 * (full + mlp_norms + per_layer)
    assert mm.from_hf_config(DEFAULTS).n_params == total == 5_077_177_856  # transformers' count (test above)


def test_the_layouts_follow_layer_types_sharing_and_k_eq_v():
    layouts = [(layout.block_kind, layout.head_dim, layout.n_kv_heads, layout.intermediate_size, blocks)
               for layout, blocks in mm.from_hf_config(EVERY_OPTION).layouts()]
    # Gemma4TextConfig.kv_sharing_modes: blocks 5-7 "reuse"; the last earlier block of each type "store" (4 sliding,
    # 2 full, which attention_k_eq_v also gives no v_proj)
    assert layouts == [("", 16, 2, 96, (0, 1, 3)), ("k_eq_v_store", 32, 1, 96, (2,)), ("kv_store", 16, 2, 96, (4,)),
                       ("kv_shared", 32, 1, 192, (5, 7)), ("kv_shared", 16, 2, 192, (6,))]


def test_the_per_layer_embeddings_are_embeddings_and_the_experts_routed():
    shape = mm.from_hf_config(EVERY_OPTION)
    # embed_tokens 128 x 64, embed_tokens_per_layer 100 x 8 x 8, per_layer_model_projection 64 x 64, its norm 8
    assert shape.group_params("embeddings") == 128 * 64 + 100 * 64 + 64 * 64 + 8
    # 8 blocks, each 4 experts of gate_up 48 x 64 and down 64 x 24; a token reaches 2 of 4
    assert shape.routed_expert_params == 8 * 4 * (48 * 64 + 64 * 24)
    assert shape.n_params - shape.active_params == 8 * 2 * (48 * 64 + 64 * 24)


# ---- 2. peft's adapters -------------------------------------------------------------------------------------------
PEFT_MODULES = {"q+v": ["q_proj", "v_proj"], "k": ["k_proj"], "q+k+v+o+gate+up+down":
                ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}


@pytest.mark.live
@pytest.mark.parametrize("name", ["every-option", "shared-kv-double-mlp", "k-eq-v", "no-per-layer-input"])
@pytest.mark.parametrize("targets", sorted(PEFT_MODULES))
def test_lora_adapters_are_peft_s(torch, transformers, peft, name, targets):
    _, model = _model(torch, transformers, CONFIGS[name])
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=PEFT_MODULES[targets]))
    theirs = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    ours = mm.LoRA(rank=4, targets=tuple(targets.split("+"))).trainable_params(mm.from_hf_config(CONFIGS[name]))
    assert ours == theirs


def test_lora_on_q_and_v_of_every_option_by_hand():
    # q in every block: 4 x 16 (0, 1, 3, 4, 6) or 4 x 32 (2, 5, 7) from 64; v only in blocks 0, 1, 3, 4 (2 x 16):
    # block 2's values are its keys, blocks 5-7 share an earlier block's
    q = 5 * 4 * (64 + 64) + 3 * 4 * (64 + 128)
    v = 4 * 4 * (64 + 32)
    assert mm.LoRA(rank=4, targets=("q", "v")).trainable_params(mm.from_hf_config(EVERY_OPTION)) == q + v


@pytest.mark.live
def test_all_linear_without_per_layer_inputs_or_experts_is_peft_s(torch, transformers, peft):
    config = dict(SMALL, hidden_size_per_layer_input=0, num_kv_shared_layers=3, attention_k_eq_v=True)
    _, model = _model(torch, transformers, config)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    theirs = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert mm.LoRA(rank=4, targets="all").trainable_params(mm.from_hf_config(config)) == theirs


@pytest.mark.parametrize("name, targets, match", [
    ("every-option", "all", "per_layer_input_gate.*router.proj"),
    ("moe", ("router",), "router"), ("moe", ("experts",), "experts"),
    ("every-option", ("shared_gate",), "no shared expert"),
])
def test_what_memmath_cannot_count_is_refused_by_name(name, targets, match):
    with pytest.raises(ValueError, match=match):
        mm.LoRA(rank=4, targets=targets).trainable_params(mm.from_hf_config(CONFIGS[name]))


# ---- 3. the cache -------------------------------------------------------------------------------------------------


@pytest.mark.live
@pytest.mark.parametrize("name", ["every-option", "shared-kv", "k-eq-v", "no-per-layer-input"])
def test_the_cache_is_what_transformers_fills(torch, transformers, name):
    # a 20-token prompt then 3 decoded tokens, a window of 8: sliding blocks keep the window, full blocks every
    # token, shared blocks nothing (their cache layer is a dummy one); fp32, 4 B a value
    config = CONFIGS[name]
    hf, model = _model(torch, transformers, config, device="cpu")
    cache = transformers.DynamicCache(config=hf)
    ids = torch.randint(0, 100, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        after_prefill = _cache_bytes(torch, cache)
        for _ in range(3):
            model(ids[:, :1], past_key_values=cache, use_cache=True)
    shape = mm.from_hf_config(config)
    assert _cache_bytes(torch, cache) == mm.kv_cache_bytes(shape, context_len=23, batch_size=2, kv_format="fp32")
    assert after_prefill == mm.kv_cache_bytes(shape, context_len=20, batch_size=2, kv_format="fp32", after_prefill=True)


def test_the_cache_of_every_option_by_hand():
    # per token and sequence: blocks 0, 1, 3, 4 slide (2 heads of 16, at most 8 tokens), block 2 is full (1 head of
    # 32, k and v both cached though equal), blocks 5-7 share: 2 values (k, v) each
    shape = mm.from_hf_config(EVERY_OPTION)
    for tokens in (4, 100):
        expected = 2 * (4 * 2 * 16 * min(tokens, 8) + 1 * 32 * tokens) * 2
        assert mm.kv_cache_bytes(shape, context_len=tokens, batch_size=1, kv_format="bf16") == expected


# ---- 4. what it refuses, and the command line ---------------------------------------------------------------------
@pytest.mark.parametrize("changes, match", [
    ({"use_bidirectional_attention": "all"}, "use_bidirectional_attention"),
    ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ({"num_kv_shared_layers": 6}, "num_kv_shared_layers"),  # blocks 0-1 are sliding only: no full block to read
    ({"num_kv_shared_layers": 9}, "num_kv_shared_layers"),
    ({"per_layer_config": {"02": {"head_dim": 32, "sliding_window": 4}}}, "per_layer_config"),
    ({"per_layer_config": {"12": {"head_dim": 32}}}, "per_layer_config"),
    ({"enable_moe_block": True, "num_experts": 2, "top_k_experts": 3, "moe_intermediate_size": 8}, "top_k_experts"),
    ({"enable_moe_block": True}, "num_experts"),
    ({"layer_types": [S, F]}, "layer_types"),
])
def test_what_it_cannot_model_is_refused_by_field(changes, match):
    with pytest.raises(ValueError, match=match):
        mm.from_hf_config(dict(SMALL, **changes))


def test_vision_bidirectional_attention_changes_nothing_in_a_text_model():
    # "vision" makes only image tokens attend both ways (modeling_gemma4.py); "all" turns causality off and is refused
    assert mm.from_hf_config(dict(SMALL, use_bidirectional_attention="vision")) == mm.from_hf_config(SMALL)


def test_the_last_block_is_full_whatever_layer_types_says():
    # Gemma4TextConfig.__post_init__ forces the last layer to full_attention (with a warning)
    shape = mm.from_hf_config(dict(SMALL, layer_types=[S] * 8, num_kv_shared_layers=0))
    assert shape.layer_types == (S,) * 7 + (F,)


def test_gemma4_text_is_a_record_and_the_wrapper_points_to_it():
    assert "gemma4_text" in ARCHITECTURES and refusal("gemma4_text") is None
    assert "text_config alone reads as model_type gemma4_text" in refusal("gemma4")
    # traced: the full-size defaults (per-layer inputs, no shared keys and values, no MoE block) too, and every option
    # at once (the MoE block beside shared keys and values read from blocks 4 and 2)
    assert ARCHITECTURES["gemma4_text"].traced
    assert ARCHITECTURES["gemma4_text"].trace_refusal(mm.from_hf_config(DEFAULTS)) == ""
    assert ARCHITECTURES["gemma4_text"].trace_refusal(mm.from_hf_config(EVERY_OPTION)) == ""


@pytest.mark.parametrize("command", [["infer"], ["train"], ["train", "--method", "lora"]])
def test_the_command_line_reads_the_full_size_config(tmp_path, capsys, command):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(DEFAULTS))
    assert cli.main([command[0], str(path), *command[1:]]) == 0
    assert "5,077,177,856" in capsys.readouterr().out


@pytest.mark.live
def test_the_tensor_parallel_plan_is_transformers_own(transformers):
    # Gemma4TextConfig.base_model_tp_plan's colwise and rowwise entries; its q/k norms are replicated and the
    # routed experts memmath/parallel.py splits by ep (as every MoE record)
    plan = transformers.Gemma4TextConfig.base_model_tp_plan
    expected = {k: v for k, v in plan.items() if v in ("colwise", "rowwise") and ".experts" not in k}
    assert dict(ARCHITECTURES["gemma4_text"].tp_plan) == expected


# ---- 5. Gemma 3n's language model: Gemma 4's per-layer inputs and shared keys and values, AltUp and LAuReL --------
GEMMA3N_DEFAULTS = CONFIG_CLASS_DEFAULTS["Gemma3nTextConfig"]
# six blocks, 2 and 5 full; the last two share the keys and values of blocks 3 (sliding) and 2 (full)
GEMMA3N = {"model_type": "gemma3n_text", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 6,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 128,
           "vocab_size_per_layer_input": 100, "hidden_size_per_layer_input": 8, "num_kv_shared_layers": 2,
           "altup_num_inputs": 3, "laurel_rank": 8, "layer_types": [S, S, F, S, S, F], "sliding_window": 8}
GEMMA3N_CONFIGS = {
    "defaults": GEMMA3N_DEFAULTS, "small": GEMMA3N,
    "widths-untied-one-copy": dict(GEMMA3N, intermediate_size=[96, 96, 128, 96, 64, 64], tie_word_embeddings=False,
                                   num_kv_shared_layers=0, altup_num_inputs=1),
}


def _gemma3n(torch, transformers, config, device="meta"):
    hf = transformers.AutoConfig.for_model("gemma3n_text", **{k: v for k, v in config.items() if k != "model_type"})
    torch.manual_seed(0)
    if device == "meta":
        with torch.device("meta"):
            return hf, transformers.AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16)
    return hf, transformers.AutoModelForCausalLM.from_config(hf, dtype=torch.float32).eval()


@pytest.mark.live
@pytest.mark.parametrize("name", sorted(GEMMA3N_CONFIGS))
def test_gemma3n_is_built_as_transformers_builds_it_in_its_order(torch, transformers, name):
    hf, model = _gemma3n(torch, transformers, GEMMA3N_CONFIGS[name])
    assert_built_like_transformers(torch, model, GEMMA3N_CONFIGS[name])
    assert [dims for _, dims in torch_tensors(mm.from_hf_config(GEMMA3N_CONFIGS[name]))] == [
        tuple(p.shape) for p in model.parameters()]
    # a saved config.json (intermediate_size a list of one a block) reads as the config it was saved from
    assert mm.from_hf_config(hf.to_dict()).n_params == mm.from_hf_config(GEMMA3N_CONFIGS[name]).n_params


def test_gemma3n_s_defaults_count_by_hand():
    h, v, i, ple, n, r = 2048, 262400, 16384, 256, 4, 64
    outside = (v * h + 262144 * 35 * ple + h * 35 * ple + ple + h  # embeddings, per-layer table, projection, norms
               + 2 * (n - 1) * h * h)  # altup_projections and altup_unembed_projections
    attention = h * 8 * 256 + 8 * 256 * h + 256  # q, o, q_norm
    own_kv = 2 * h * 2 * 256 + 256  # k, v (2 heads of 256) and k_norm: the first 20 blocks
    altup = h + n * n + n * n * n + n * h + h  # correct_output_scale, correction and prediction coefs, router, norm
    laurel = 2 * h * r + h
    per_block = attention + 3 * h * i + 4 * h + altup + laurel + 2 * h * ple + h
    total = outside + 35 * per_block + 20 * own_kv
    assert mm.from_hf_config(GEMMA3N_DEFAULTS).n_params == total == 6_835_235_568  # transformers' count (above)


@pytest.mark.live
@pytest.mark.parametrize("targets", sorted(PEFT_MODULES))
def test_gemma3n_lora_adapters_are_peft_s(torch, transformers, peft, targets):
    _, model = _gemma3n(torch, transformers, GEMMA3N)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=PEFT_MODULES[targets]))
    theirs = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert mm.LoRA(rank=4, targets=tuple(targets.split("+"))).trainable_params(mm.from_hf_config(GEMMA3N)) == theirs


@pytest.mark.live
def test_gemma3n_s_cache_is_what_transformers_fills(torch, transformers):
    hf, model = _gemma3n(torch, transformers, GEMMA3N, device="cpu")
    cache = transformers.DynamicCache(config=hf)
    ids = torch.randint(0, 100, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        for _ in range(3):
            model(ids[:, :1], past_key_values=cache, use_cache=True)
    shape = mm.from_hf_config(GEMMA3N)
    assert _cache_bytes(torch, cache) == mm.kv_cache_bytes(shape, context_len=23, batch_size=2, kv_format="fp32")
    # by hand: blocks 0, 1, 3 slide (8 tokens), block 2 is full (23), blocks 4-5 share; 2 x 2 heads x 16 x 4 B x 2
    assert _cache_bytes(torch, cache) == 2 * 2 * 16 * 4 * 2 * (3 * 8 + 23)


@pytest.mark.parametrize("changes, match", [
    ({"num_kv_shared_layers": 6}, "num_kv_shared_layers"),
    ({"num_kv_shared_layers": 5}, "num_kv_shared_layers"),  # block 0 is sliding only: no full block to read
    ({"intermediate_size": [96, 96]}, "intermediate_size"),
    ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
])
def test_gemma3n_refuses_what_it_cannot_model_by_field(changes, match):
    with pytest.raises(ValueError, match=match):
        mm.from_hf_config(dict(GEMMA3N, **changes))


def test_gemma3n_s_all_linear_is_refused_and_the_wrapper_points_to_the_text_model():
    with pytest.raises(ValueError, match="AltUp.*LAuReL"):
        mm.LoRA(rank=4, targets="all").trainable_params(mm.from_hf_config(GEMMA3N))
    assert "text_config alone reads as model_type gemma3n_text" in refusal("gemma3n")
    assert refusal("gemma3n_text") is None and ARCHITECTURES["gemma3n_text"].traced


@pytest.mark.live
@pytest.mark.parametrize("wrapper, config_class", [("gemma4", "Gemma4Config"), ("gemma3n", "Gemma3nConfig")])
def test_the_wrapper_s_text_config_reads_alone_as_its_language_model(torch, transformers, wrapper, config_class):
    # what the wrappers' refusals promise: the text_config a saved Gemma4Config / Gemma3nConfig holds reads as
    # gemma4_text / gemma3n_text, counted as transformers builds that language model
    text = getattr(transformers, config_class)().to_dict()["text_config"]
    assert text["model_type"] == f"{wrapper}_text"
    hf = transformers.AutoConfig.for_model(text["model_type"], **{k: v for k, v in text.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf)
    assert mm.from_hf_config(text).n_params == sum(p.numel() for p in model.parameters())
