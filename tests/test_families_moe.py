"""The mixture-of-experts families of the latest releases, each against transformers 5.24 and peft 0.21 on the meta
device and against its published config and model card: gpt-oss as a record; multi-head latent attention and
the shared-expert MoE of DeepSeek-V2/V3, Kimi-K2 and GLM-4.5 as the pieces their records will compose, and their
refusal until ModelShape lists dense and MoE blocks.

Expected values come from outside memmath: transformers' own parameter count (live, and recorded in
tests/fixtures/configs/expected_counts.json by count_params.py), the model cards' totals and active counts, the
checkpoint's safetensors index (total_size), peft's adapter shapes, and hand derivations in comments.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import memmath as mm
from memmath import states
from memmath.architectures import _decoder, _latent, _moe
from memmath.architectures._parts import ParamTensor
from tests.test_cli import run_json

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
EXPECTED = json.loads((FIXTURES / "expected_counts.json").read_text())


def _fixture(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def _without_quantization(config):
    return {k: v for k, v in config.items() if k != "quantization_config"}


def _meta_counts(torch, transformers, config):
    """transformers' own model on the meta device: parameters per dtype (tied weights once), and named buffers."""
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **{
        k: v for k, v in _without_quantization(config).items() if k not in ("model_type", "architectures")})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    per_dtype = Counter()
    for p in model.parameters():
        per_dtype[str(p.dtype)] += p.numel()
    return per_dtype, dict(model.named_buffers()), model


def _tiny_gpt_oss(**changes):
    config = dict(model_type="gpt_oss", num_hidden_layers=2, hidden_size=64, intermediate_size=48, head_dim=16,
                  num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                  vocab_size=100, sliding_window=8)
    config.update(changes)
    return config


