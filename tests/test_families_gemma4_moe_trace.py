"""Gemma 4's mixture-of-experts block (enable_moe_block) in memmath's activation trace against what autograd keeps.

Gemma4TextDecoderLayer runs, beside the dense MLP, a router on the block's residual and routed experts (transformers
5.24's default grouped_mm experts), each with norms of their own (architectures/gemma4_text.py moe_step and router).
Held in: the trace of that block was written against these small configs, each compared to the byte with what
torch.autograd.graph.saved_tensors_hooks sees a first forward keep (family_checks.held_for_backward: b 2, s 64, fp32
and bf16, full and LoRA r 4 on q and v, SDPA and eager). Held out: configs, settings and step peaks measured only
after the trace was committed (section 3)."""

from __future__ import annotations

import json

import pytest

import memmath as mm
from memmath import cli
from family_checks import held_for_backward
from memmath.architectures import ARCHITECTURES
from memmath.decision import unchecked_type
from memmath.hf_activations import activation_parts, traces
from memmath.recipes import get_recipe

S, F = "sliding_attention", "full_attention"
# test_families_gemma4_trace.py's base (two sliding blocks at head_dim 16, two full ones at global_head_dim 32,
# hidden 80) with six experts of width 24, two a token. torch 2.13's CPU grouped_mm wants 16-byte strides in bf16,
# so an expert's width is a multiple of 8 (down_proj's rows).
BASE = dict(model_type="gemma4_text", hidden_size=80, intermediate_size=96, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32, vocab_size=512,
            hidden_size_per_layer_input=0, layer_types=[S, F, S, F], sliding_window=128, use_cache=False)
MOE = dict(enable_moe_block=True, num_experts=6, top_k_experts=2, moe_intermediate_size=24)
HELD_IN = {
    "moe": dict(BASE, **MOE),
    # three experts a token beside per-layer inputs 12 wide, k_eq_v full blocks, past a 32-token window, the cache on
    "moe-per-layer-inputs-k-eq-v-window": dict(BASE, **dict(MOE, top_k_experts=3), hidden_size_per_layer_input=12,
                                               vocab_size_per_layer_input=512, attention_k_eq_v=True,
                                               num_global_key_value_heads=1, sliding_window=32, use_cache=True),
    # the last three blocks sharing keys and values with double-wide MLPs, softcapped logits and an untied head
    "moe-shared-kv-double-mlp": dict(BASE, **MOE, num_hidden_layers=6, layer_types=[S, F, S, S, S, F],
                                     num_kv_shared_layers=3, use_double_wide_mlp=True, hidden_size_per_layer_input=8,
                                     vocab_size_per_layer_input=512, use_cache=True, sliding_window=32,
                                     final_logit_softcapping=30.0, tie_word_embeddings=False),
}
SETTINGS = [(method, precision, attention) for method in ("full", "lora") for precision in ("fp32", "bf16")
            for attention in ("sdpa", "eager")]


def _saved(config, *, method, precision, attention, checkpointing=False):
    lora = mm.LoRA(rank=4, targets=("q", "v"))
    return activation_parts(mm.from_hf_config(config), recipe=get_recipe(precision),
                            method=mm.Full() if method == "full" else lora, seq_len=64, batch_size=2, dropout=False,
                            attention=attention, checkpointing=checkpointing, device="cpu").estimate.total


# ---- 1. the MoE block is traced -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(HELD_IN))
def test_a_moe_config_is_traced_and_gets_a_verdict(name):
    shape = mm.from_hf_config(HELD_IN[name])
    assert shape.n_experts == 6 and ARCHITECTURES["gemma4_text"].trace_refusal(shape) == ""
    assert traces(shape, mm.Full(), get_recipe("bf16"), 64) is None
    run = mm.Run(shape, seq_len=64, batch_size=2, precision="bf16", optimizer="adamw")
    assert run.activations == "transformers" and unchecked_type(run) is None


def test_the_lora_note_names_each_adapted_module_once():
    # the full blocks' q_proj has other widths (global_head_dim 32) than the sliding blocks' (head_dim 16): one name
    memory = mm.training_memory(mm.from_hf_config(HELD_IN["moe"]), method=mm.LoRA(rank=4, targets=("q", "v")), seq_len=64)
    note = next(str(n) for n in memory.notes if n.kind == "lora_moe_tensors")
    assert note.count("q_proj") == 1 and note.count("v_proj") == 1, note


