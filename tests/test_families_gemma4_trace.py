"""Gemma 4's language model (model_type gemma4_text): memmath's activation trace against what autograd keeps.

Held in: the trace (architectures/gemma4_text.py block and rms_norm) was written against these small configs, each
compared to the byte with what torch.autograd.graph.saved_tensors_hooks sees a first forward keep (family_checks.
held_for_backward: b 2, s 64, fp32 and bf16, full and LoRA r 4 on q and v, SDPA and eager). Held out: configs,
settings and step peaks measured only after the trace was committed (section 3).

The options the trace has no steps for (keys and values shared without per-layer inputs, which transformers 5.24
cannot run, or from the first block) are refused by name: those runs keep the textbook model and no fits verdict, as
an untraced type's. The MoE block (enable_moe_block) is traced: test_families_gemma4_moe_trace.py."""

from __future__ import annotations

import pytest

import memmath as mm
from family_checks import held_for_backward
from memmath.architectures import ARCHITECTURES
from memmath.decision import refusal as verdict_refusal
from memmath.decision import unchecked_type
from memmath.hf_activations import activation_parts, traces
from memmath.recipes import get_recipe

S, F = "sliding_attention", "full_attention"
# Two sliding blocks at head_dim 16 and two full blocks at global_head_dim 32 (their own block layout), no per-layer
# input embeddings; the hidden size (80) differs from every other width so that no two kinds of tensor match in size.
BASE = dict(model_type="gemma4_text", hidden_size=80, intermediate_size=96, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32, vocab_size=512,
            hidden_size_per_layer_input=0, layer_types=[S, F, S, F], sliding_window=128, use_cache=False)
HELD_IN = {
    "base": BASE,
    # full blocks without v_proj: their values are the k_proj output, v_norm'ed apart from k_norm
    "k-eq-v": dict(BASE, attention_k_eq_v=True, num_global_key_value_heads=1),
    # past the sliding window (32 < 64 tokens): the sliding blocks' SDPA calls get a mask and k/v repeated to every
    # head at their own head size, with the training DynamicCache on; softcapped logits and an untied head
    "window-cache-softcap": dict(BASE, sliding_window=32, use_cache=True, final_logit_softcapping=30.0,
                                 tie_word_embeddings=False),
    # per-layer input embeddings (4 layers x 8 wide): their projection and norm outside the blocks, the gate, the
    # product with a view of per_layer_inputs (its one storage kept for every block) and the projection back
    "per-layer-inputs": dict(BASE, hidden_size_per_layer_input=8, vocab_size_per_layer_input=600),
    "per-layer-inputs-k-eq-v-window": dict(BASE, hidden_size_per_layer_input=24, vocab_size_per_layer_input=512,
                                           attention_k_eq_v=True, num_global_key_value_heads=1, sliding_window=32,
                                           use_cache=True),
    # the last blocks reading the keys and values of the last earlier block of their type (num_kv_shared_layers),
    # with per-layer inputs (transformers' forward needs them there): double-wide MLPs, the cache, past the window
    "shared-kv-double-mlp-window": dict(BASE, num_hidden_layers=6, layer_types=[S, F, S, S, S, F],
                                        num_kv_shared_layers=3, use_double_wide_mlp=True,
                                        hidden_size_per_layer_input=8, vocab_size_per_layer_input=512,
                                        use_cache=True, sliding_window=32),
    "shared-kv-k-eq-v": dict(BASE, num_hidden_layers=6, layer_types=[S, F, S, F, S, F], num_kv_shared_layers=2,
                             attention_k_eq_v=True, num_global_key_value_heads=1, hidden_size_per_layer_input=8,
                             vocab_size_per_layer_input=512),
}
SETTINGS = [(method, precision, attention) for method in ("full", "lora") for precision in ("fp32", "bf16")
            for attention in ("sdpa", "eager")]


def _saved(config, *, method, precision, attention, checkpointing=False, targets=("q", "v")):
    lora = mm.LoRA(rank=4, targets=targets)
    return activation_parts(mm.from_hf_config(config), recipe=get_recipe(precision),
                            method=mm.Full() if method == "full" else lora, seq_len=64, batch_size=2, dropout=False,
                            attention=attention, checkpointing=checkpointing, device="cpu").estimate.total


# ---- 1. what the trace replays, and what it refuses by name -------------------------------------------------------
def test_a_config_without_the_untraced_options_is_traced():
    shape = mm.from_hf_config(BASE)
    assert ARCHITECTURES["gemma4_text"].traced and ARCHITECTURES["gemma4_text"].trace_refusal(shape) == ""
    assert traces(shape, mm.Full(), get_recipe("bf16"), 64) is None
    run = mm.Run(shape, seq_len=64, batch_size=2, precision="bf16", optimizer="adamw")
    assert run.activations == "transformers" and unchecked_type(run) is None


