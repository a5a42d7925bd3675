"""Llama 4's text model's (model_type llama4_text) saved activations against PyTorch itself: what autograd holds when
the first forward pass of small models built by transformers 5.24 (and peft 0.21 for LoRA) returns, counted with
torch.autograd.graph.saved_tensors_hooks (tests/family_checks.py held_for_backward), equals memmath's trace to the
byte, with SDPA and eager attention, in fp32 and bf16, full finetuning and LoRA on q and v.

Held in: the configs the trace was written against (HELD_IN), checked while writing it. Held out: the CPU steps
measured after the trace was committed (their section says what each found)."""

from __future__ import annotations

import pytest

import memmath as mm
from family_checks import held_for_backward
from memmath.hf_activations import activation_parts, traces
from memmath.recipes import get_recipe

# Small Llama 4 text configs, widths small enough for two CPU steps: mixture-of-experts blocks interleaved with
# dense ones (interleave_moe_layer_step 2, Maverick's), every fourth block NoPE (Llama4TextConfig's
# no_rope_layer_interval), the chunk (16 tokens) below the sequence (64), grouped-query attention
BASE = dict(model_type="llama4_text", vocab_size=512, hidden_size=64, intermediate_size=32, intermediate_size_mlp=96,
            num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
            num_experts_per_tok=1, attention_chunk_size=16, interleave_moe_layer_step=2, use_cache=False,
            pad_token_id=0, bos_token_id=1, eos_token_id=2)
HELD_IN = {  # the trace was written against these: each equal to the byte before it was committed
    "base": BASE,
    # Scout's layout: every block a mixture of experts, here top-2 of 4
    "every-moe-top2": dict(BASE, interleave_moe_layer_step=1, num_experts_per_tok=2),
    # no_rope_layers given (the last block rotates), the chunk past the sequence, the training DynamicCache on
    "cache-given": dict(BASE, num_hidden_layers=3, no_rope_layers=[1, 0, 1], attention_chunk_size=128,
                        use_cache=True),
    # one key/value head for every query head
    "mqa": dict(BASE, num_key_value_heads=1),
    # without the q/k L2 norm and the temperature tuning, a key/value head per query head, the cache on
    "plain": dict(BASE, use_qk_norm=False, attn_temperature_tuning=False, num_key_value_heads=4, use_cache=True),
    # attention dropout: SDPA on the CPU runs its math kernel
    "dropout": dict(BASE, attention_dropout=0.1),
}


def _parts(config, *, precision, method, attention, targets=("q", "v"), checkpointing=False):
    lora = mm.Full() if method == "full" else mm.LoRA(rank=4, targets=targets)
    return activation_parts(mm.from_hf_config(config), recipe=get_recipe(precision), method=lora, seq_len=64,
                            batch_size=2, dropout=bool(config.get("attention_dropout")), attention=attention,
                            checkpointing=checkpointing, device="cpu")


def test_llama4_text_is_traced():
    shape = mm.from_hf_config(BASE)
    assert shape.architecture.traced
    assert traces(shape, mm.Full(), get_recipe("bf16"), 64, "sdpa") is None


def test_a_rotary_block_keeps_the_complex_table_and_a_nope_block_its_temperature_scales():
    # by hand, BASE in fp32, full finetuning (b 2, s 64, 4 query and 2 key/value heads of 16):
    # Llama4TextRotaryEmbedding's freqs_cis, complex64 (1, s, d / 2): 64 x 8 values of 8 B, once for every block;
    # a NoPE block's attn_scales, fp32 (s): 64 x 4 B; the q L2 norm's fp32 input (t x a x d) and rsqrt (t x a)
    parts = _parts(BASE, precision="fp32", method="full", attention="sdpa")
    terms = {(region, what): n for region, what, n in parts.estimate.terms}
    assert terms["outside", "rotary freqs_cis (complex64, one for every block)"] == 64 * 8 * 8
    assert terms["block", "the other block layouts' blocks: what they save beyond the last block's layout "
                          "(negative: below it)"] != 0  # the rotary and dense blocks differ from the last, NoPE one
    assert terms["each block", "attention temperature scales (fp32, s)"] == 64 * 4
    # two blocks, both rotary, the last a mixture of experts
    rotary = _parts(dict(BASE, num_hidden_layers=2), precision="fp32", method="full", attention="sdpa")
    rotary_terms = {what: n for region, what, n in rotary.estimate.terms if region == "each block"}
    assert rotary_terms["q L2 norm input in fp32"] == 2 * 64 * 4 * 16 * 4
    assert rotary_terms["q L2 norm rsqrt"] == 2 * 64 * 4 * 4
    # the MoE block: every token through every expert, x.repeat(E, 1): E x t x h values (4 x 128 x 64, fp32)
    assert rotary_terms["experts' repeated input (E t x h)"] == 4 * 128 * 64 * 4


