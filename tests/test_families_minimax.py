"""MiniMax-M2 (model_type minimax_m2) against transformers 5.24 and peft 0.21 themselves: the parameter count and
tensors of the published config and of small widths built on the meta device, the reader (partial rotary from the
legacy rotary_dim, head_dim's default), peft's adapters, the KV cache transformers fills, the tensor-parallel plan,
and two CPU steps of small models measured after the record was written (held out).

Expected values come from transformers and peft (built here), the model card's totals and hand derivations in the
comments."""

from __future__ import annotations

import json

import pytest

import memmath as mm
from family_checks import held_for_backward
from memmath.architectures import ARCHITECTURES
from memmath.architectures._refused import REFUSED_MODEL_TYPES
from tests.test_families_dense import _build, _filled_cache_bytes
from validation.published_configs import PUBLISHED_ACTIVE, PUBLISHED_CONFIGS, PUBLISHED_TOTALS

M2 = PUBLISHED_CONFIGS["MiniMax-M2"]
# h != a x d (head_dim given), the experts' width != h, a quarter of each head rotated (rotary_dim 4 of 16); the
# experts' widths multiples of 8 (torch's CPU grouped_mm wants 16-byte strides in bf16)
TINY = dict(model_type="minimax_m2", vocab_size=96, hidden_size=32, intermediate_size=24, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, rotary_dim=4, num_local_experts=4,
            num_experts_per_tok=2, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _block(model, i):
    prefix = f"model.layers.{i}."
    return [(n.removeprefix(prefix), tuple(p.shape)) for n, p in model.named_parameters() if n.startswith(prefix)]


# ---- 1. tensors: transformers' own count, names and dtypes, on the meta device -----------------------------------
@pytest.mark.live
@pytest.mark.parametrize("name", ["MiniMax-M2", "MiniMax-M2.1"])
def test_the_published_config_counts_as_transformers_builds_it(torch, transformers, name):
    from family_checks import assert_built_like_transformers

    config = PUBLISHED_CONFIGS[name]
    model = _build(torch, transformers, config, dtype=torch.bfloat16)
    assert_built_like_transformers(torch, model, config)
    shape = mm.from_hf_config(config)
    assert dict(_block(model, 61)) == {t.name: t.shape for t in shape.tensors("layer")}


def test_the_published_total_and_active_count_are_the_card_s_by_hand():
    # by hand: attention 3,072 x 48 x 128 x 2 (q, o) + 3,072 x 8 x 128 x 2 (k, v) = 44,040,192; q_norm 48 x 128 =
    # 6,144 and k_norm 8 x 128 = 1,024 values (over all heads, not one head's 128); two block norms 6,144; router
    # 256 x 3,072 = 786,432; experts 256 x 3 x 3,072 x 1,536 = 3,623,878,656; a block 3,668,718,592; 62 blocks,
    # the embedding and the untied head 2 x 200,064 x 3,072 and the final norm 3,072: 228,689,748,992
    shape = mm.from_hf_config(M2)
    assert shape.params_per_layer == 3_668_718_592
    assert shape.n_params == 62 * 3_668_718_592 + 2 * 200_064 * 3072 + 3072 == 228_689_748_992
    assert abs(shape.n_params / PUBLISHED_TOTALS["MiniMax-M2"] - 1) < 0.01  # the card's 230B
    # active: 8 of the 256 experts a token, 248 x 3 x 3,072 x 1,536 a block left out
    assert shape.active_params == 228_689_748_992 - 62 * 248 * 3 * 3072 * 1536 == 11_030_537_216
    assert shape.active_params == PUBLISHED_ACTIVE["MiniMax-M2"]
    # the card's "10B active" leaves out the embedding and the head: 9,801,347,072, 2% under it
    assert abs((shape.active_params - 2 * 200_064 * 3072) / 10e9 - 1) < 0.03


def test_the_preset_is_the_published_config():
    assert mm.PRESETS["minimax-m2"].n_params == mm.from_hf_config(M2).n_params == 228_689_748_992
    assert mm.PRESETS["minimax-m2"].rotary_dim == 64 and mm.PRESETS["minimax-m2"].qk_norm == "full"


@pytest.mark.live
@pytest.mark.parametrize("changes", [{}, dict(head_dim=8), dict(rotary_dim=None), dict(tie_word_embeddings=True),
                                     dict(num_key_value_heads=4), dict(num_local_experts=8, num_experts_per_tok=3),
                                     dict(num_key_value_heads=1)])
def test_a_small_width_counts_as_transformers_builds_it(torch, transformers, changes):
    config = {k: v for k, v in dict(TINY, **changes).items() if v is not None}
    model = _build(torch, transformers, config)
    shape = mm.from_hf_config(config)
    assert shape.n_params == sum(p.numel() for p in model.parameters())
    assert {t.name: t.shape for t in shape.tensors("layer")} == dict(_block(model, 1))
    # the q/k norms span every head: heads x head_dim values, not head_dim
    d = config["head_dim"]
    assert dict(_block(model, 1))["self_attn.q_norm.weight"] == (config["num_attention_heads"] * d,)
    assert dict(_block(model, 1))["self_attn.k_norm.weight"] == (config["num_key_value_heads"] * d,)


@pytest.mark.live
def test_a_bf16_load_keeps_nothing_in_fp32(torch, transformers):
    # MiniMaxM2PreTrainedModel names no _keep_in_fp32_modules: the router's weight is stored as the others, and the
    # MoE block's e_score_correction_bias is a buffer (E values, not a parameter) in the model's dtype
    model = _build(torch, transformers, TINY, dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    buffers = {n: b.dtype for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")}
    assert buffers == {f"model.layers.{i}.mlp.e_score_correction_bias": torch.bfloat16 for i in range(2)}


# ---- 2. the reader -----------------------------------------------------------------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("changes", [{}, dict(rotary_dim=None), dict(rotary_dim=None, partial_rotary_factor=0.5),
                                     dict(rotary_dim=None, rope_parameters={"rope_type": "default",
                                                                            "rope_theta": 1e4,
                                                                            "partial_rotary_factor": 0.75}),
                                     dict(head_dim=None)])
def test_the_rotated_dims_are_those_transformers_rotates(torch, transformers, changes):
    # MiniMaxM2RotaryEmbedding's inv_freq holds rotated dims / 2 frequencies: int(head_dim x partial_rotary_factor),
    # the factor from rope_parameters, or the legacy rotary_dim / head_dim, else 1.0; head_dim 128 when absent
    config = {k: v for k, v in dict(TINY, **changes).items() if v is not None}
    model = _build(torch, transformers, config)
    shape = mm.from_hf_config(config)
    assert shape.head_dim == model.config.head_dim
    assert shape.rotary_dim == 2 * model.model.rotary_emb.inv_freq.numel()


def test_the_rotary_dim_is_read_from_each_way_a_config_says_it():
    assert mm.from_hf_config(TINY).rotary_dim == 4  # rotary_dim 4 of head_dim 16
    assert mm.from_hf_config(dict(TINY, rotary_dim=None)).rotary_dim == 16  # no factor: every dim
    assert mm.from_hf_config(M2).rotary_dim == 64
    assert mm.from_hf_config({"model_type": "minimax_m2"}).head_dim == 128  # MiniMaxM2Config's head_dim


@pytest.mark.parametrize("changes, field", [
    (dict(rotary_dim=32), "rotary_dim"), (dict(rotary_dim=None, partial_rotary_factor=1.5), "partial_rotary_factor"),
    (dict(rotary_dim=3), "partial_rotary_factor"), (dict(output_router_logits=True), "output_router_logits"),
    (dict(router_jitter_noise=0.01), "router_jitter_noise"), (dict(num_experts_per_tok=5), "num_experts_per_tok"),
])
def test_what_it_cannot_model_is_refused_by_field(changes, field):
    with pytest.raises(ValueError, match=field):
        mm.from_hf_config(dict(TINY, **changes))


def test_minimax_m2_is_a_record_not_a_refusal():
    assert "minimax_m2" in ARCHITECTURES and "minimax_m2" not in REFUSED_MODEL_TYPES


@pytest.mark.parametrize("command", ["train", "infer"])
def test_the_command_line_reads_the_published_config(tmp_path, capsys, command):
    from memmath import cli

    path = tmp_path / "config.json"
    path.write_text(json.dumps(M2))
    assert cli.main([command, str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the text wraps where the file's path ends
    assert "228,689,748,992" in out and "Traceback" not in out


# ---- 3. peft's adapters --------------------------------------------------------------------------------------------
# memmath targets -> peft 0.21's LoraConfig target_modules on minimax_m2, which transformers maps onto Mixtral's
# conversion (conversion_mapping.py): the transformers-4 names w1/w3 and w2 become the experts' gate_up_proj and
# down_proj, "gate" the router's weight
MINIMAX_TARGETS = {
    "all": "all-linear", ("q", "v"): ["q_proj", "v_proj"],
    ("q", "k", "v", "o"): ["q_proj", "k_proj", "v_proj", "o_proj"],
    ("router",): ["gate"], ("experts",): ["w1", "w2", "w3"], ("router", "experts", "o"): ["gate", "w1", "w2", "w3",
                                                                                           "o_proj"],
}


@pytest.mark.live
@pytest.mark.parametrize("targets", list(MINIMAX_TARGETS), ids=str)
def test_lora_adapters_are_peft_s_in_peft_s_order(torch, transformers, targets):
    import peft

    shape = mm.from_hf_config(TINY)
    lora = peft.get_peft_model(_build(torch, transformers, TINY),
                               peft.LoraConfig(r=4, lora_dropout=0.0, target_modules=MINIMAX_TARGETS[targets]))
    theirs = [tuple(p.shape) for n, p in lora.named_parameters() if p.requires_grad and ".layers.1." in n]
    ours = []
    for adapter in shape.lora_adapters(targets):
        ours += [(adapter.rank_factor * 4, adapter.d_in), (adapter.d_out, adapter.rank_factor * 4)]
    assert ours == theirs
    # the counts by hand at r 4 (h 32, E 4, I 24): router 4 x (32 + 4) = 144; experts gate_up_proj at rank 8 a
    # expert, 4 x 8 x (32 + 48) = 2,560, down_proj at rank 4, 4 x 4 x (24 + 32) = 896
    by_hand = {("router",): 144, ("experts",): 2_560 + 896}
    if targets in by_hand:
        assert sum(a * b for a, b in theirs) == by_hand[targets]


@pytest.mark.parametrize("target", ["gate", "up", "down", "shared_gate"])
def test_the_expert_names_point_to_experts(target):
    with pytest.raises(ValueError, match="experts"):
        mm.from_hf_config(TINY).lora_adapters((target,))


# ---- 4. the KV cache and the tensor-parallel plan ------------------------------------------------------------------
def test_minimax_m2_caches_8_heads_of_128_in_every_block():
    # 62 blocks x 2 (k, v) x 8 heads x 128 x 2 B = 253,952 B a token; 32,768 tokens: 8,321,499,136 B
    assert mm.kv_cache_bytes(mm.from_hf_config(M2), context_len=32_768, kv_format="bf16") == 8_321_499_136


@pytest.mark.live
def test_the_cache_transformers_fills_is_memmath_s(torch, transformers):
    shape = mm.from_hf_config(TINY)
    for tokens, steps in ((12, 0), (12, 5), (5, 1)):
        expected = mm.kv_cache_bytes(shape, context_len=tokens + steps, after_prefill=steps == 0)
        assert _filled_cache_bytes(torch, transformers, TINY, tokens, steps) == expected, (tokens, steps)


@pytest.mark.live
def test_the_tensor_parallel_plan_is_transformers_own(transformers):
    # MiniMaxM2Config.base_model_tp_plan splits q, k, v colwise (gathering the output) and o rowwise; the routed
    # experts memmath/parallel.py splits by ep, as every MoE record
    plan = transformers.MiniMaxM2Config.base_model_tp_plan
    record = ARCHITECTURES["minimax_m2"]
    expected = {k: v.split("_")[0] for k, v in plan.items() if ".experts" not in k}
    assert dict(record.tp_plan) == expected
    assert record.tp_style("mlp.gate.weight") is None and record.tp_style("mlp.experts.down_proj") is None


# ---- 5. activations: CPU steps measured after the trace was written (held out) ------------------------------------
STEP_BASE = dict(TINY, vocab_size=512, hidden_size=64, intermediate_size=32, rotary_dim=8, use_cache=False)
STEPPED = {  # each measured in the eight settings below after the record's trace was written: every one matched
    "moe": STEP_BASE,
    # other widths, every head dim rotated, top-3 of 8 experts, the training DynamicCache on
    "wider": dict(STEP_BASE, hidden_size=96, num_attention_heads=6, num_key_value_heads=3, head_dim=32,
                  rotary_dim=None, intermediate_size=40, num_local_experts=8, num_experts_per_tok=3, use_cache=True),
    # one key/value head per query head (no GQA copies: eager's k^T is a view of the rotated k)
    "mha": dict(STEP_BASE, num_key_value_heads=4, rotary_dim=16),
}


def _stepped(name):
    return {k: v for k, v in STEPPED[name].items() if v is not None}




@pytest.mark.live
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("name", sorted(STEPPED))
def test_saved_activations_and_peak_are_what_a_cpu_step_measures(torch, transformers, peft, name, method, precision,
                                                                 attention):
    """What autograd holds when the forward returns, and what two_cpu_steps' recorder counts, equal memmath's trace
    to the byte; the steady step's peak is within 1% (0.01% to 0.06% over, measured)."""
    from family_checks import predicted_step, two_cpu_steps

    config = _stepped(name)
    shape = mm.from_hf_config(config)
    assert shape.architecture.traced
    run = dict(precision=precision, method=method, attention=attention)
    saved, peak = predicted_step(shape, **run)
    assert held_for_backward(torch, transformers, peft, config, **run) == saved
    measured = two_cpu_steps(torch, transformers, peft, config, **run)
    assert measured["saved_bytes"] == saved
    assert abs(peak / measured["peak_step2_bytes"] - 1) < 0.01


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("targets", [("router",), ("experts",), "all"], ids=str)
@pytest.mark.parametrize("name", ["moe", "mha"])
def test_lora_on_the_router_and_experts_is_held_as_traced(torch, transformers, peft, name, targets, precision):
    """peft's ParamWrapper on the router's weight (in the model's dtype) and on the routed experts, and all-linear:
    what autograd holds equals the trace to the byte (measured after the trace was written, held out)."""
    from memmath.hf_activations import activation_parts
    from memmath.recipes import get_recipe

    config = _stepped(name)
    modules = "all-linear" if targets == "all" else MINIMAX_TARGETS[targets]
    held = held_for_backward(torch, transformers, peft, config, precision=precision, method="lora",
                              attention="sdpa", targets=modules)
    parts = activation_parts(mm.from_hf_config(config), recipe=get_recipe(precision),
                             method=mm.LoRA(rank=4, targets=targets), seq_len=64, batch_size=2, dropout=False,
                             attention="sdpa", checkpointing=False, device="cpu")
    assert held == parts.estimate.total


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("name", sorted(STEPPED))
def test_a_checkpointed_step_peaks_within_five_percent(torch, transformers, peft, name, method, precision):
    """With gradient checkpointing (transformers' non-reentrant default) the recomputed block's backward is peak.py's
    working set: within 5% (measured 0.7% to 4.1% under), as the other families' checkpointed steps. wider's LoRA
    steps (top-3 routing) were 7.5% (fp32) and 12.5% (bf16) under the measured peaks while peak.py priced the
    recomputed block's MLP gradients at t x intermediate_size; with the MoE block's backward priced at its experts'
    moments (_moe.backward_phase) fp32 is -2.9%, bf16 still -7.7%."""
    from family_checks import two_cpu_steps

    if (name, method, precision) == ("wider", "lora", "bf16"):
        pytest.xfail("7.7% under the measured peak: MiniMax-M2's bf16 top-3 MoE backward holds more than "
                     "_moe.backward_phase prices (so a checkpointed run gets a floor: test_a_checkpointed_run_...)")
    config = _stepped(name)
    measured = two_cpu_steps(torch, transformers, peft, config, precision=precision, method=method, attention="sdpa",
                             checkpointing=True)
    peak = mm.peak_memory(mm.from_hf_config(config), precision=precision, optimizer="adamw",
                          activations="transformers", method=mm.Full() if method == "full" else
                          mm.LoRA(rank=4, targets=("q", "v")), seq_len=64, batch_size=2, dropout=False,
                          attention="sdpa", checkpointing=True, device="cpu")
    assert abs(peak.total / measured["peak_step2_bytes"] - 1) < 0.05, peak.total / measured["peak_step2_bytes"] - 1


def test_a_checkpointed_run_gets_a_floor_naming_the_measured_gap():
    # the step above that peaked 8.3% over the prediction (1 / (1 - 0.077) - 1): no verdict on a checkpointed run
    need = mm.requirement("minimax-m2", method=mm.LoRA(), seq_len=2048, checkpointing=True)
    assert need.basis == "floor" and "8.3%" in need.reason
    assert mm.requirement("minimax-m2", method=mm.LoRA(), seq_len=2048).basis == "peak"


# ---- 6. a prefill's working set ---------------------------------------------------------------------------------
PREFILL_BASE = dict(model_type="minimax_m2", hidden_size=256, num_hidden_layers=2, num_attention_heads=8,
                    vocab_size=32000, num_key_value_heads=2, head_dim=32, rotary_dim=16, intermediate_size=128,
                    num_local_experts=8, num_experts_per_tok=2, pad_token_id=0, bos_token_id=1, eos_token_id=2)
PREFILLED = {  # name: (changes, attention, s, b)
    # written against: the rotary decoder's phases with GLM-4.5's partial rotary, SDPA copy and eager MQA view
    # (architectures/glm4_moe.py), the q/k norms over all heads before k and v are projected
    "moe": ({}, "sdpa", 256, 1), "moe-eager": ({}, "eager", 256, 1), "moe-longer": ({}, "sdpa", 512, 2),
    "wide-heads": (dict(num_attention_heads=16, head_dim=64, intermediate_size=64, num_experts_per_tok=1), "sdpa",
                   384, 3),
    "mha-full-rotary": (dict(num_key_value_heads=8, head_dim=64, rotary_dim=None), "sdpa", 256, 1),
    "mqa-eager": (dict(num_key_value_heads=1, head_dim=96, num_local_experts=4, num_experts_per_tok=1,
                       intermediate_size=64), "eager", 48, 1),
    # held out, measured after; mha-eager found the eager probabilities the decoder layer holds through the MoE
    # block (its peak the experts' unsort), the cases after it were measured against that
    "gqa-eager": (dict(num_attention_heads=12, num_key_value_heads=4, head_dim=48, rotary_dim=24), "eager", 200, 2),
    "norm-heavy": (dict(hidden_size=64, num_attention_heads=32, head_dim=64, num_key_value_heads=2,
                        intermediate_size=16, num_local_experts=2, num_experts_per_tok=1), "sdpa", 128, 2),
    "many-experts": (dict(num_local_experts=64, num_experts_per_tok=8, intermediate_size=32), "sdpa", 256, 2),
    "mqa-sdpa": (dict(num_key_value_heads=1, head_dim=96, rotary_dim=32, num_local_experts=4, num_experts_per_tok=1,
                      intermediate_size=64), "sdpa", 160, 3),
    "mha-eager": (dict(num_key_value_heads=8, head_dim=64, rotary_dim=32), "eager", 64, 2),
    "mha-eager-2": (dict(num_attention_heads=6, num_key_value_heads=6, head_dim=48, rotary_dim=16,
                         intermediate_size=96), "eager", 96, 3),
    "mha-eager-3": (dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=4, head_dim=32, rotary_dim=None,
                         num_local_experts=16, num_experts_per_tok=4), "eager", 160, 1),
    "gqa-eager-moe": (dict(num_local_experts=16, num_experts_per_tok=4, intermediate_size=128), "eager", 96, 2),
    "mqa-eager-moe": (dict(num_key_value_heads=1, num_experts_per_tok=3), "eager", 80, 3),
}


@pytest.mark.live
@pytest.mark.parametrize("name", list(PREFILLED))
def test_prefill_working_set_is_what_a_cpu_prefill_measures(torch, transformers, name):
    """One prefill (bf16, logits_to_keep=1, as generate runs it), every storage counted as validation/
    inference_working_set.py counts it: the peak less the cache is memmath's working set to the byte."""
    from family_checks import prefill_model, prefill_working_set

    changes, attention, seq_len, batch = PREFILLED[name]
    fields = {k: v for k, v in dict(PREFILL_BASE, **changes).items() if v is not None}
    model, weights = prefill_model(torch, transformers, fields, attention)
    measured, predicted = prefill_working_set(torch, model, weights, fields, attention, seq_len, batch)
    assert predicted == measured
