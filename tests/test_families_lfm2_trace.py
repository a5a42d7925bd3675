"""LFM2 and LFM2-MoE (model types lfm2, lfm2_moe): memmath's activation trace of transformers 5.24's PyTorch path
(Run(mixer_kernels='torch'), the CPU's) against what autograd keeps.

Held in: the trace (architectures/_shortconv.py: Lfm2ShortConv's in_proj, B * x, the padded F.conv1d, C * its output,
out_proj; the attention blocks as _decoder's with q/k layernorms; lfm2_moe.moe: the sigmoid router and the grouped_mm
experts) was written against these small configs, each compared to the byte with what
torch.autograd.graph.saved_tensors_hooks sees a first forward keep (family_checks.held_for_backward: b 2, s 64, fp32
and bf16, full and LoRA r 4, SDPA and eager). Held out, measured only after the trace was committed (section 3 says
what each found): new configs' two-step peaks without and with checkpointing, and Freeze's saved tensors.

A run that says it runs causal-conv1d's CUDA kernels (mixer_kernels='cuda', the default on a GPU) gets a floor whose
reason names --mixer-kernels torch; a padded batch is refused by name (the conv blocks multiply their input by it)."""

from __future__ import annotations

import itertools
import weakref

import pytest

import memmath as mm
from family_checks import held_for_backward
from memmath.hf_activations import activation_parts, traces
from memmath.recipes import get_recipe

C, A = "conv", "full_attention"
# The hidden size (48) differs from every other width: the MLP's int(2 x 144 / 3) = 96, heads of 12, 2 key/value heads
BASE = dict(model_type="lfm2", hidden_size=48, intermediate_size=144, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=512, block_multiple_of=32, layer_types=[C, A, C, A], use_cache=False)
MOE = dict(model_type="lfm2_moe", hidden_size=48, intermediate_size=80, moe_intermediate_size=32, num_hidden_layers=4,
           num_attention_heads=4, num_key_value_heads=2, vocab_size=512, num_experts=4, num_experts_per_tok=2,
           num_dense_layers=1, layer_types=[C, A, C, A], use_cache=False)
HELD_IN = {
    "base": BASE,
    # conv biases, a width-4 convolution, heads of 24 (a x d != h), full_attn_idxs (the last block a conv block, which
    # saves no rotary table: the attention block's layout does), an untied head, the training DynamicCache
    "bias-w4-cache": dict({k: v for k, v in BASE.items() if k != "layer_types"}, conv_bias=True, conv_L_cache=4,
                          head_dim=24, full_attn_idxs=[2], use_cache=True, tie_embedding=False),
    # an attention block first, two conv blocks after it, one key/value head
    "conv-last-mqa": dict(BASE, layer_types=[A, C, C], num_hidden_layers=3, num_key_value_heads=1),
    # a dense conv block, then MoE blocks: sigmoid top-2 of 4 with expert_bias, renormalized
    "moe": MOE,
    # without expert_bias and renormalization, a scaling factor, two dense blocks, conv biases, a conv block last
    "moe-plain": dict(MOE, use_expert_bias=False, norm_topk_prob=False, routed_scaling_factor=2.0, conv_bias=True,
                      layer_types=[A, C, A, C], num_dense_layers=2),
}
# peft's names of memmath's targets in LFM2 (the conv blocks' out_proj is "o" too)
PEFT = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj", "gate": "w1", "up": "w3", "down": "w2"}
LINEAR_TARGETS = [("q", "v"), ("o",), ("q", "k", "v", "o", "gate", "up", "down")]


def _parts(config, *, precision, method, attention, targets=("q", "v"), checkpointing=False):
    lora = mm.Full() if method == "full" else mm.LoRA(rank=4, targets=targets)
    return activation_parts(mm.from_hf_config(config), recipe=get_recipe(precision), method=lora, seq_len=64,
                            batch_size=2, dropout=False, attention=attention, checkpointing=checkpointing,
                            device="cpu")


# ---- 1. what the trace replays, and what a run gets ---------------------------------------------------------------
@pytest.mark.parametrize("name", ["base", "moe"])
def test_the_pytorch_path_is_traced_and_the_kernels_are_refused_by_name(name):
    shape = mm.from_hf_config(HELD_IN[name])
    assert shape.architecture.traced and shape.architecture.mixer_kernels == "causal-conv1d's kernels"
    assert traces(shape, mm.Full(), get_recipe("bf16"), 64, "sdpa", "torch") is None
    why = traces(shape, mm.Full(), get_recipe("bf16"), 64, "sdpa", "cuda")
    assert "--mixer-kernels torch" in why and "causal-conv1d" in why


