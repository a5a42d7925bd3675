"""Gemma 4's mixture-of-experts block (enable_moe_block) in memmath's activation trace against what autograd keeps.

Gemma4TextDecoderLayer runs, beside the dense MLP, a router on the block's residual and routed experts (transformers
5.24's default grouped_mm experts), each with norms of their own (architectures/gemma4_text.py moe_step and router).
Held in: the trace of that block was written against these small configs, each compared to the byte with what
torch.autograd.graph.saved_tensors_hooks sees a first forward keep (family_checks.held_for_backward: b 2, s 64, fp32
and bf16, full and LoRA r 4 on q and v, SDPA and eager). Held out: configs, settings and step peaks measured only
after the trace was committed (section 3)."""

from __future__ import annotations

import pytest

import memmath as mm
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


# ---- 2. held in: what autograd keeps, to the byte -----------------------------------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("method, precision, attention", SETTINGS)
@pytest.mark.parametrize("name", sorted(HELD_IN))
def test_saved_activations_are_what_autograd_keeps(torch, transformers, peft, name, method, precision, attention):
    config = HELD_IN[name]
    run = dict(method=method, precision=precision, attention=attention)
    assert held_for_backward(torch, transformers, peft, config, **run) == _saved(config, **run)