def test_lora_on_the_router_is_refused_by_name():
    # peft 0.21 wraps Llama4Router, an nn.Linear that returns a tuple, in a lora.Linear whose forward fails
    shape = mm.from_hf_config(BASE)
    for targets in (("q", "router"), "all"):
        why = traces(shape, mm.LoRA(rank=4, targets=targets), get_recipe("bf16"), 64, "sdpa")
        assert why is not None and "Llama 4 without the router" in why, targets
    with pytest.raises(ValueError, match="router"):
        _parts(BASE, precision="bf16", method="lora", attention="sdpa", targets=("q", "router"))
    # the shared expert's linears and the routed experts are traced
    for targets in (("q", "gate", "up", "down"), ("experts",)):
        assert traces(shape, mm.LoRA(rank=4, targets=targets), get_recipe("bf16"), 64, "sdpa") is None


@pytest.mark.live
def test_peft_cannot_run_lora_on_llama4_s_router(torch, transformers, peft):
    """What the refusal above rests on: peft 0.21's lora.Linear around Llama4Router fails in the forward pass."""
    hf = transformers.AutoConfig.for_model("llama4_text", **{k: v for k, v in BASE.items() if k != "model_type"})
    torch.manual_seed(0)
    model = peft.get_peft_model(transformers.AutoModelForCausalLM.from_config(hf).train(),
                                peft.LoraConfig(r=4, lora_alpha=8, target_modules=["router"]))
    ids = torch.randint(1, 512, (2, 64))
    with pytest.raises(AttributeError, match="tuple"):
        model(input_ids=ids, labels=ids)


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("name", sorted(HELD_IN))
def test_saved_activations_are_what_autograd_holds(torch, transformers, peft, name, attention, method, precision):
    """Held in: what autograd holds when the forward returns equals the trace to the byte."""
    config = HELD_IN[name]
    run = dict(precision=precision, method=method, attention=attention)
    assert held_for_backward(torch, transformers, peft, config, **run) == _parts(config, **run).estimate.total


# memmath's LoRA targets -> peft 0.21's LoraConfig arguments: the routed experts through target_parameters, gate_up_proj
# at rank 2r (memmath's convention for the fused gate and up, tests/test_families_dense.py)
EXPERTS = dict(target_parameters=["feed_forward.experts.gate_up_proj", "feed_forward.experts.down_proj"],
               rank_pattern={r".*\.gate_up_proj": 8})
LORA_TARGETS = {
    ("experts",): EXPERTS,
    ("q", "v", "experts"): dict(EXPERTS, target_modules=["q_proj", "v_proj"]),
    # the dense blocks' MLP and the MoE blocks' shared expert
    ("gate", "up", "down"): dict(target_modules=["gate_proj", "up_proj", "down_proj"]),
}


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("targets", list(LORA_TARGETS), ids=str)
@pytest.mark.parametrize("name", ["base", "every-moe-top2", "cache-given"])
def test_lora_on_the_experts_and_the_shared_expert_is_held_as_traced(torch, transformers, peft, name, targets,
                                                                     attention, precision):
    """Held in: peft's ParamWrapper on the experts' 3-D Parameters (each bmm reads W + BA), the shared expert's and
    the dense blocks' linears; with the experts alone the dense blocks after the first MoE block store too (their
    input needs a gradient), as hf_activations traces them."""
    import itertools
    import weakref

    from validation.measure import configure_torch

    configure_torch()
    config = HELD_IN[name]
    hf_config = transformers.AutoConfig.for_model("llama4_text", **{k: v for k, v in config.items()
                                                                    if k != "model_type"})
    hf_config._attn_implementation = attention
    torch.manual_seed(0)
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=dtype).train()
    model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, **LORA_TARGETS[targets]))
    excluded = {t.untyped_storage().data_ptr() for t in itertools.chain(model.parameters(), model.buffers())}
    saved = []
    ids = torch.randint(1, 512, (2, 64), generator=torch.Generator().manual_seed(1))
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(weakref.ref(t)) or t, lambda t: t):
        output = model(input_ids=ids, labels=ids.clone())
        held = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in (ref() for ref in saved)
                if t is not None and t.untyped_storage().data_ptr() not in excluded}
    del output
    run = dict(precision=precision, method="lora", attention=attention, targets=targets)
    assert sum(held.values()) == _parts(config, **run).estimate.total