def test_the_moe_block_saves_what_a_hand_count_says():
    # LoRA r 4 on q and v in bf16 (the block's norms, router and experts need input gradients only), b 2 x s 64:
    # t = 128 tokens, h 80, E 6 experts, k 2 a token (S = 256 rows), I 24. Per block, beside the dense block:
    # - post_feedforward_layernorm_1, pre_feedforward_layernorm_2, post_feedforward_layernorm_2 (Gemma4RMSNorm):
    #   the fp32 input (t h 4 = 40,960), the mean of squares and its pow (t 4 each = 512 + 512) and weight.float()
    #   (h 4 = 320): 42,304 each, 126,912 for the three;
    # - router.norm (no scale): 40,960 + 512 + 512 = 41,984; proj and scale are frozen: nothing more;
    # - softmax's fp32 output t E 4 = 3,072, topk's int64 indices S 8 = 2,048, the in-place division's sum t 4 = 512
    #   and its copy of the weights S 4 = 1,024, per_expert_scale gathered (bf16) S 2 = 512: 7,168;
    # - grouped_mm experts: the token indices and the sort permutation (S 8 each = 4,096), the int32 offsets (E 4 =
    #   24), gate_up's output (S 2I 2 = 24,576, gelu_pytorch_tanh's input and the up factor), the gelu output (S I 2 =
    #   12,288), down's output (S h 2 = 40,960) and the sorted fp32 weights (S 4 = 1,024) for the routing product,
    #   the inverse permutation (S 8 = 2,048): 85,016.
    # 126,912 + 41,984 + 7,168 + 85,016 = 261,080 a block, four blocks.
    run = dict(method="lora", precision="bf16", attention="sdpa")
    assert _saved(HELD_IN["moe"], **run) - _saved(BASE, **run) == 4 * 261_080


# google/gemma-4-26B-A4B-it's config.json text_config (its model card: 25.2B parameters, 3.8B active), the values that
# differ from Gemma4TextConfig's defaults copied: 30 blocks (every sixth full), hidden 2816, 16 heads, 8 key/value heads
# (2 in the full blocks, k_eq_v), head_dim 256 and 512, a dense MLP 2112 wide beside 128 experts 704 wide, 8 a token, a
# 1024-token window, softcapped logits, no per-layer inputs.
GEMMA4_26B_A4B = {"model_type": "gemma4_text", "num_hidden_layers": 30, "hidden_size": 2816, "num_attention_heads": 16,
                  "num_key_value_heads": 8, "num_global_key_value_heads": 2, "head_dim": 256, "global_head_dim": 512,
                  "intermediate_size": 2112, "enable_moe_block": True, "num_experts": 128, "top_k_experts": 8,
                  "moe_intermediate_size": 704, "vocab_size": 262144, "sliding_window": 1024,
                  "final_logit_softcapping": 30.0, "attention_k_eq_v": True, "hidden_size_per_layer_input": 0,
                  "tie_word_embeddings": True}


@pytest.mark.live
def test_the_full_size_moe_model_is_built_as_transformers_builds_it(torch, transformers):
    from family_checks import assert_built_like_transformers, built_model

    _, model = built_model(torch, transformers, GEMMA4_26B_A4B)
    assert_built_like_transformers(torch, model, GEMMA4_26B_A4B)


# full finetuning in pure bf16 with AdamW holds 8 bytes a parameter before any activation, 202 GB: no H100 holds it (the
# command exits 1); LoRA's frozen bf16 base is 50.5 GB
@pytest.mark.parametrize("method, status, verdict", [("full", 1, "does not fit"), ("lora", 0, "fits, with")])
def test_the_command_line_gives_the_full_size_moe_model_a_verdict(tmp_path, capsys, method, status, verdict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA4_26B_A4B))
    assert cli.main(["train", str(path), "--method", method, "--gpu", "H100"]) == status
    out = capsys.readouterr().out
    # transformers 5.24 on the meta device counts 25,233,141,760 parameters (the card's 25.2B)
    assert "25,233,141,760" in out and "activations: transformers model" in out
    assert verdict in out and "not checked against PyTorch" not in out


# ---- 2. held in: what autograd keeps, to the byte -----------------------------------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("method, precision, attention", SETTINGS)
@pytest.mark.parametrize("name", sorted(HELD_IN))
def test_saved_activations_are_what_autograd_keeps(torch, transformers, peft, name, method, precision, attention):
    config = HELD_IN[name]
    run = dict(method=method, precision=precision, attention=attention)
    assert held_for_backward(torch, transformers, peft, config, **run) == _saved(config, **run)