@pytest.mark.parametrize("changes, named", [
    # Gemma4TextModel._maybe_slice_kv_shared_inputs slices per_layer_inputs, None without them: a TypeError
    (dict(num_kv_shared_layers=2), "sharing keys and values without per-layer inputs"),
    # block 0 stores the sliding blocks' keys and values: under LoRA its k needs no gradient, which the trace of a
    # shared block does not see
    (dict(num_kv_shared_layers=2, hidden_size_per_layer_input=8, vocab_size_per_layer_input=512),
     "keys and values of the first block"),
])
def test_an_option_the_trace_has_no_steps_for_is_refused_and_keeps_the_floor(changes, named):
    shape = mm.from_hf_config(dict(BASE, **changes))
    why = traces(shape, mm.Full(), get_recipe("bf16"), 64)
    assert why is not None and named in why
    with pytest.raises(ValueError, match=named):
        _saved(dict(BASE, **changes), method="full", precision="bf16", attention="sdpa")
    # the run falls back to the textbook model and, like an untraced type's, gets no fits verdict
    run = mm.Run(shape, seq_len=64, batch_size=2, precision="bf16", optimizer="adamw")
    assert run.activations == "textbook" and unchecked_type(run) == "gemma4_text"
    assert named in verdict_refusal(run) and "not checked against PyTorch" in verdict_refusal(run)


def test_each_layer_type_has_its_rotary_tables_at_its_own_head_size():
    # Gemma4TextRotaryEmbedding: one cos/sin pair per layer type, the full type's at global_head_dim (proportional
    # RoPE returns head_dim-wide tables; modeling_rope_utils.py)
    record = ARCHITECTURES["gemma4_text"]
    assert record.rotary_widths(mm.from_hf_config(BASE)) == {S: 16, F: 32}
    # by hand, fp32 at b 2, s 64, full training: both pairs, 2 x 64 x (16 + 32) x 4 B = 24,576 B beside the blocks
    terms = activation_parts(mm.from_hf_config(BASE), recipe=get_recipe("fp32"), method=mm.Full(), seq_len=64,
                             batch_size=2, dropout=False, attention="sdpa", checkpointing=False,
                             device="cpu").estimate.terms
    rope = sum(n for where, what, n in terms if where == "outside" and "rotary" in what)
    assert rope == 2 * 64 * (16 + 32) * 4


# ---- 2. held in: what autograd keeps, to the byte -----------------------------------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("method, precision, attention", SETTINGS)
@pytest.mark.parametrize("name", sorted(HELD_IN))
def test_saved_activations_are_what_autograd_keeps(torch, transformers, peft, name, method, precision, attention):
    config = HELD_IN[name]
    run = dict(method=method, precision=precision, attention=attention)
    assert held_for_backward(torch, transformers, peft, config, **run) == _saved(config, **run)


@pytest.mark.live
@pytest.mark.parametrize("changes", [{}, dict(num_kv_shared_layers=2), dict(attention_k_eq_v=True)], ids=str)
def test_the_store_blocks_are_transformers_own(transformers, changes):
    # Gemma4TextConfig.kv_sharing_modes: the last block of each layer type before the shared ones is "store", even
    # when no block shares (its k and v go into shared_kv_states, which the trace holds as such)
    config = dict(BASE, **changes)
    hf = transformers.AutoConfig.for_model("gemma4_text", **{k: v for k, v in config.items() if k != "model_type"})
    kinds = {i: layout.block_kind for layout, blocks in mm.from_hf_config(config).layouts() for i in blocks}
    stores = [i for i in range(4) if kinds[i].endswith("store")]
    assert stores == [i for i, mode in enumerate(hf.kv_sharing_modes) if mode == "store"]


# ---- 3. held out: measured after the trace was committed ---------------------------------------------------------
HELD_OUT = {  # each measured in the eight settings below after the trace was committed: every saved byte matched
    # other widths, five blocks (two of each type before the last), the training DynamicCache on
    "wider": dict(BASE, hidden_size=96, num_attention_heads=6, num_key_value_heads=3, head_dim=24, global_head_dim=48,
                  intermediate_size=64, num_hidden_layers=5, layer_types=[S, S, F, S, F], use_cache=True),
    # one key/value head in the sliding blocks, k_eq_v full blocks at two, past a 48-token window, softcapped logits
    "mqa-keqv-window": dict(BASE, num_key_value_heads=1, attention_k_eq_v=True, num_global_key_value_heads=2,
                            sliding_window=48, final_logit_softcapping=30.0),
    # per-layer inputs 16 wide at other widths, five blocks, past a 40-token window, the training DynamicCache on
    "per-layer-inputs-held": dict(BASE, hidden_size=96, num_attention_heads=6, num_key_value_heads=2, head_dim=16,
                                  global_head_dim=32, hidden_size_per_layer_input=16, vocab_size_per_layer_input=700,
                                  num_hidden_layers=5, layer_types=[S, F, S, S, F], use_cache=True,
                                  sliding_window=40, intermediate_size=72),
    # three blocks sharing keys and values (one sliding, two full) with double-wide MLPs, one key/value head, per-layer
    # inputs 12 wide, the cache, past a 48-token window, softcapped logits
    "shared-kv-held": dict(BASE, hidden_size=88, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                           global_head_dim=64, num_hidden_layers=7, layer_types=[S, S, F, S, S, F, F],
                           num_kv_shared_layers=3, use_double_wide_mlp=True, hidden_size_per_layer_input=12,
                           vocab_size_per_layer_input=640, use_cache=True, sliding_window=48, intermediate_size=80,
                           final_logit_softcapping=30.0),
}
# Step peaks of those runs (two AdamW steps, the second with the optimizer states): SDPA within 0.01-0.02% over;
# eager on "wider" 1.2% to 3.7% under (its sliding store block's k and v, held by shared_kv_states to the forward's
# end beside eager's copies, are not priced in the forward's moments), on "mqa-keqv-window" within 0.02%, on
# "per-layer-inputs-held" 0.15% and 0.24% under with LoRA, on "shared-kv-held" within 0.01%.
EAGER_UNDER = {"wider"}