# ---- held out: CPU steps measured after the trace was committed -------------------------------------------------
# Two AdamW steps (tests/family_checks.py two_cpu_steps: b 2, s 64), SDPA and eager, full and LoRA r 4 on q and v,
# fp32 and bf16, checkpointing off and on. The trace changed once after measuring them: Llama4TextExperts' local
# gate_up lives until the experts return (found in the checkpointed steps' forward, which saves nothing and peaked
# at the second bmm 7.4% above the trace, maverick-like LoRA bf16; 3.4% after); every step below was measured
# again after it: no saved byte and no step's peak moved (each peaks in backward).
HELD_OUT = {
    "base": BASE,  # its saved activations were held in; its step peaks were not
    # Scout's layout wider: every block a mixture of 8 experts of 48 (h 96), 6 heads over 2, a 32-token chunk, the
    # training DynamicCache on
    "scout-like": dict(BASE, hidden_size=96, intermediate_size=48, intermediate_size_mlp=128, num_attention_heads=6,
                       num_local_experts=8, interleave_moe_layer_step=1, attention_chunk_size=32, use_cache=True),
    # Maverick's: every second block 16 experts of 16, no q/k L2 norm, eight blocks, heads of 8, an 8-token chunk
    "maverick-like": dict(BASE, num_hidden_layers=8, num_attention_heads=8, head_dim=8, intermediate_size=16,
                          intermediate_size_mlp=64, num_local_experts=16, use_qk_norm=False, attention_chunk_size=8),
    # no chunking (attention_chunk_size None: every block full attention), moe_layers given, a key/value head per
    # query head, five blocks
    "unchunked": dict(BASE, attention_chunk_size=None, moe_layers=[0, 3], num_key_value_heads=4, num_hidden_layers=5),
}
# peak / measured - 1 of the steady step (CPU, torch 2.13, transformers 5.24), SDPA; eager within 0.2 points of it
MEASURED = {  # (name, method, precision): (without checkpointing, with checkpointing)
    ("base", "full", "fp32"): (0.0002, 0.0020), ("base", "full", "bf16"): (0.0003, -0.0033),
    ("base", "lora", "fp32"): (0.0002, -0.0155), ("base", "lora", "bf16"): (0.0003, -0.0231),
    ("scout-like", "full", "fp32"): (-0.0000, 0.0022), ("scout-like", "full", "bf16"): (0.0001, 0.0008),
    ("scout-like", "lora", "fp32"): (-0.0154, -0.0057), ("scout-like", "lora", "bf16"): (0.0002, -0.0105),
    ("maverick-like", "full", "fp32"): (-0.0005, 0.0012), ("maverick-like", "full", "bf16"): (0.0001, -0.0012),
    ("maverick-like", "lora", "fp32"): (-0.0041, -0.0032), ("maverick-like", "lora", "bf16"): (0.0002, -0.0120),
    ("unchunked", "full", "fp32"): (0.0001, 0.0034), ("unchunked", "full", "bf16"): (0.0002, 0.0006),
    ("unchunked", "lora", "fp32"): (0.0002, -0.0264), ("unchunked", "lora", "bf16"): (0.0003, -0.0190),
}
# What the measurements found. Saved activations: equal to the byte in all 32 steps without checkpointing. Peaks
# without checkpointing: within 0.4% but for scout-like's LoRA fp32 steps (-1.5% SDPA, -1.4% eager), short in the
# forward pass's last block by 152,152 B. 98,304 B of it are the DynamicCache's k and v of the three earlier chunked
# blocks (2 x t x 2 x 16 fp32 values each), alive to the forward's end but not saved (SDPA with a chunk mask keeps
# repeat_kv's copies instead), which the forward peak, counting the earlier blocks' saved tensors, leaves out (the same
# config without the cache is short by 53,824 B, 0.55%, not found). With checkpointing the steps first peaked 2-12%
# above the prediction: a recomputed Llama4TextMoe block's backward runs every routed expert over every token (E x t
# rows), which _moe.backward_phase's top-k moments left out. Llama 4's record now prices them (moe_backward, and
# recompute_held: the E t x h copy of the experts' output gradient, made before the block is recomputed and held
# through it), and the numbers above are after that (the full-finetuning fp32 steps without checkpointing moved up
# with it, scout-like's from -0.30%, maverick-like's from -0.12%): full finetuning within 0.35% either side, LoRA
# still 0.3-2.6% under, so a checkpointed Llama 4 run keeps a floor, no verdict (checkpointed_peak_refusal).
SHORT = {("scout-like", "lora", "fp32")}


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("name", sorted(HELD_OUT))
def test_held_out_steps_save_what_the_trace_saves_and_peak_within_one_percent(torch, transformers, peft, name,
                                                                             attention, method, precision):
    """Held out: what two_cpu_steps' recorder counts as saved equals the trace to the byte in every case; the steady
    step's peak is within 1% but for scout-like's LoRA fp32 steps (within 2%, MEASURED)."""
    from family_checks import predicted_step, two_cpu_steps

    config = HELD_OUT[name]
    run = dict(precision=precision, method=method, attention=attention)
    saved, peak = predicted_step(mm.from_hf_config(config), **run)
    measured = two_cpu_steps(torch, transformers, peft, config, **run)
    assert measured["saved_bytes"] == saved
    tolerance = 0.02 if (name, method, precision) in SHORT else 0.01
    assert abs(peak / measured["peak_step2_bytes"] - 1) < tolerance, peak / measured["peak_step2_bytes"] - 1


