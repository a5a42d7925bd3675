"""Houlsby adapters (Houlsby et al. 2019; the reference module validation/houlsby.py inserts after each block's attention
and MLP output projections) in the decoders laid out as LLaMA's: what autograd holds when the first forward pass of a
small model built by transformers 5.24 returns, counted with torch.autograd.graph.saved_tensors_hooks
(tests/family_checks.py held_for_backward), equals memmath's trace to the byte, as it does for BERT and LLaMA
(tests/test_fidelity.py).

Held in: SMALL on every placed type, fp32 and bf16, SDPA and eager (checked while placing the adapters in the
blocks' traces). Held out: the CPU steps measured after that was committed (their section says what each found)."""

from __future__ import annotations

import pytest

import memmath as mm
from family_checks import held_for_backward, predicted_step

# Widths small enough for a CPU forward; GQA (4 query heads over 2 key/value heads); no dropout, so the saved masks
# do not depend on a seed (seed_oss's config defaults to 0.1 on attention and residuals).
SMALL = dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
PLACED = {
    "mistral": {}, "qwen2": {}, "qwen3": {}, "smollm3": {}, "granite": {}, "phi3": {}, "apertus": {},
    "cohere2": {}, "ernie4_5": {}, "seed_oss": dict(attention_dropout=0.0, residual_dropout=0.0),
    "olmo2": {}, "olmo3": {}, "exaone4": {},
    # Gemma's head_dim defaults to 256: a head of 16 keeps the model small
    "gemma": dict(head_dim=16), "gemma2": dict(head_dim=16), "gemma3_text": dict(head_dim=16),
}
# Gemma2ForCausalLM refuses SDPA in transformers 5.24 (eager only)
ATTENTIONS = {"gemma2": ("eager",)}
CASES = [(model_type, precision, attention) for model_type in PLACED for precision in ("fp32", "bf16")
         for attention in ATTENTIONS.get(model_type, ("sdpa", "eager"))]


def _config(model_type, **changes):
    return dict(SMALL, model_type=model_type, **PLACED[model_type], **changes)


def test_every_placed_type_says_so_and_the_others_refuse_by_name():
    for model_type in PLACED:
        assert mm.from_hf_config(_config(model_type)).architecture.houlsby_placed, model_type
    # GPT-2's block projects through Conv1D c_proj, which no trace places adapters after: the textbook model, said why
    run = mm.Run("gpt2", method=mm.Adapters(bottleneck=8))
    assert run.activations == "textbook" and "gpt2's blocks have no such place traced" in str(run.notes[0])


@pytest.mark.parametrize("model_type, precision, attention", CASES)
def test_saved_activations_are_what_autograd_holds(torch, transformers, peft, model_type, precision, attention):
    config = _config(model_type)
    ours, _ = predicted_step(mm.from_hf_config(config), precision=precision, method="houlsby", attention=attention)
    assert ours == held_for_backward(torch, transformers, peft, config, precision=precision, method="houlsby",
                                     attention=attention)
