"""Runs whose number was wrong without a warning, each checked against PyTorch or a derivation by hand."""

import pytest

import memmath as mm
from memmath.models import factored_size


# ---- Adafactor factors every tensor of two or more dimensions ---------------------------------------
def test_adafactor_factors_a_three_dimensional_tensor_over_its_last_two():
    # torch/optim/_adafactor.py: row_var [..., r, 1] and col_var [..., 1, c] for any p.grad.dim() > 1.
    # A 4 x 6 x 10 experts tensor keeps 4 x 6 + 4 x 10 = 64 statistics; a vector its own size.
    assert factored_size((4, 6, 10)) == 64
    assert factored_size((6, 10)) == 16
    assert factored_size((10,)) == 10


@pytest.mark.live
def test_adafactor_on_a_mixture_of_experts_matches_pytorch(torch, transformers):
    # A tiny Mixtral: its routed experts are 3-D tensors (num_experts x rows x cols) in transformers 5.
    config = transformers.MixtralConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=48, vocab_size=64,
                                        num_local_experts=4, num_experts_per_tok=2)
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(config)
    assert any(p.dim() == 3 for p in model.parameters())
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer = torch.optim.Adafactor(model.parameters())
    optimizer.step()
    measured = sum(t.numel() * t.element_size() for state in optimizer.state.values() for t in state.values()
                   if torch.is_tensor(t))
    m = mm.training_memory(mm.from_hf_config(config.to_dict()), precision="fp32", optimizer="adafactor")
    assert m.optimizer_states == measured


def test_adafactor_on_mixtral_keeps_megabytes_not_gigabytes():
    # Mixtral-8x7B in bf16 by hand, torch's rule: every matrix or experts tensor keeps E x (r + c) statistics.
    # Per layer: q 4096+4096, k 1024+4096, v 1024+4096, o 4096+4096, router 8+4096, experts gate_up
    # 8 x (28672 + 4096), down 8 x (4096 + 14336), 2 norms 2 x 4096. Embeddings 32000+4096, head 32000+4096, norm 4096.
    layer = (8192 + 5120 + 5120 + 8192 + 4104 + 8 * 32768 + 8 * 18432 + 8192)
    elements = 32 * layer + 2 * 36096 + 4096
    tensors = 32 * 9 + 3
    m = mm.training_memory("mixtral-8x7b", optimizer="adafactor")
    assert m.optimizer_states == 2 * elements + 4 * tensors


def test_adafactor_on_a_split_mixture_of_experts_factors_its_experts_too():
    # Expert parallelism over 2 GPUs: each keeps half of every experts tensor, so under half the single GPU's states.
    single = mm.training_memory("mixtral-8x7b", optimizer="adafactor").optimizer_states
    split = mm.parallel.parallel_memory("mixtral-8x7b", optimizer="adafactor", n_gpus=2, ep=2).memory.optimizer_states
    assert split < single < 40e6