@pytest.mark.parametrize("name", ["base", "moe"])
def test_a_run_on_the_pytorch_path_gets_a_verdict_and_one_on_the_kernels_a_floor(name):
    shape = mm.from_hf_config(HELD_IN[name])
    assert mm.requirement(mm.Run(shape, seq_len=64, batch_size=2, device="cpu")).basis == "peak"
    assert mm.requirement(mm.Run(shape, seq_len=64, batch_size=2, device="cuda", mixer_kernels="torch")).basis == "peak"
    cuda = mm.requirement(mm.Run(shape, seq_len=64, batch_size=2, device="cuda"))  # mixer_kernels resolves to 'cuda'
    assert cuda.basis == "floor" and "--mixer-kernels torch" in cuda.reason


def test_a_padded_batch_is_refused_by_name():
    # Lfm2ShortConv.forward: apply_mask_to_padding_states(hidden_states, attention_mask), a product the trace lacks
    with pytest.raises(ValueError, match="padded.*padding mask"):
        mm.Run(mm.from_hf_config(BASE), seq_len=64, batch_size=2, padded=True)


def test_a_conv_block_keeps_what_its_pytorch_path_keeps_by_hand():
    # conv-last-mqa (its last block a conv block) in fp32, full finetuning, b 2, s 64, h 48, conv_L_cache 3: in_proj's
    # output B, C, x (one storage, t x 3h),
    # kept by B * x and C * conv; the convolution's input B * x (t x h) and its padded output b x h x (s + 2), which the
    # [:, :, :s] view keeps whole; in_proj's and out_proj's inputs (t x h each)
    terms = {what: n for region, what, n in _parts(HELD_IN["conv-last-mqa"], precision="fp32", method="full",
                                                   attention="sdpa").estimate.terms if region == "each block"}
    assert terms["B * x in_proj output (B)"] == 128 * 3 * 48 * 4  # B and x: views of that one storage
    assert terms["convolution input (B * x)"] == 128 * 48 * 4
    assert terms["C * conv convolution output (b x h x (s + L - 1))"] == 2 * 48 * 66 * 4
    assert terms["in_proj input"] == terms["out_proj input"] == 128 * 48 * 4


def test_a_conv_block_last_still_counts_the_attention_blocks_rotary_tables():
    # conv-last-mqa: cos and sin, (1, s, d) each, saved by the attention block (d 12, fp32): 2 x 64 x 12 x 4
    terms = {what: n for _, what, n in _parts(HELD_IN["conv-last-mqa"], precision="fp32", method="full",
                                              attention="sdpa").estimate.terms}
    assert terms["rotary cos and sin tables, saved by the blocks of another block layout"] == 2 * 64 * 12 * 4
    # LoRA on o alone: the attention block (block 0) gets no input gradient and no q or k adapter: no table is kept
    lora = {what for _, what, _ in _parts(HELD_IN["conv-last-mqa"], precision="fp32", method="lora", targets=("o",),
                                          attention="sdpa").estimate.terms}
    assert "rotary cos and sin tables, saved by the blocks of another block layout" not in lora


# ---- 2. held in: the first forward's saved tensors, to the byte ---------------------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("method, targets", [("full", ("q", "v"))] + [("lora", t) for t in LINEAR_TARGETS], ids=str)
@pytest.mark.parametrize("name", sorted(HELD_IN))
def test_held_in_saved_activations_equal_autograds(torch, transformers, peft, name, method, targets, attention,
                                                    precision):
    config = HELD_IN[name]
    if name.startswith("moe") and "k" in targets:
        targets = ("o", "gate")  # a MoE block's MLP is its experts: the dense blocks' w1 beside the mixers' out_proj
    measured = held_for_backward(torch, transformers, peft, config, precision=precision, method=method,
                                 attention=attention, targets=tuple(PEFT[t] for t in targets))
    assert measured == _parts(config, precision=precision, method=method, attention=attention,
                              targets=targets).estimate.total


