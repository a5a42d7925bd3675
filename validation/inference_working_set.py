"""Measure the transient peak of a transformers prefill on the CPU and compare memmath's working set.

    PYTHONPATH=. python validation/inference_working_set.py

Tiny GPT-2 and LLaMA models (built from configs in code, random weights) run one forward pass
with use_cache=True and logits_to_keep=1, as generate's prefill does. A TorchDispatchMode counts
every storage an operator allocates (each once, freed when its storage dies), leaving out the
weights; the peak minus the KV cache is the working set memmath predicts. torch and transformers
are needed here only; the lessons never import them.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

import memmath as mm

from .working_set_configs import CONFIGS, SIZES


class LiveBytes(TorchDispatchMode):
    """Bytes of storages allocated inside the mode and still alive; the peak of that sum."""

    def __init__(self, skip):
        super().__init__()
        self.skip, self.live, self.current, self.peak = set(skip), {}, 0, 0

    def _free(self, key):
        self.current -= self.live.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor):
                storage = tensor.untyped_storage()
                key = storage.data_ptr()
                if key in self.live or key in self.skip or storage.nbytes() == 0:
                    continue
                self.live[key] = storage.nbytes()
                self.current += storage.nbytes()
                weakref.finalize(storage, self._free, key)
        self.peak = max(self.peak, self.current)
        return out




def build(family, attention):
    if family in CONFIGS:
        import transformers

        fields = dict(CONFIGS[family], **SIZES)
        config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
        config._attn_implementation = attention
        return config, transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16).eval()
    if family == "gpt2":
        config = GPT2Config(n_embd=256, n_layer=4, n_head=8, vocab_size=50257, n_positions=1024,
                            attn_implementation=attention)
        return config, GPT2LMHeadModel(config).to(torch.bfloat16).eval()
    kv = {"llama-gqa": 2, "llama-mha": 8}[family]
    config = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
                         num_key_value_heads=kv, vocab_size=32000, attn_implementation=attention)
    return config, LlamaForCausalLM(config).to(torch.bfloat16).eval()


def measure(family, attention, seq_len, batch_size):
    """(measured peak minus KV cache, memmath working set) in bytes."""
    torch.manual_seed(0)
    config, model = build(family, attention)
    weights = [t.untyped_storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())]
    ids = torch.randint(0, config.vocab_size, (batch_size, seq_len))
    mode = LiveBytes(weights)
    with torch.no_grad(), mode:
        model(ids, use_cache=True, logits_to_keep=1)
    shape = mm.from_hf_config(config.to_dict())
    kv = mm.kv_cache_bytes(shape, context_len=seq_len, batch_size=batch_size)
    predicted = mm.inference.working_set_bytes(shape, context_len=seq_len, batch_size=batch_size, attention=attention)
    return mode.peak - kv, predicted


CASES = [(f, a, s, b) for f in ("gpt2", "llama-gqa", "llama-mha") for a in ("sdpa", "eager")
         for s, b in ((256, 1), (512, 2), (1024, 1))]

NEW_CASES = [(f, a, s, b) for f in CONFIGS for a in ("sdpa", "eager") for s, b in ((256, 1), (512, 2))
             if not (f == "gemma2" and a == "sdpa")]  # Gemma 2 has no SDPA (softcapping)

if __name__ == "__main__":
    import sys

    if "--new" in sys.argv:  # the model types read from config.json only
        CASES = NEW_CASES
    print(f"torch {torch.__version__}")
    print(f"{'family':10} {'attention':9} {'s':>5} {'b':>2} {'measured':>12} {'memmath':>12} {'ratio':>6}")
    for family, attention, s, b in CASES:
        measured, predicted = measure(family, attention, s, b)
        print(f"{family:10} {attention:9} {s:5} {b:2} {measured:12,} {predicted:12,} {predicted / measured:6.3f}")
