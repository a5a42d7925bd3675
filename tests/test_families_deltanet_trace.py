"""Qwen3-Next (model_type qwen3_next): memmath's activation trace of its gated DeltaNet and gated-attention blocks
against what autograd keeps, under transformers 5.24's PyTorch path of the linear attention (torch_causal_conv1d's
F.conv1d and torch_chunk_gated_delta_rule), the path the CPU always takes and Run(mixer_kernels='torch') names.

Held in: the trace (architectures/_deltanet.py: the convolution, beta and the decay g, the chunked delta rule with its
fp32 C x C products per chunk, the triangular solves and the scan over chunks, the gated norm; the gated full
attention with its partial rotary) was written against these small configs, each compared to the byte with what
torch.autograd.graph.saved_tensors_hooks sees a first forward keep (family_checks.held_for_backward: b 2, fp32 and
bf16, full and LoRA r 4 on q and v, SDPA and eager), at 64 tokens (one chunk) and, for the scan and the padding to
whole chunks, at 128 and 150.

What the trace has no steps for is refused by name (a run keeps the textbook model and no fits verdict): the training
DynamicCache of a use_cache config and as many key heads as value heads; a run under the CUDA kernels
(mixer_kernels='cuda', a GPU's default) gets a floor whose reason names --mixer-kernels torch."""

from __future__ import annotations

import pytest

import memmath as mm
from family_checks import held_for_backward
from memmath.architectures import ARCHITECTURES
from memmath.decision import unchecked_type
from memmath.hf_activations import activation_parts, traces
from memmath.recipes import get_recipe

L, F = "linear_attention", "full_attention"
# One gated DeltaNet block and one gated full-attention block, both with the sparse MoE block (4 experts, 2 a token,
# a shared expert with its gate); 2 key heads to 4 value heads (repeat_interleave), key heads 8 wide and value heads
# 12; the hidden size (48) differs from every other width so that no two kinds of tensor match in size.
BASE = dict(model_type="qwen3_next", hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, vocab_size=512, linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=8, linear_value_head_dim=12, linear_conv_kernel_dim=4, num_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=24, shared_expert_intermediate_size=40, layer_types=[L, F],
            use_cache=False)
HELD_IN = {
    "base": BASE,
    # full attention first, then two DeltaNet blocks (under LoRA on q and v frozen, their input needing a gradient),
    # the middle one with a dense MLP (mlp_only_layers); one key head to three value heads, key heads wider than value
    # heads, a 3-wide convolution, half of each head rotated, a tied head
    "full-first-dense-tied": dict(BASE, num_hidden_layers=3, layer_types=[F, L, L], mlp_only_layers=[1],
                                  linear_num_key_heads=1, linear_num_value_heads=3, linear_key_head_dim=12,
                                  linear_value_head_dim=8, linear_conv_kernel_dim=3, partial_rotary_factor=0.5,
                                  tie_word_embeddings=True),
}
SETTINGS = [(method, precision, attention) for method in ("full", "lora") for precision in ("fp32", "bf16")
            for attention in ("sdpa", "eager")]


def _saved(config, *, method, precision, attention, seq_len=64):
    return activation_parts(mm.from_hf_config(config), recipe=get_recipe(precision),
                            method=mm.Full() if method == "full" else mm.LoRA(rank=4, targets=("q", "v")),
                            seq_len=seq_len, batch_size=2, dropout=False, attention=attention, checkpointing=False,
                            device="cpu").estimate.total


# ---- 1. what the trace replays, and what it refuses by name -------------------------------------------------------
def test_a_qwen3_next_config_is_traced_under_the_pytorch_path():
    record = ARCHITECTURES["qwen3_next"]
    shape = mm.from_hf_config(BASE)
    assert record.traced and record.trace_refusal(shape) == ""
    assert "flash-linear-attention" in record.mixer_kernels and "causal-conv1d" in record.mixer_kernels
    assert traces(shape, mm.Full(), get_recipe("bf16"), 64, mixer_kernels="torch") is None
    under_cuda = traces(shape, mm.Full(), get_recipe("bf16"), 64, mixer_kernels="cuda")
    assert "--mixer-kernels torch" in under_cuda and "flash-linear-attention" in under_cuda


def test_qwen3_next_rotates_a_quarter_of_each_head_by_default():
    # Qwen3NextConfig.__post_init__: partial_rotary_factor 0.25 unless given (rotary tables d / 4 wide)
    assert mm.from_hf_config(BASE).rotary_dim == 16 // 4
    assert mm.from_hf_config(dict(BASE, partial_rotary_factor=0.5)).rotary_dim == 16 // 2
    # and renormalizes the top-k routing weights (Qwen3NextConfig.norm_topk_prob defaults to true)
    assert mm.from_hf_config(BASE).norm_topk_prob


@pytest.mark.parametrize("change, named", [
    (dict(use_cache=True), "use_cache"),
    (dict(linear_num_key_heads=4), "linear_num_key_heads"),
])
def test_what_the_trace_has_no_steps_for_is_refused_by_name(change, named):
    shape = mm.from_hf_config(dict(BASE, **change))
    reason = traces(shape, mm.Full(), get_recipe("bf16"), 64, mixer_kernels="torch")
    assert reason and named in reason
    run = mm.Run(shape, seq_len=64, batch_size=2, precision="bf16", optimizer="adamw", device="cpu")
    assert run.activations == "textbook" and unchecked_type(run) is not None


# ---- 2. held in: the trace to the byte against autograd ------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(HELD_IN))
@pytest.mark.parametrize("method, precision, attention", SETTINGS)
def test_held_in_configs_match_autograd_to_the_byte(torch, transformers, peft, name, method, precision, attention):
    config = HELD_IN[name]
    measured = held_for_backward(torch, transformers, peft, config, precision=precision, method=method,
                                 attention=attention)
    assert _saved(config, method=method, precision=precision, attention=attention) == measured


@pytest.mark.parametrize("seq_len", [128, 150])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_held_in_the_scan_over_chunks_and_the_padding_match_autograd(torch, transformers, peft, seq_len, precision):
    # 128 tokens: two chunks of 64, no padding (an fp32 model's matmuls copy their operands); 150: three chunks, the
    # last padded by 42 (F.pad's output is contiguous, so no copies)
    measured = held_for_backward(torch, transformers, peft, BASE, precision=precision, method="full",
                                 attention="sdpa", seq_len=seq_len)
    assert _saved(BASE, method="full", precision=precision, attention="sdpa", seq_len=seq_len) == measured