# peft 0.21 reaches LFM2-MoE's router and experts as target_parameters (ParamWrapper; the experts' fused gate_up_proj at
# rank 2r), traced by _moe.router_logits and _moe.routed_experts
EXPERTS = {("router",): dict(target_modules=[], target_parameters=["gate.weight"]),
           ("experts",): dict(target_modules=[], target_parameters=["experts.gate_up_proj", "experts.down_proj"],
                              rank_pattern={r".*\.gate_up_proj": 8}),
           ("q", "router", "experts"): dict(target_modules=["q_proj"],
                                            target_parameters=["gate.weight", "experts.gate_up_proj",
                                                               "experts.down_proj"],
                                            rank_pattern={r".*\.gate_up_proj": 8})}


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("targets", list(EXPERTS), ids=str)
def test_held_in_lora_on_the_router_and_experts_equals_autograds(torch, transformers, peft, targets, precision):
    from validation.measure import configure_torch

    configure_torch()
    hf = transformers.AutoConfig.for_model("lfm2_moe", **{k: v for k, v in MOE.items() if k != "model_type"})
    hf._attn_implementation = "sdpa"
    torch.manual_seed(0)
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    model = transformers.AutoModelForCausalLM.from_config(hf, dtype=dtype).train()
    model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, **EXPERTS[targets]))
    excluded = {t.untyped_storage().data_ptr() for t in itertools.chain(model.parameters(), model.buffers())}
    saved = []
    ids = torch.randint(1, 512, (2, 64), generator=torch.Generator().manual_seed(1))
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(weakref.ref(t)) or t, lambda t: t):
        output = model(input_ids=ids, labels=ids.clone())
        held = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in (ref() for ref in saved)
                if t is not None and t.untyped_storage().data_ptr() not in excluded}
    del output
    assert sum(held.values()) == _parts(MOE, precision=precision, method="lora", attention="sdpa",
                                        targets=targets).estimate.total


# ---- 3. held out: CPU steps measured after the trace was committed -------------------------------------------------
# Two AdamW steps (family_checks.two_cpu_steps: b 2, s 64), full and LoRA r 4 on q and v, fp32 and bf16, SDPA and
# eager; configs written after the trace. Nothing in the trace changed after measuring them.
HELD_OUT = {
    # h 80, five heads of 16 over one key/value head, a width-2 convolution, the MLP int(2 x 256 / 3) = 170 -> 192,
    # two conv blocks first, the training DynamicCache (conv states and keys/values held to the forward's end)
    "wide-cache": dict(model_type="lfm2", hidden_size=80, intermediate_size=256, num_hidden_layers=5,
                       num_attention_heads=5, num_key_value_heads=1, head_dim=16, vocab_size=512, block_multiple_of=32,
                       conv_L_cache=2, layer_types=[C, C, A, C, A], use_cache=True),
    # LFM2-1.2B's order of blocks in six, a conv block last; the MLP int(1.5 x int(400 / 3)) = 199 -> 208
    "lfm2-pattern": dict(model_type="lfm2", hidden_size=64, intermediate_size=200, num_hidden_layers=6,
                         num_attention_heads=8, num_key_value_heads=2, vocab_size=512, block_multiple_of=16,
                         block_ffn_dim_multiplier=1.5, layer_types=[C, C, A, C, A, C], use_cache=False),
    # two dense blocks, then top-3 of 8 experts of 24, heads of 8, an attention block first
    "moe-top3": dict(model_type="lfm2_moe", hidden_size=64, intermediate_size=112, moe_intermediate_size=24,
                     num_hidden_layers=5, num_attention_heads=8, num_key_value_heads=2, head_dim=8, vocab_size=512,
                     num_experts=8, num_experts_per_tok=3, num_dense_layers=2, layer_types=[A, C, C, A, C],
                     use_cache=False),
}
# What they found (CPU, torch 2.13, transformers 5.24): saved bytes equal to the trace's in all 24 steps; the steady
# step's peak / measured - 1 between +0.0001 and +0.0003 in every one (eager as SDPA). With gradient checkpointing
# (SDPA, the 12 steps below) the prediction was short: full finetuning by 0.35-1.13%, LoRA by 1.40-3.30%
# (MEASURED_CHECKPOINTED), so a checkpointed LFM2 run keeps a floor (checkpointed_peak_refusal). Looked into after:
# the peak is in the first block's recomputed MLP backward (the SwiGLU product's backward), the moment peak.py prices;
# pricing the checkpoints' held arguments (Architecture.checkpoint_held_arguments: rotary cos and sin, position ids,
# each block's CPU RNG state) would bring the bf16 steps to within 0.06% over (wide-cache full -0.3%) but leave the
# fp32 ones 0.4-1.9% under, the rest not found: not adopted, the refusal stands. The same moment is short for the
# LLaMA layout too: llama and qwen3 configs of these widths (h 64, I 96, 3 blocks, tied) measured 1.1-1.6% above their
# prediction with checkpointing (fp32 full finetuning by 38,344 B, as an all-conv LFM2 of the same widths), so most
# of the gap is peak.py's checkpointed moments, not the convolution; LFM2's LoRA steps are short by more (to 3.3%).
MEASURED_CHECKPOINTED = {
    ("wide-cache", "full", "fp32"): -0.0107, ("wide-cache", "full", "bf16"): -0.0113,
    ("wide-cache", "lora", "fp32"): -0.0286, ("wide-cache", "lora", "bf16"): -0.0166,
    ("lfm2-pattern", "full", "fp32"): -0.0094, ("lfm2-pattern", "full", "bf16"): -0.0101,
    ("lfm2-pattern", "lora", "fp32"): -0.0330, ("lfm2-pattern", "lora", "bf16"): -0.0189,
    ("moe-top3", "full", "fp32"): -0.0035, ("moe-top3", "full", "bf16"): -0.0107,
    ("moe-top3", "lora", "fp32"): -0.0140, ("moe-top3", "lora", "bf16"): -0.0184,
}


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("name", sorted(HELD_OUT))
def test_held_out_steps_save_what_the_trace_saves_and_peak_within_a_tenth_of_a_percent(torch, transformers, peft, name,
                                                                                     attention, method, precision):
    from family_checks import predicted_step, two_cpu_steps

    config = HELD_OUT[name]
    run = dict(precision=precision, method=method, attention=attention)
    saved, peak = predicted_step(mm.from_hf_config(config), **run)
    measured = two_cpu_steps(torch, transformers, peft, config, **run)
    assert measured["saved_bytes"] == saved
    assert 0 <= peak / measured["peak_step2_bytes"] - 1 < 0.001, peak / measured["peak_step2_bytes"] - 1


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("name", sorted(HELD_OUT))
def test_a_checkpointed_step_peaks_above_the_prediction_by_the_refusal_s_gap(torch, transformers, peft, name, method,
                                                                            precision):
    """With checkpointing (SDPA): under the measured peak by 0.3-1.2% (full) and 1.3-3.4% (LoRA), the gap the
    records' checkpointed_peak_refusal names."""
    from family_checks import predicted_step, two_cpu_steps

    run = dict(precision=precision, method=method, attention="sdpa", checkpointing=True)
    _, peak = predicted_step(mm.from_hf_config(HELD_OUT[name]), **run)
    ratio = peak / two_cpu_steps(torch, transformers, peft, HELD_OUT[name], **run)["peak_step2_bytes"] - 1
    assert (-0.012 < ratio < -0.003) if method == "full" else (-0.034 < ratio < -0.013), ratio