@pytest.mark.live
@pytest.mark.parametrize("method, precision, attention", SETTINGS)
@pytest.mark.parametrize("name", sorted(HELD_OUT))
def test_held_out_steps_save_what_the_trace_says_and_peak_within_five_percent(torch, transformers, peft, name, method,
                                                                             precision, attention):
    from family_checks import predicted_step, two_cpu_steps

    config = HELD_OUT[name]
    run = dict(method=method, precision=precision, attention=attention)
    saved, peak = predicted_step(mm.from_hf_config(config), **run)
    assert held_for_backward(torch, transformers, peft, config, **run) == saved
    measured = two_cpu_steps(torch, transformers, peft, config, **run)
    assert measured["saved_bytes"] == saved
    tolerance = 0.05 if attention == "eager" and name in EAGER_UNDER else 0.01
    assert abs(peak / measured["peak_step2_bytes"] - 1) < tolerance


# Checkpointed steps (transformers' non-reentrant default). Measured on base, wider and mqa-keqv-window first: 11% to
# 24% under, which found the store blocks' shared_kv_states (gemma4_text.stored); so those three are held in for the
# checkpointed model, and fresh and fresh-keqv were measured after it was committed (held out). Full training: 1.8% to
# 5.2% under. LoRA: 2.1% to 9.4% under (per-layer-inputs-held, measured after the per-layer inputs were committed:
# full 3.3% and 3.7% under, LoRA 5.4% and 7.6%; shared-kv-held, after the shared blocks were committed: full 3.1%
# and 3.5% under, LoRA 4.6% and 2.5% over). Then, written against base, wider and fresh: every store block above a
# recomputed block holds its recomputed graph and its input (not one per layout), a block's backward is as wide as
# Gemma4RMSNorm's fp32 backward (record.norm_backward_widths), and every checkpoint holds the rotary cos and sin,
# the position ids and the CPU RNG state (checkpoint_held_arguments). After: held in 0.3% to 3.1% over; held out
# (mqa-keqv-window, per-layer-inputs-held, shared-kv-held, fresh-keqv) 2.0% under (per-layer-inputs-held's LoRA
# fp32 step) to 6.9% over (shared-kv-held's LoRA steps, at the loss, over before too): still refused.
CHECKPOINTED = {"base": BASE, **HELD_OUT,
                "fresh": dict(BASE, hidden_size=112, num_attention_heads=8, num_key_value_heads=4, head_dim=8,
                              global_head_dim=24, intermediate_size=160, num_hidden_layers=6,
                              layer_types=[S, S, F, S, S, F]),
                "fresh-keqv": dict(BASE, hidden_size=72, num_attention_heads=3, num_key_value_heads=3, head_dim=24,
                                   global_head_dim=48, attention_k_eq_v=True, num_global_key_value_heads=1,
                                   num_hidden_layers=3, layer_types=[S, S, F], intermediate_size=56, use_cache=True)}
CHECKPOINTED_OFF = {  # (name, method, precision): measured, predicted / measured - 1 (outside 5%)
    ("shared-kv-held", "lora", "fp32"): 0.0691, ("shared-kv-held", "lora", "bf16"): 0.0508,
}


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("name", sorted(CHECKPOINTED))
def test_a_checkpointed_step_peaks_within_five_percent(torch, transformers, peft, name, method, precision):
    from family_checks import predicted_step, two_cpu_steps

    if (name, method, precision) in CHECKPOINTED_OFF:
        pytest.xfail(f"{CHECKPOINTED_OFF[name, method, precision]:+.1%} against the measured peak: this step peaks at "
                     "the loss, where the checkpointed moments price more than it holds")
    config = CHECKPOINTED[name]
    run = dict(method=method, precision=precision, attention="sdpa", checkpointing=True)
    _, peak = predicted_step(mm.from_hf_config(config), **run)
    measured = two_cpu_steps(torch, transformers, peft, config, **run)
    assert abs(peak / measured["peak_step2_bytes"] - 1) < 0.05, peak / measured["peak_step2_bytes"] - 1