def test_a_checkpointed_run_gets_a_floor_naming_the_lora_steps_gap():
    run = mm.Run(model=mm.from_hf_config(BASE), seq_len=64, batch_size=2, checkpointing=True, device="cpu")
    assert mm.requirement(run).basis == "floor"
    assert "LoRA" in mm.from_hf_config(BASE).architecture.checkpointed_peak_refusal


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("name", sorted(HELD_OUT))
def test_a_checkpointed_step_peaks_within_three_percent_of_the_prediction(torch, transformers, peft, name, method,
                                                                         precision):
    """With gradient checkpointing (transformers' non-reentrant default), SDPA: the prediction is within 3% of the
    measured peak, full finetuning within 0.5% either side, LoRA up to 2.6% under (MEASURED), the gap
    checkpointed_peak_refusal names. Held in: these configs are the ones Llama 4's MoE backward was written against."""
    from family_checks import predicted_step, two_cpu_steps

    config = HELD_OUT[name]
    run = dict(precision=precision, method=method, attention="sdpa", checkpointing=True)
    _, peak = predicted_step(mm.from_hf_config(config), **run)
    measured = two_cpu_steps(torch, transformers, peft, config, **run)
    ratio = peak / measured["peak_step2_bytes"] - 1
    assert (-0.005 < ratio < 0.005) if method == "full" else (-0.03 < ratio < 0), ratio



# Held out for the checkpointed peak: configs measured after Llama 4's MoE backward (moe_backward, recompute_held) was
# committed, written against the configs above. peak / measured - 1 of the steady step, SDPA, with checkpointing:
HELD_OUT_CHECKPOINTED = {
    # every block a mixture of 6 experts of 64, top-2, h 128, 8 heads, three blocks
    "wide-top2": dict(BASE, hidden_size=128, intermediate_size=64, num_attention_heads=8, num_local_experts=6,
                      num_experts_per_tok=2, interleave_moe_layer_step=1, num_hidden_layers=3),
    # every second block 32 experts of 24, a dense MLP of 80, six blocks
    "32-experts": dict(BASE, intermediate_size=24, num_local_experts=32, num_hidden_layers=6,
                       intermediate_size_mlp=80),
}
MEASURED_CHECKPOINTED = {
    ("wide-top2", "full", "fp32"): 0.0032, ("wide-top2", "full", "bf16"): 0.0018,
    ("wide-top2", "lora", "fp32"): -0.0146, ("wide-top2", "lora", "bf16"): -0.0173,
    ("32-experts", "full", "fp32"): 0.0006, ("32-experts", "full", "bf16"): -0.0009,
    ("32-experts", "lora", "fp32"): -0.0085, ("32-experts", "lora", "bf16"): -0.0127,
}
# Before that model (peak.py's top-k moments alone) the same steps were 2.4-12.4% under. As held in: full finetuning
# within 0.5% either side, LoRA under (by up to 1.7%), the gap checkpointed_peak_refusal names.


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("name", sorted(HELD_OUT_CHECKPOINTED))
def test_held_out_checkpointed_steps_peak_within_three_percent(torch, transformers, peft, name, method, precision):
    """Held out, with gradient checkpointing, SDPA: as the held-in configs (MEASURED_CHECKPOINTED)."""
    from family_checks import predicted_step, two_cpu_steps

    config = HELD_OUT_CHECKPOINTED[name]
    run = dict(precision=precision, method=method, attention="sdpa", checkpointing=True)
    _, peak = predicted_step(mm.from_hf_config(config), **run)
    measured = two_cpu_steps(torch, transformers, peft, config, **run)
    ratio = peak / measured["peak_step2_bytes"] - 1
    assert (-0.005 < ratio < 0.005) if method == "full" else (-0.03 < ratio < 0), ratio