# ---- gpt-oss ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gpt-oss-20b", "gpt-oss-120b"])
def test_gpt_oss_counts_what_transformers_counted(name):
    # expected_counts.json: AutoModelForCausalLM.from_config on the meta device (count_params.py); model cards:
    # gpt-oss-20b 20.91B, gpt-oss-120b 116.83B (the model card's table 1)
    shape = mm.from_hf_config(_fixture(name))
    assert shape.n_params == EXPECTED[name]["params"]
    assert shape.arch == "gpt_oss" and shape.layer_types == ("sliding_attention", "full_attention") * (
        shape.n_layers // 2)


@pytest.mark.live
@pytest.mark.parametrize("name", ["gpt-oss-20b", "gpt-oss-120b"])
def test_gpt_oss_tensors_are_transformers_own(torch, transformers, name):
    config = _fixture(name)
    per_dtype, buffers, model = _meta_counts(torch, transformers, config)
    shape = mm.from_hf_config(_without_quantization(config))
    assert dict(per_dtype) == {"torch.float32": shape.n_params}
    # every tensor by name and shape in block 0, and the buffers: only the rotary inv_freq tables (no parameters)
    block = {n.removeprefix("model.layers.0."): tuple(p.shape) for n, p in model.named_parameters()
             if n.startswith("model.layers.0.")}
    assert block == {t.name: t.shape for t in shape.tensors("layer")}
    assert {n.rsplit(".", 1)[-1] for n in buffers} == {"inv_freq", "original_inv_freq"}


@pytest.mark.parametrize("name, card_active", [("gpt-oss-20b", "3.61"), ("gpt-oss-120b", "5.13")])
def test_gpt_oss_active_parameters_match_the_model_card(name, card_active):
    # The gpt-oss model card (table 1) counts the active parameters without the token embedding (a lookup):
    # 3.61B and 5.13B. Active: every tensor but the 28 (20b: 32 - 4) or 124 unrouted experts per block, each
    # 3 x 2,880 x 2,880 weights and 2 x 2,880 + 2,880 biases.
    shape = mm.from_hf_config(_fixture(name))
    per_expert = 3 * 2880 * 2880 + 3 * 2880
    assert shape.n_params - shape.active_params == shape.n_layers * (shape.n_experts - 4) * per_expert
    assert f"{(shape.active_params - 201088 * 2880) / 1e9:.2f}" == card_active


def test_gpt_oss_presets_are_the_published_configs_dequantized():
    for name in ("gpt-oss-20b", "gpt-oss-120b"):
        preset = mm.PRESETS[name]
        assert preset.n_params == EXPECTED[name]["params"]
        assert preset.stored_format is None  # bf16, the base transformers can train


def test_gpt_oss_20b_stores_its_experts_in_mxfp4_as_the_checkpoint_does():
    # openai/gpt-oss-20b's model.safetensors.index.json: total_size 13,761,264,768 B (experts' e2m1 values and
    # e8m0 scales, everything else in bf16; tests/fixtures/configs/SOURCES.md)
    memory = mm.inference_memory(mm.from_hf_config(_fixture("gpt-oss-20b")), context_len=1)
    assert memory.weights_format == "mxfp4"
    assert memory.weights + memory.quantization_constants == 13_761_264_768


def test_gpt_oss_kv_cache_alternates_full_and_128_token_windows():
    # 12 full layers keep every token, 12 sliding layers 128 (DynamicSlidingWindowLayer once decoding):
    # 2 x 8 heads x 64 x 2 B = 2,048 B a token a layer; 12 x 2,048 x (32,768 + 128) = 808,452,096 B
    shape = mm.PRESETS["gpt-oss-20b"]
    memory = mm.inference_memory(shape, context_len=32_768, kv_format="bf16")
    layers = states.layers_from_layer_types(shape.layer_types, full=states.FullAttention(kv_heads=8, head_dim=64),
                                            sliding=states.SlidingAttention(kv_heads=8, head_dim=64, window=128))
    assert memory.kv_cache == states.cache_bytes(layers, tokens=32_768, dtype="bf16") == 808_452_096


def test_gpt_oss_activations_are_traced_with_eager_attention():
    # GptOssPreTrainedModel._supports_sdpa is False: the exact trace runs its eager sink attention
    # (tests/test_families_gpt_oss_trace.py measures it)
    memory = mm.training_memory("gpt-oss-20b", method=mm.LoRA(rank=8))
    assert memory.activation_model == "transformers" and memory.attention == "eager"
    assert "activations_textbook_fallback" not in [note.kind for note in memory.notes]


def test_gpt_oss_refuses_what_it_cannot_model():
    with pytest.raises(ValueError, match="output_router_logits"):
        mm.from_hf_config(dict(_fixture("gpt-oss-20b"), output_router_logits=True))
    with pytest.raises(ValueError, match="mxfp4"):  # Mxfp4HfQuantizer.is_trainable is False
        mm.training_memory(mm.from_hf_config(_fixture("gpt-oss-20b")), method=mm.LoRA(rank=8))


GPT_OSS_TARGETS = {  # memmath targets -> peft 0.21's LoraConfig arguments on gpt-oss
    "all": dict(target_modules="all-linear"),
    ("q", "k", "v", "o"): dict(target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
    ("router", "experts"): dict(target_parameters=["mlp.router.weight", "mlp.experts.gate_up_proj",
                                                   "mlp.experts.down_proj"],
                                # memmath's convention for the fused gate and up: rank 2r (as peft's conversion
                                # gives Mixtral's); peft does not convert gpt_oss, so it is asked for here
                                rank_pattern={r".*\.gate_up_proj": 16}),
}


@pytest.mark.live
@pytest.mark.parametrize("targets", list(GPT_OSS_TARGETS), ids=str)
def test_gpt_oss_lora_adapters_are_peft_own(torch, transformers, targets):
    import peft

    config = _tiny_gpt_oss()
    _, _, model = _meta_counts(torch, transformers, config)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_dropout=0.0, **GPT_OSS_TARGETS[targets]))
    theirs = [tuple(p.shape) for n, p in lora.named_parameters() if p.requires_grad and ".layers.0." in n]
    ours = []
    for adapter in mm.from_hf_config(config).lora_adapters(targets):
        ours += [(adapter.rank_factor * 8, adapter.d_in), (adapter.d_out, adapter.rank_factor * 8)]
    assert ours == theirs


# ---- multi-head latent attention and DeepSeek's mixture of experts, as pieces ------------------------------------
# DeepSeek-V2/V3, Kimi-K2 and GLM-4.5 keep dense MLPs in their first first_k_dense_replace blocks, so their records
# wait for ModelShape to list blocks of two layouts; the pieces a record will compose are checked here, block by
# block, against the models transformers builds.
def _latent_dims(config):
    return _latent.LatentDims(**{k: config[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                                          "qk_rope_head_dim", "v_head_dim")})


def _norms(h):
    return [ParamTensor("input_layernorm.weight", "norms", (h,)), ParamTensor("post_attention_layernorm.weight",
                                                                              "norms", (h,))]


def _dense_mlp(h, width):
    return [ParamTensor(f"mlp.{n}_proj.weight", "mlp", (width, h) if n != "down" else (h, width))
            for n in ("gate", "up", "down")]