@pytest.mark.parametrize("name", ["base", "moe"])
def test_a_checkpointed_run_gets_a_floor_naming_the_measured_gap(name):
    shape = mm.from_hf_config(HELD_IN[name])
    need = mm.requirement(mm.Run(shape, seq_len=64, batch_size=2, device="cpu", checkpointing=True))
    assert need.basis == "floor"
    assert "1.4-3.3% (LoRA)" in shape.architecture.checkpointed_peak_refusal


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("train_embeddings", [False, True])
@pytest.mark.parametrize("trained", [1, 2, 3])
def test_held_out_freeze_saves_what_the_trace_saves(torch, transformers, peft, trained, train_embeddings, precision):
    """Held out (measured after the trace was committed, all equal): Freeze(trainable_layers=k), the last k blocks,
    the final norm and the head training, conv-last-mqa's attention block first: the first trained block's input
    needs no gradient unless the embeddings train (then every frozen block stores too), and the rotary tables are
    kept only where the attention block stores."""
    from family_checks import stepped_model

    config = HELD_IN["conv-last-mqa"]
    model, layers = stepped_model(torch, transformers, peft, config, precision=precision, method="full",
                                  attention="sdpa")
    model.model.embed_tokens.weight.requires_grad_(train_embeddings)  # tied: the head's weight too
    for block in layers[:len(layers) - trained]:
        block.requires_grad_(False)
    excluded = {t.untyped_storage().data_ptr() for t in itertools.chain(model.parameters(), model.buffers())}
    saved = []
    ids = torch.randint(1, 512, (2, 64), generator=torch.Generator().manual_seed(1))
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(weakref.ref(t)) or t, lambda t: t):
        output = model(input_ids=ids, labels=ids.clone())
        held = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in (ref() for ref in saved)
                if t is not None and t.untyped_storage().data_ptr() not in excluded}
    del output
    method = mm.Freeze(trainable_layers=trained, train_embeddings=train_embeddings)
    assert sum(held.values()) == activation_parts(
        mm.from_hf_config(config), recipe=get_recipe(precision), method=method, seq_len=64, batch_size=2,
        dropout=False, attention="sdpa", checkpointing=False, device="cpu").estimate.total