# LoRA on the routed experts, held out: measured after that trace was committed, SDPA, two AdamW steps as above with
# peft's target_parameters (LORA_TARGETS). peak / measured - 1 of the steady step, without and with checkpointing:
MEASURED_EXPERTS = {  # (name, targets, precision): (without checkpointing, with checkpointing)
    ("base", ("experts",), "fp32"): (0.0003, -0.0167), ("base", ("experts",), "bf16"): (0.0004, -0.0216),
    ("base", ("q", "v", "experts"), "fp32"): (0.0002, -0.0161),
    ("base", ("q", "v", "experts"), "bf16"): (0.0003, -0.0210),
    ("scout-like", ("experts",), "fp32"): (0.0001, -0.0060), ("scout-like", ("experts",), "bf16"): (0.0001, -0.0072),
    ("scout-like", ("q", "v", "experts"), "fp32"): (0.0001, -0.0059),
    ("scout-like", ("q", "v", "experts"), "bf16"): (0.0001, -0.0069),
    ("maverick-like", ("experts",), "fp32"): (0.0001, -0.0070),
    ("maverick-like", ("experts",), "bf16"): (0.0001, -0.0072),
    ("maverick-like", ("q", "v", "experts"), "fp32"): (0.0001, -0.0049),
    ("maverick-like", ("q", "v", "experts"), "bf16"): (0.0001, -0.0068),
}
# Saved activations equal to the byte in all 12 steps without checkpointing; with it, 0.5-2.2% under (the refusal's gap),
# after Llama 4's MoE backward was priced (2-9.5% under before).


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("targets", [("experts",), ("q", "v", "experts")], ids=str)
@pytest.mark.parametrize("name", ["base", "scout-like", "maverick-like"])
def test_held_out_steps_with_lora_on_the_experts_save_what_the_trace_saves(torch, transformers, peft, name, targets,
                                                                          precision):
    """Held out: the recorder's saved bytes equal the trace to the byte; the steady step's peak is within 1%
    (MEASURED_EXPERTS: 0.04% or less)."""
    from memmath.stepping import step_twice
    from validation.measure import configure_torch, make_optimizer

    configure_torch()
    config = HELD_OUT[name]
    hf_config = transformers.AutoConfig.for_model("llama4_text", **{k: v for k, v in config.items()
                                                                    if k != "model_type"})
    hf_config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=dtype).train()
    blocks = model.model.layers
    model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, **LORA_TARGETS[targets]))
    params = [p for p in model.parameters() if p.requires_grad]
    ids = torch.randint(1, 512, (2, 64), generator=torch.Generator().manual_seed(1))
    measured = step_twice(model, make_optimizer(params, "adamw"), {"input_ids": ids, "labels": ids.clone()}, blocks)
    settings = dict(method=mm.LoRA(rank=4, targets=targets), seq_len=64, batch_size=2, dropout=False,
                    attention="sdpa", checkpointing=False, device="cpu")
    shape = mm.from_hf_config(config)
    assert measured["saved_bytes"] == activation_parts(shape, recipe=get_recipe(precision), **settings).estimate.total
    peak = mm.peak_memory(shape, precision=precision, optimizer="adamw", activations="transformers", **settings)
    assert abs(peak.total / measured["peak_step2_bytes"] - 1) < 0.01