# ---- 3. held out: measured after the trace was committed ---------------------------------------------------------
HELD_OUT = {  # each measured in the eight settings below after the trace was committed: every saved byte matched
    # other widths, five blocks (test_families_gemma4_trace.py's "wider"), the cache on, eight experts, three a token
    "moe-wider": dict(BASE, hidden_size=96, num_attention_heads=6, num_key_value_heads=3, head_dim=24,
                      global_head_dim=48, intermediate_size=64, num_hidden_layers=5, layer_types=[S, S, F, S, F],
                      use_cache=True, enable_moe_block=True, num_experts=8, top_k_experts=3, moe_intermediate_size=32),
    # one expert a token (the top-k sum and its division over one value), one key/value head, k_eq_v full blocks at
    # two, past a 48-token window, softcapped logits
    "moe-top1-mqa-keqv": dict(BASE, num_key_value_heads=1, attention_k_eq_v=True, num_global_key_value_heads=2,
                              sliding_window=48, final_logit_softcapping=30.0, enable_moe_block=True, num_experts=4,
                              top_k_experts=1, moe_intermediate_size=16),
    # sixteen narrow experts, four a token, beside three blocks sharing keys and values (double-wide MLPs), per-layer
    # inputs 16 wide, the cache, past a 40-token window
    "moe-16-experts-shared-kv": dict(BASE, hidden_size=88, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                                     global_head_dim=64, num_hidden_layers=7, layer_types=[S, S, F, S, S, F, F],
                                     num_kv_shared_layers=3, use_double_wide_mlp=True, hidden_size_per_layer_input=16,
                                     vocab_size_per_layer_input=640, use_cache=True, sliding_window=40,
                                     intermediate_size=72, enable_moe_block=True, num_experts=16, top_k_experts=4,
                                     moe_intermediate_size=8),
}
# Step peaks of those runs (two AdamW steps, the second with the optimizer states): SDPA within 0.02% over; eager on
# "moe-wider" 0.8% to 2.6% under (as the dense "wider" of test_families_gemma4_trace.py: its sliding store block's k
# and v, held by shared_kv_states beside eager's copies, are not priced in the forward's moments), on the other two
# within 0.02%.
EAGER_UNDER = {"moe-wider"}


@pytest.mark.live
@pytest.mark.parametrize("method, precision, attention", SETTINGS)
@pytest.mark.parametrize("name", sorted(HELD_OUT))
def test_held_out_steps_save_what_the_trace_says_and_peak_within_three_percent(torch, transformers, peft, name, method,
                                                                              precision, attention):
    from family_checks import predicted_step, two_cpu_steps

    config = HELD_OUT[name]
    run = dict(method=method, precision=precision, attention=attention)
    saved, peak = predicted_step(mm.from_hf_config(config), **run)
    assert held_for_backward(torch, transformers, peft, config, **run) == saved
    measured = two_cpu_steps(torch, transformers, peft, config, **run)
    assert measured["saved_bytes"] == saved
    tolerance = 0.03 if attention == "eager" and name in EAGER_UNDER else 0.001
    assert abs(peak / measured["peak_step2_bytes"] - 1) < tolerance


NAMED = ("q", "k", "v", "o", "gate", "up", "down")  # every target memmath counts on Gemma 4 (not router or experts)
PEFT_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.mark.live
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("name", sorted(HELD_OUT))
def test_held_out_lora_on_every_named_target_saves_what_the_trace_says(torch, transformers, peft, name, precision,
                                                                       attention):
    # measured after the trace was committed: the dense MLP's adapted down_proj feeds post_feedforward_layernorm_1
    config = HELD_OUT[name]
    ours = activation_parts(mm.from_hf_config(config), recipe=get_recipe(precision), method=mm.LoRA(rank=4,
                            targets=NAMED), seq_len=64, batch_size=2, dropout=False, attention=attention,
                            checkpointing=False, device="cpu").estimate.total
    assert held_for_backward(torch, transformers, peft, config, method="lora", precision=precision,
                             attention=attention, targets=PEFT_NAMES) == ours


# Checkpointed steps (transformers' non-reentrant default), measured after the trace was committed: full training
# 2.7% under to 2.7% over, LoRA 5.7% under to 2.4% over; gemma4_text's checkpointed_peak_refusal keeps these runs
# without a verdict (the store blocks' shared_kv_states, as in test_families_gemma4_trace.py).
CHECKPOINTED = {"moe": HELD_IN["moe"], **HELD_OUT}
CHECKPOINTED_OFF = {("moe-top1-mqa-keqv", "lora", "bf16"): -0.0571}  # (name, method, precision): predicted / measured - 1


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("name", sorted(CHECKPOINTED))
def test_a_checkpointed_step_peaks_within_five_percent(torch, transformers, peft, name, method, precision):
    from family_checks import predicted_step, two_cpu_steps

    if (name, method, precision) in CHECKPOINTED_OFF:
        pytest.xfail(f"{CHECKPOINTED_OFF[name, method, precision]:+.1%} against the measured peak: the store blocks' "
                     "recomputed graph is not priced at the moment this step peaks")
    config = CHECKPOINTED[name]
    run = dict(method=method, precision=precision, attention="sdpa", checkpointing=True)
    _, peak = predicted_step(mm.from_hf_config(config), **run)
    measured = two_cpu_steps(torch, transformers, peft, config, **run)
    assert abs(peak / measured["peak_step2_bytes"] - 1) < 0.05, peak / measured["peak_step2_bytes"] - 1