def _deepseek_blocks(config):
    """Each block's tensors, composed from _latent and _moe as a DeepSeek record will list them."""
    h, dims = config["hidden_size"], _latent_dims(config)
    attention = _latent.attention_tensors(h, config["num_attention_heads"], dims, config.get("attention_bias", False))
    moe = _moe.shared_experts_tensors(h, config["n_routed_experts"], config["moe_intermediate_size"],
                                      config["moe_intermediate_size"] * config["n_shared_experts"])
    dense = _dense_mlp(h, config["intermediate_size"])
    k = config["first_k_dense_replace"]
    return [attention + (dense if i < k else moe) + _norms(h) for i in range(config["num_hidden_layers"])]


def _tiny_deepseek(model_type, **changes):
    config = dict(model_type=model_type, num_hidden_layers=3, hidden_size=64, intermediate_size=96,
                  moe_intermediate_size=24, n_routed_experts=4, n_shared_experts=2, num_experts_per_tok=2,
                  first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32,
                  kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=12, vocab_size=100,
                  n_group=1, topk_group=1)
    config.update(changes)
    return config


@pytest.mark.live
@pytest.mark.parametrize("config", [
    _tiny_deepseek("deepseek_v3"), _tiny_deepseek("deepseek_v3", attention_bias=True),
    _tiny_deepseek("deepseek_v2"), _tiny_deepseek("deepseek_v2", q_lora_rank=None),  # DeepSeek-V2-Lite's q_proj
], ids=["v3", "v3-bias", "v2", "v2-lite-q"])
def test_latent_attention_and_shared_experts_are_transformers_blocks(torch, transformers, config):
    _, buffers, model = _meta_counts(torch, transformers, config)
    for i, ours in enumerate(_deepseek_blocks(config)):
        prefix = f"model.layers.{i}."
        theirs = [(n.removeprefix(prefix), tuple(p.shape)) for n, p in model.named_parameters()
                  if n.startswith(prefix)]
        assert theirs == [(t.name, t.shape) for t in ours], i
    # DeepSeek-V3's router holds e_score_correction_bias, an fp32 buffer of E values per MoE block; V2's none
    routers = {n: b for n, b in buffers.items() if n.endswith("e_score_correction_bias")}
    if config["model_type"] == "deepseek_v3":
        name = next(iter(_moe.ROUTER_BUFFERS))
        assert set(routers) == {f"model.layers.{i}.{name}" for i in (1, 2)}
        assert all(b.dtype == torch.float32 and b.numel() == 4 for b in routers.values())
    else:
        assert routers == {}


def test_kimi_k2_counts_what_transformers_counted_from_the_pieces():
    # expected_counts.json: DeepseekV3ForCausalLM from Kimi-K2-Instruct's config.json on the meta device
    config = _fixture("Kimi-K2-Instruct")
    h, vocab = config["hidden_size"], config["vocab_size"]
    blocks = sum(t.numel for block in _deepseek_blocks(config) for t in block)
    assert 2 * vocab * h + blocks + h == EXPECTED["Kimi-K2-Instruct"]["params"]


def test_deepseek_v2_lite_latent_cache_is_576_values_a_token_a_layer():
    # deepseek-ai/DeepSeek-V2-Lite: 27 layers, kv_lora_rank 512, qk_rope_head_dim 64 (its config.json; the defaults
    # of DeepseekV2Config name it as the checkpoint they document). 27 x 32,768 x 576 x 2 B = 1,019,215,872 B.
    dims = _latent.LatentDims(q_lora_rank=None, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                              v_head_dim=128)
    values = _latent.cache_values(dims, layers=27, context_len=32_768, batch_size=1)
    layer = states.LatentAttention(kv_lora_rank=512, rope_head_dim=64)
    assert 2 * values == states.cache_bytes([layer] * 27, tokens=32_768, dtype="bf16") == 1_019_215_872


@pytest.mark.live
def test_glm4_moe_blocks_are_gqa_attention_and_the_shared_expert_moe(torch, transformers):
    # Glm4MoeAttention: q, k, v with attention_bias, o_proj without; Glm4MoeMoE registers experts, gate,
    # shared_experts as DeepseekV3MoE does (modeling_glm4_moe.py)
    config = dict(model_type="glm4_moe", num_hidden_layers=2, hidden_size=64, intermediate_size=96, head_dim=32,
                  moe_intermediate_size=24, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                  first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                  attention_bias=True, n_group=1, topk_group=1)
    _, buffers, model = _meta_counts(torch, transformers, config)
    shape = mm.models.llama_model(n_layers=2, hidden_size=64, n_heads=4, n_kv_heads=2, head_dim=32, intermediate_size=96,
                           vocab_size=100).with_changes(qkv_bias=True)
    attention = _decoder.attention_tensors(shape)
    moe = _moe.shared_experts_tensors(64, 4, 24, 24)
    for i, mlp in enumerate([_dense_mlp(64, 96), moe]):
        theirs = [(n.removeprefix(f"model.layers.{i}."), tuple(p.shape)) for n, p in model.named_parameters()
                  if n.startswith(f"model.layers.{i}.")]
        assert theirs == [(t.name, t.shape) for t in attention + mlp + _norms(64)]
    assert [n for n in buffers if n.endswith("e_score_correction_bias")] == [
        f"model.layers.1.{next(iter(_moe.ROUTER_BUFFERS))}"]


def test_gpt_oss_config_json_is_served_and_counted_on_the_command_line():
    # `memmath infer gpt-oss-20b/config.json` as a user runs it: the experts in MXFP4 as stored (total_size
    # 13,761,264,768 B), the alternating-window cache derived above; `memmath models` the model card's 3.61B active
    config = str(FIXTURES / "gpt-oss-20b.json")
    parts = run_json("infer", config, "--context", "32768")["parts"]
    assert parts["weights"] + parts["quantization_constants"] == 13_761_264_768
    assert parts["kv_cache"] == 808_452_096
    model = run_json("models", config)["model"]
    assert model["params"] == EXPECTED["gpt-oss-20b"]["params"] and model["stored_format"] == "mxfp4"
    assert f"{model['active_params_without_embeddings'] / 1e9:.2f}" == "3.61"


def test_a_model_type_that_is_not_a_string_is_refused_by_name():
    # found by tests/test_properties.py: the reason lookup must not hash a list
    with pytest.raises(ValueError, match="model_type"):
        mm.from_hf_config({"model_type": [], "hidden_size": 64})


@pytest.mark.live
@pytest.mark.parametrize("changes", [{}, {"q_lora_rank": None}], ids=["v3", "v2-lite-q"])
def test_peft_all_linear_adapts_the_latent_linears_router_and_experts_only(torch, transformers, changes):
    # peft 0.21 on transformers 5.24 (deepseek_v3 converted like qwen2_moe): "all-linear" adapts every linear of the
    # latent attention, the router and the routed experts, and leaves the dense blocks' MLP and the shared experts
    import peft

    config = _tiny_deepseek("deepseek_v3", **changes)
    _, _, model = _meta_counts(torch, transformers, config)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_dropout=0.0, target_modules="all-linear"))
    latent = [t.name.removesuffix(".weight") for t in
              _latent.attention_tensors(64, 4, _latent_dims(config)) if t.linear]
    for block, mlp in ((0, []), (1, ["mlp.experts.base_layer", "mlp.experts", "mlp.gate"])):
        adapted = [n.split(f".layers.{block}.")[1].removesuffix(".lora_A.default.weight")
                   for n, p in lora.named_parameters() if p.requires_grad and f".layers.{block}." in n
                   and ".lora_A." in n]
        assert adapted == latent + mlp


def _bf16_build(torch, transformers, config):
    config = _without_quantization(config)
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **{
        k: v for k, v in config.items() if k not in ("model_type", "architectures")})
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.bfloat16)


@pytest.mark.live
def test_gpt_oss_bf16_bytes_are_transformers_own(torch, transformers):
    # a bf16 load keeps every gpt-oss parameter in bf16 (no _keep_in_fp32_modules), so its bytes are 2 x the count
    model = _bf16_build(torch, transformers, _fixture("gpt-oss-20b"))
    theirs = sum(p.numel() * p.element_size() for p in model.parameters())
    assert mm.inference_memory("gpt-oss-20b", weights_format="bf16", context_len=1).weights == theirs


@pytest.mark.live
def test_deepseek_keeps_its_router_in_fp32_under_a_bf16_load(torch, transformers):
    # _keep_in_fp32_modules_strict = ["e_score_correction_bias", "gate.weight"] (modeling_deepseek_v3.py): the
    # record to come prices mlp.gate.weight at 4 B a value in a 16-bit load, 2 MoE blocks of E x h here
    model = _bf16_build(torch, transformers, _tiny_deepseek("deepseek_v3"))
    wide = {n for n, p in model.named_parameters() if p.dtype != torch.bfloat16}
    assert wide == {f"model.layers.{i}.mlp.gate.weight" for i in (1, 2)}
