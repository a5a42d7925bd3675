"""Measure what one real training step allocates, case by case, and record it for memmath's tests.

    python -m validation.measure                      # the whole grid, CPU -> memmath_lessons/reference/data/measured_cpu.json
    python -m validation.measure --only qwen2 --append  # measure some cases again or anew, keep the rest
    python -m validation.sharded                      # then the sharded runs (FSDP2, ZeRO-1), into the same file
    python -m validation.measure --only gpt2 --print  # a subset, printed, nothing written
    python -m validation.measure --device cuda --out /tmp/measured_cuda.json   # on a GPU machine

Each case builds a small transformers model from a config object written here (GPT-2, LLaMA with
multi-head or grouped-query attention, tied or untied, BERT for sequence classification; nothing
comes from a model hub), sets up the finetuning method (full, freezing the first k blocks, LoRA via
peft), runs TWO training steps (forward, backward, optimizer.step(), zero_grad) and records:

- bytes of parameters, of gradients and of optimizer state tensors after optimizer.step(),
  each storage counted once (GPT-2's tied head is the embedding matrix);
- bytes saved for backward during the forward pass, through torch.autograd.graph.saved_tensors_hooks:
  each storage once (a view keeps its whole storage alive), parameters and buffers left out,
  attributed to the block that saved it first or to "outside the blocks";
- on the CPU, the profiler's allocation events (profile_memory=True): the highest net allocation in
  each phase (forward, backward, optimizer step) of each step over what was alive before step 1
  (peak_step1_*: the optimizer states do not exist yet; peak_step2_*: they do, as in every later
  step; peak_bytes = step 2's); on CUDA, torch.cuda.max_memory_allocated per step and the
  allocated bytes before the first;
- the versions of torch, transformers and peft, once for the whole file.

Groups (each case's `group`; `held_out` marks cases recorded after the prediction code they test):
"transformers" (the first grid: GPT-2, LLaMA and BERT layouts), "8-bit Adam" (bitsandbytes' Adam8bit/AdamW8bit), "Houlsby
adapters" (validation/houlsby.py; in the file's adapter_cases), the sharded runs of
validation/sharded.py (FSDP2, ZeRO-1; in sharded_cases, per rank), "QLoRA 4-bit" and "QLoRA 8-bit
base" (validation/quantized.py; quantized_cases) and "AMP (autocast bf16)" (validation/amp.py; amp_cases).

torch, transformers, peft and bitsandbytes are imported here only; memmath never needs them.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import platform
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

# The counting and the phase peaks are memmath's own (memmath.stepping, what `memmath measure` runs): one engine
# for the recorded measurements and for a user's. It imports torch only inside its functions.
from memmath.stepping import phase_peaks, unique_bytes as _unique_bytes

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "memmath" / "reference" / "data" / "measured_cpu.json"
SCHEMA_VERSION = 2

# ---- the model shapes (tiny, so the whole grid runs in minutes on two CPU cores) ----------------
# Each is a memmath shape description; build_model() turns it into the transformers config.
SHAPES = {
    # GPT-2: learned positions, LayerNorm, fused qkv (Conv1D), 4h MLP with gelu_new, tied head.
    "gpt2": dict(family="gpt2", n_layers=3, hidden_size=64, n_heads=4, intermediate_size=256,
                 vocab_size=1000, max_positions=256, tied_embeddings=True),
    # LLaMA, multi-head attention, untied head.
    "llama-mha": dict(family="llama", n_layers=3, hidden_size=64, n_heads=4, n_kv_heads=4,
                      intermediate_size=176, vocab_size=1000, tied_embeddings=False),
    # LLaMA, grouped-query attention (2 key/value heads for 4 query heads), untied head.
    "llama-gqa": dict(family="llama", n_layers=3, hidden_size=64, n_heads=4, n_kv_heads=2,
                      intermediate_size=176, vocab_size=1000, tied_embeddings=False),
    # LLaMA, grouped-query attention, head tied to the token embedding.
    "llama-gqa-tied": dict(family="llama", n_layers=3, hidden_size=64, n_heads=4, n_kv_heads=2,
                           intermediate_size=176, vocab_size=1000, tied_embeddings=True),
    # BERT with a 2-label classifier on its pooler (BertForSequenceClassification).
    "bert": dict(family="bert", n_layers=3, hidden_size=64, n_heads=4, intermediate_size=256,
                 vocab_size=1000, max_positions=256, type_vocab_size=2, num_labels=2),
    # Held-out shapes (grid block 6): added after memmath's model was written, to test it on sizes
    # it was not derived from. llama-wide has a small vocabulary, so the blocks, not the loss, peak.
    "gpt2-wide": dict(family="gpt2", n_layers=4, hidden_size=128, n_heads=8, intermediate_size=512,
                      vocab_size=2000, max_positions=256, tied_embeddings=True),
    "llama-wide": dict(family="llama", n_layers=4, hidden_size=128, n_heads=8, n_kv_heads=2,
                       intermediate_size=352, vocab_size=256, tied_embeddings=False),
    "bert-wide": dict(family="bert", n_layers=4, hidden_size=128, n_heads=8, intermediate_size=512,
                      vocab_size=2000, max_positions=256, type_vocab_size=2, num_labels=2),
}
HELD_OUT = ("gpt2-wide", "llama-wide", "bert-wide")
# Held out too (grid block 7), measured after memmath read these model_types from config.json: GPT-2 with
# gelu_pytorch_tanh, and the LLaMA layouts of Qwen2 (q/k/v biases) and Mistral (sliding window wider
# than the sequence, so no mask). "arch" is the transformers model_type, "hidden_act" its activation.
SHAPES.update({
    "gpt2-tanh": dict(family="gpt2", arch="gpt2", hidden_act="gelu_pytorch_tanh", n_layers=3, hidden_size=64,
                      n_heads=4, intermediate_size=256, vocab_size=1000, max_positions=256, tied_embeddings=True),
    "qwen2-gqa": dict(family="llama", arch="qwen2", n_layers=3, hidden_size=64, n_heads=4, n_kv_heads=2,
                      intermediate_size=176, vocab_size=1000, tied_embeddings=True),
    "mistral-gqa": dict(family="llama", arch="mistral", sliding_window=4096, n_layers=3, hidden_size=64, n_heads=4,
                        n_kv_heads=2, intermediate_size=176, vocab_size=1000, tied_embeddings=False),
})
# Qwen3 (q/k RMSNorm over each head), added after its trace was written.
SHAPES["qwen3-gqa"] = dict(family="llama", arch="qwen3", head_dim=16, n_layers=3, hidden_size=64, n_heads=4,
                           n_kv_heads=2, intermediate_size=176, vocab_size=1000, tied_embeddings=True)
# Phi-3 (fused qkv_proj and gate_up_proj, residual dropout), added after its trace was written.
SHAPES["phi3-gqa"] = dict(family="llama", arch="phi3", n_layers=3, hidden_size=64, n_heads=4, n_kv_heads=2,
                          intermediate_size=176, vocab_size=1000, tied_embeddings=False)
# OLMo 2 (q/k norms over all heads, norms after each sublayer in fp32), added after its trace was written.
SHAPES["olmo2-gqa"] = dict(family="llama", arch="olmo2", n_layers=3, hidden_size=64, n_heads=4, n_kv_heads=2,
                           intermediate_size=176, vocab_size=1000, tied_embeddings=False)
# The other model types read from config.json, added after their traces were written (hf_activations.py):
# Gemma's (1 + w) RMSNorms and GeGLU, Gemma 2's four norms and softcapping (eager: Gemma 2 has no
# SDPA), Gemma 3's q/k norms, GPT-NeoX's parallel residual and partial rotary (rotary_pct 0.25),
# and the mixture-of-experts blocks (4 experts, 2 per token). "hf_config" holds config.json fields
# passed as they are to transformers and to memmath.from_hf_config.
_DECODER = dict(family="llama", n_layers=3, hidden_size=64, n_heads=4, n_kv_heads=2, vocab_size=1000)
SHAPES.update({
    "gemma-gqa": dict(_DECODER, arch="gemma", head_dim=16, intermediate_size=176, tied_embeddings=True),
    "gemma2-gqa": dict(_DECODER, arch="gemma2", head_dim=16, intermediate_size=176, tied_embeddings=True,
                       hf_config=dict(sliding_window=4096, attn_logit_softcapping=50.0,
                                      final_logit_softcapping=30.0, query_pre_attn_scalar=16)),
    "gemma3-gqa": dict(_DECODER, arch="gemma3_text", head_dim=16, intermediate_size=176, tied_embeddings=True,
                       hf_config=dict(sliding_window=4096, query_pre_attn_scalar=16)),
    "neox-mha": dict(_DECODER, arch="gpt_neox", n_kv_heads=4, intermediate_size=256, tied_embeddings=False),
    "mixtral-moe": dict(_DECODER, arch="mixtral", intermediate_size=96, tied_embeddings=False,
                        hf_config=dict(num_local_experts=4, num_experts_per_tok=2)),
    "qwen2moe-moe": dict(_DECODER, arch="qwen2_moe", intermediate_size=176, tied_embeddings=False,
                         hf_config=dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                                        shared_expert_intermediate_size=96)),
    "qwen3moe-moe": dict(_DECODER, arch="qwen3_moe", head_dim=16, intermediate_size=176, tied_embeddings=True,
                         hf_config=dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                                        norm_topk_prob=True)),
})
# GPT-NeoX without the parallel residual, every head dim rotated: added with grid block 9, after the
# b = 1 eager fix (see there).
SHAPES["neox-serial"] = dict(SHAPES["neox-mha"], hf_config=dict(use_parallel_residual=False, rotary_pct=1.0))
# RoBERTa for sequence classification (its dense + out_proj head, no pooler; position ids from the
# token ids), grid block 10, added after its trace was written.
SHAPES["roberta"] = dict(SHAPES["bert"], arch="roberta", type_vocab_size=1)
# Gemma 3 with both layer types (one rotary cos/sin pair each), grid block 11, after its trace was written.
SHAPES["gemma3-mixed"] = dict(SHAPES["gemma3-gqa"], hf_config=dict(
    SHAPES["gemma3-gqa"]["hf_config"], layer_types=["sliding_attention", "full_attention", "sliding_attention"]))
MORE_FAMILIES = ("gemma-gqa", "gemma2-gqa", "gemma3-gqa", "neox-mha", "mixtral-moe", "qwen2moe-moe", "qwen3moe-moe",
                 "neox-serial", "roberta", "gemma3-mixed")
FIRST_FAMILIES = ("gpt2-tanh", "qwen2-gqa", "mistral-gqa", "qwen3-gqa", "phi3-gqa", "olmo2-gqa")
# The widths at which GPT-NeoX and Phi-3 configs with transformers' defaults (use_cache=True, Phi-3
# with a key/value head per query head) measured less than memmath predicted. Every shape above runs with
# use_cache=False; these set it in hf_config as a downloaded config.json does. Grid block 12, recorded after
# hf_activations modelled the training forward's DynamicCache (_kv_cache) and Phi-3's b = 1 eager v view.
_WIDE_DECODER = dict(_DECODER, hidden_size=256, n_kv_heads=4, intermediate_size=512, vocab_size=1024,
                     tied_embeddings=False)
SHAPES.update({
    "neox-256": dict(_WIDE_DECODER, arch="gpt_neox", hf_config=dict(use_cache=True)),
    "phi3-256": dict(_WIDE_DECODER, arch="phi3", hf_config=dict(use_cache=True)),
    "phi3-256-nocache": dict(_WIDE_DECODER, arch="phi3", hf_config=dict(use_cache=False)),
    "gpt2-256": dict(family="gpt2", arch="gpt2", n_layers=3, hidden_size=256, n_heads=4, intermediate_size=512,
                     vocab_size=1024, max_positions=256, tied_embeddings=True, hf_config=dict(use_cache=True)),
})
CACHE_FAMILIES = ("neox-256", "phi3-256", "phi3-256-nocache", "gpt2-256")
NEW_FAMILIES = FIRST_FAMILIES + MORE_FAMILIES + CACHE_FAMILIES
# Groups recorded after memmath's counting of them was written (8-bit Adam: tensor by
# tensor from bitsandbytes' source, before bitsandbytes was installed here).
HELD_OUT_GROUPS = ("8-bit Adam",)

DROPOUT_P = 0.1  # "dropout on": every dropout probability the family has, at 0.1; "off": 0.0
LORA_ALPHA = 16
PEFT_TARGETS = {
    # memmath target names -> the module names peft adapts (see memmath.models._LORA_TABLES)
    ("gpt2", "qv"): ["c_attn"],
    ("gpt2", "all"): ["c_attn", "c_proj", "c_fc"],
    ("llama", "qv"): ["q_proj", "v_proj"],
    ("llama", "all"): ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    ("phi3", "qv"): ["qkv_proj"],
    ("phi3", "all"): ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
    ("gpt_neox", "qv"): ["query_key_value"],
    ("gpt_neox", "all"): ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
    ("bert", "qv"): ["query", "value"],
    # "output.dense" matches both attention.output.dense and the MLP's output.dense; never the pooler.
    ("bert", "all"): ["query", "key", "value", "output.dense", "intermediate.dense"],
}


@dataclass(frozen=True)
class Case:
    """One measured configuration: a model shape and a training setup, in memmath's own words."""

    shape: str  # a key of SHAPES
    precision: str = "bf16"  # fp32 | bf16: the model's dtype (pure, no autocast)
    # adamw | sgd_momentum | adam_amsgrad (torch.optim; memmath.OPTIMIZERS keys) | adam8bit | adamw8bit
    # (bitsandbytes' Adam8bit / AdamW8bit, both memmath's "adam8bit")
    optimizer: str = "adamw"
    method: str = "full"  # full | freeze | lora | houlsby (validation/houlsby.py, BERT and LLaMA)
    frozen_layers: int = 0  # freeze: the first k blocks (and the embeddings) are frozen
    lora_rank: int = 8
    lora_targets: str = "qv"  # qv | all (every linear layer in the blocks)
    adapter_format: str = "fp32"  # lora: fp32 (peft's autocast_adapter_dtype=True) or the base format
    attention: str = "sdpa"  # eager | sdpa (transformers' attn_implementation)
    dropout: bool = False
    checkpointing: bool = False
    batch_size: int = 2
    seq_len: int = 64
    group: str = "transformers"  # the report's group: transformers (the first grid) | 8-bit Adam | ...
    bottleneck: int = 0  # houlsby: the adapters' width m (adapters stored in the model's dtype)

    @property
    def case_id(self) -> str:
        method = self.method
        if self.method == "freeze":
            method = f"freeze{self.frozen_layers}"
        elif self.method == "lora":
            method = f"lora{self.lora_rank}-{self.lora_targets}-{self.adapter_format}"
        elif self.method == "houlsby":
            method = f"houlsby{self.bottleneck}"
        parts = [self.shape, self.precision, self.optimizer, method, self.attention,
                 "drop" if self.dropout else "nodrop", "ckpt" if self.checkpointing else "nockpt",
                 f"b{self.batch_size}s{self.seq_len}"]
        return "/".join(parts)

    @property
    def held_out(self) -> bool:
        """Recorded after the prediction code it tests was written (see HELD_OUT, HELD_OUT_GROUPS)."""
        return self.shape in HELD_OUT or self.group in HELD_OUT_GROUPS or self.shape in NEW_FAMILIES

    def config(self) -> dict:
        """The full configuration, shape fields included, as recorded in the data file."""
        return {"case_id": self.case_id, **asdict(self), "held_out": self.held_out, "model": dict(SHAPES[self.shape])}


def grid() -> list[Case]:
    """The recorded grid: every axis (shape, precision, optimizer, method, attention, dropout, checkpointing, sizes),
    without the full cross product (see comments)."""
    cases: list[Case] = []
    shapes = [name for name in SHAPES if name not in HELD_OUT + NEW_FAMILIES]
    # 1. Methods x precisions x shapes (AdamW, SDPA, no dropout, no checkpointing, b=2, s=64).
    for shape, precision in itertools.product(shapes, ("fp32", "bf16")):
        methods = [dict(method="full"), dict(method="freeze", frozen_layers=1), dict(method="freeze", frozen_layers=2)]
        formats = ("fp32",) if precision == "fp32" else ("fp32", "bf16")
        for targets, fmt in itertools.product(("qv", "all"), formats):
            methods.append(dict(method="lora", lora_targets=targets, adapter_format=fmt))
        cases += [Case(shape, precision=precision, **m) for m in methods]
    # 2. Attention x dropout x checkpointing, full finetuning; precision alternates per shape.
    for i, shape in enumerate(shapes):
        for attention, dropout, ckpt in itertools.product(("eager", "sdpa"), (False, True), (False, True)):
            if attention == "sdpa" and not dropout and not ckpt:
                continue  # already in block 1
            precision = ("bf16", "fp32")[(i + dropout + ckpt) % 2]
            cases.append(Case(shape, precision=precision, attention=attention, dropout=dropout, checkpointing=ckpt))
    # 3. The other optimizers, on full finetuning and LoRA.
    for i, shape in enumerate(shapes):
        for j, (optimizer, method) in enumerate(itertools.product(("sgd_momentum", "adam_amsgrad"), ("full", "lora"))):
            cases.append(Case(shape, precision=("fp32", "bf16")[(i + j) % 2], optimizer=optimizer, method=method))
    # 4. Batch sizes and sequence lengths (eager attention with dropout: the s^2 terms show).
    for shape in ("gpt2", "llama-gqa", "bert"):
        for b, s in ((1, 32), (4, 32), (1, 128), (4, 128), (8, 16)):
            cases.append(Case(shape, precision="bf16", attention="eager", dropout=True, batch_size=b, seq_len=s))
    # 5. Combinations that interact: freezing or LoRA with checkpointing, LoRA with eager dropout.
    for shape in shapes:
        cases.append(Case(shape, precision="bf16", method="freeze", frozen_layers=1, checkpointing=True))
        cases.append(Case(shape, precision="bf16", method="lora", checkpointing=True))
        cases.append(Case(shape, precision="fp32", method="lora", lora_targets="all", attention="eager", dropout=True))
    # 6. Held out: wider shapes, mixed settings, measured only after the model was written.
    for shape in HELD_OUT:
        cases += [
            Case(shape, precision="bf16", batch_size=2, seq_len=96),
            Case(shape, precision="fp32", optimizer="adam_amsgrad", attention="eager", dropout=True, batch_size=1,
                 seq_len=80),
            Case(shape, precision="bf16", method="freeze", frozen_layers=3, checkpointing=True, batch_size=3,
                 seq_len=48),
            Case(shape, precision="bf16", method="lora", lora_rank=16, lora_targets="all", attention="eager",
                 batch_size=2, seq_len=64),
            Case(shape, precision="fp32", method="lora", lora_rank=4, optimizer="sgd_momentum", dropout=True,
                 checkpointing=True, batch_size=2, seq_len=112),
        ]
    # 7. Held out: the first model_types read from config.json (FIRST_FAMILIES), full finetuning and LoRA, bf16 and fp32.
    for shape in FIRST_FAMILIES:
        cases += [
            Case(shape, precision="bf16", batch_size=2, seq_len=64),
            Case(shape, precision="fp32", attention="eager", dropout=True, batch_size=1, seq_len=48),
            Case(shape, precision="bf16", method="lora", lora_targets="all", adapter_format="fp32", batch_size=2,
                 seq_len=64),
            Case(shape, precision="fp32", method="lora", checkpointing=True, batch_size=2, seq_len=32),
        ]
    # Phi-3 once more, measured after the SDPA-output copy was modelled (its bf16 SDPA case had missed).
    cases += [Case("phi3-gqa", precision="bf16", method="freeze", frozen_layers=1, batch_size=3, seq_len=40),
              Case("phi3-gqa", precision="bf16", method="lora", lora_targets="all", adapter_format="bf16",
                   batch_size=1, seq_len=72)]
    # OLMo 2 once more, measured after its fp32 rotary tables were modelled (its bf16 cases had missed).
    cases += [Case("olmo2-gqa", precision="bf16", method="freeze", frozen_layers=1, batch_size=3, seq_len=40),
              Case("olmo2-gqa", precision="bf16", method="lora", lora_targets="all", adapter_format="bf16",
                   checkpointing=True, batch_size=1, seq_len=72)]
    # 8. Held out: the other model types read from config.json (MORE_FAMILIES), measured after their traces were written.
    for shape in MORE_FAMILIES[:-3]:
        attention = "eager" if shape == "gemma2-gqa" else "sdpa"  # Gemma 2 has no SDPA (softcapping)
        cases += [
            Case(shape, precision="bf16", attention=attention, batch_size=2, seq_len=64),
            Case(shape, precision="fp32", attention="eager", dropout=True, batch_size=1, seq_len=48),
            Case(shape, precision="bf16", method="lora", lora_targets="all", adapter_format="fp32",
                 attention=attention, batch_size=2, seq_len=64),
            Case(shape, precision="fp32", method="lora", attention=attention, checkpointing=True, batch_size=2,
                 seq_len=32),
            Case(shape, precision="bf16", method="freeze", frozen_layers=1, attention=attention, batch_size=3,
                 seq_len=40),
        ]
    # 9. GPT-NeoX again, measured after its eager b = 1 case had missed (at b = 1 probs @ v keeps the whole
    # fused qkv storage, a view, where b > 1 copies v): both batch sides, and the serial residual.
    cases += [Case("neox-mha", precision="bf16", attention="eager", batch_size=1, seq_len=56),
              Case("neox-mha", precision="fp32", attention="eager", dropout=True, batch_size=2, seq_len=40),
              Case("neox-serial", precision="bf16", batch_size=2, seq_len=64),
              Case("neox-serial", precision="fp32", attention="eager", dropout=True, batch_size=1, seq_len=48),
              Case("neox-serial", precision="bf16", method="lora", lora_targets="all", adapter_format="bf16",
                   checkpointing=True, batch_size=2, seq_len=48)]
    # 10. RoBERTa, measured after its trace was written (the BERT block, RoBERTa's embeddings and head).
    cases += [Case("roberta", precision="bf16", batch_size=2, seq_len=64),
              Case("roberta", precision="fp32", attention="eager", dropout=True, batch_size=1, seq_len=48),
              Case("roberta", precision="bf16", method="lora", lora_targets="all", adapter_format="fp32", batch_size=2,
                   seq_len=64),
              Case("roberta", precision="fp32", method="lora", checkpointing=True, batch_size=2, seq_len=32),
              Case("roberta", precision="bf16", method="freeze", frozen_layers=1, dropout=True, batch_size=3,
                   seq_len=40)]
    # 11. Gemma 3 with a full-attention block between sliding ones: the second rotary pair, frozen blocks too.
    cases += [Case("gemma3-mixed", precision="bf16", batch_size=2, seq_len=64),
              Case("gemma3-mixed", precision="fp32", attention="eager", dropout=True, batch_size=1, seq_len=48),
              Case("gemma3-mixed", precision="bf16", method="freeze", frozen_layers=2, batch_size=2, seq_len=40)]
    # 12. Held out: GPT-NeoX, Phi-3 and GPT-2 with use_cache=True at hidden 256, after the cache was
    # modelled: SDPA and eager at b = 1 (views of the fused projections), dropout (the CPU math kernel), LoRA,
    # frozen blocks (whose k and v the cache holds) and checkpointing (which turns the cache off); Phi-3 without
    # the cache for its b = 1 eager v view.
    cases += [Case("neox-256", precision="bf16", batch_size=1, seq_len=200),
              Case("neox-256", precision="bf16", attention="eager", batch_size=1, seq_len=96),
              Case("neox-256", precision="fp32", dropout=True, batch_size=2, seq_len=64),
              Case("neox-256", precision="bf16", method="lora", lora_targets="all", adapter_format="fp32",
                   batch_size=2, seq_len=80),
              Case("neox-256", precision="bf16", method="freeze", frozen_layers=1, batch_size=3, seq_len=48),
              Case("neox-256", precision="bf16", checkpointing=True, batch_size=2, seq_len=64),
              Case("phi3-256", precision="bf16", batch_size=1, seq_len=200),
              Case("phi3-256", precision="bf16", attention="eager", batch_size=1, seq_len=96),
              Case("phi3-256", precision="fp32", dropout=True, batch_size=2, seq_len=64),
              Case("phi3-256", precision="bf16", method="lora", lora_targets="all", adapter_format="bf16",
                   batch_size=2, seq_len=80),
              Case("phi3-256", precision="bf16", method="freeze", frozen_layers=2, attention="eager", dropout=True,
                   batch_size=3, seq_len=40),
              Case("phi3-256", precision="bf16", method="lora", checkpointing=True, batch_size=2, seq_len=64),
              Case("phi3-256-nocache", precision="bf16", attention="eager", batch_size=1, seq_len=112),
              Case("phi3-256-nocache", precision="bf16", batch_size=2, seq_len=72),
              Case("gpt2-256", precision="bf16", batch_size=1, seq_len=160),
              Case("gpt2-256", precision="bf16", attention="eager", batch_size=1, seq_len=96),
              Case("gpt2-256", precision="bf16", method="lora", lora_targets="all", adapter_format="fp32",
                   batch_size=2, seq_len=64),
              Case("gpt2-256", precision="fp32", dropout=True, batch_size=2, seq_len=48)]
    cases += eight_bit_grid()
    ids = [c.case_id for c in cases]
    duplicates = {i for i in ids if ids.count(i) > 1}
    if duplicates:
        raise AssertionError(f"duplicate cases in the grid: {sorted(duplicates)}")
    return cases


def eight_bit_grid() -> list[Case]:
    """bitsandbytes' Adam8bit and AdamW8bit on full finetuning and LoRA: tensors on both sides of its
    min_8bit_size (4,096 elements: norms and LoRA rank 8's A and B keep fp32 states; the matrices,
    and LoRA rank 64's 64 x 64 or 128 x 64 adapters, 8-bit ones)."""
    cases = []
    # The shapes of the first grid (the model types read from config.json, NEW_FAMILIES, are not in this group).
    for i, shape in enumerate(name for name in SHAPES if name not in NEW_FAMILIES):
        for j, optimizer in enumerate(("adam8bit", "adamw8bit")):
            precision = ("fp32", "bf16")[(i + j) % 2]
            cases += [
                Case(shape, precision=precision, optimizer=optimizer, group="8-bit Adam"),
                Case(shape, precision=precision, optimizer=optimizer, method="lora", lora_targets="all",
                     group="8-bit Adam"),
                Case(shape, precision=("bf16", "fp32")[(i + j) % 2], optimizer=optimizer, method="lora",
                     lora_rank=64, group="8-bit Adam"),
            ]
        cases.append(Case(shape, precision="bf16", optimizer="adamw8bit", method="freeze", frozen_layers=1,
                          checkpointing=True, attention="eager", dropout=True, group="8-bit Adam"))
    return cases


# ---- building the model -------------------------------------------------------------------------
def _hf_config(case: Case):
    import transformers

    m = SHAPES[case.shape]
    p = DROPOUT_P if case.dropout else 0.0
    if m["family"] == "gpt2":
        config = transformers.GPT2Config(
            n_layer=m["n_layers"], n_embd=m["hidden_size"], n_head=m["n_heads"], n_inner=m["intermediate_size"],
            vocab_size=m["vocab_size"], n_positions=m["max_positions"], tie_word_embeddings=m["tied_embeddings"],
            resid_pdrop=p, embd_pdrop=p, attn_pdrop=p, use_cache=m.get("hf_config", {}).get("use_cache", False),
            bos_token_id=0, eos_token_id=0, activation_function=m.get("hidden_act", "gelu_new"))
    elif m["family"] == "llama":
        extra = {key: m[key] for key in ("sliding_window", "head_dim") if key in m}
        extra.update(m.get("hf_config", {}))
        if m.get("arch") == "phi3":
            extra.update(resid_pdrop=p, sliding_window=None)  # PEFT_TARGETS phi3: qkv_proj, gate_up_proj
        if m.get("arch") == "gpt_neox":
            extra.update(hidden_dropout=p)  # post-attention, post-MLP and embedding dropout
        config = transformers.AutoConfig.for_model(
            m.get("arch", "llama"),
            num_hidden_layers=m["n_layers"], hidden_size=m["hidden_size"], num_attention_heads=m["n_heads"],
            num_key_value_heads=m["n_kv_heads"], intermediate_size=m["intermediate_size"], vocab_size=m["vocab_size"],
            tie_word_embeddings=m["tied_embeddings"], attention_dropout=p, max_position_embeddings=256,
            use_cache=extra.pop("use_cache", False), bos_token_id=0, eos_token_id=0, pad_token_id=0, **extra)
    elif m.get("arch") == "roberta":
        config = transformers.RobertaConfig(
            num_hidden_layers=m["n_layers"], hidden_size=m["hidden_size"], num_attention_heads=m["n_heads"],
            intermediate_size=m["intermediate_size"], vocab_size=m["vocab_size"],
            max_position_embeddings=m["max_positions"], type_vocab_size=m["type_vocab_size"],
            num_labels=m["num_labels"], hidden_dropout_prob=p, attention_probs_dropout_prob=p, pad_token_id=1)
    else:
        config = transformers.BertConfig(
            num_hidden_layers=m["n_layers"], hidden_size=m["hidden_size"], num_attention_heads=m["n_heads"],
            intermediate_size=m["intermediate_size"], vocab_size=m["vocab_size"],
            max_position_embeddings=m["max_positions"], type_vocab_size=m["type_vocab_size"],
            num_labels=m["num_labels"], hidden_dropout_prob=p, attention_probs_dropout_prob=p, pad_token_id=0)
    config._attn_implementation = case.attention
    return config


def model_blocks(model, family):
    """The transformer blocks, wherever peft has put the base model."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if family == "gpt2":
        return base.transformer.h
    if family == "llama":
        return base.gpt_neox.layers if hasattr(base, "gpt_neox") else base.model.layers
    return base.roberta.encoder.layer if hasattr(base, "roberta") else base.bert.encoder.layer


def _freeze(model, case: Case, family: str):
    """memmath's Freeze(frozen_layers=k): embeddings and the first k blocks frozen; final norm and an
    untied head train (a tied head IS the frozen embedding); BERT's pooler and classifier train."""
    for p in model.parameters():
        p.requires_grad_(False)
    blocks = model_blocks(model, family)
    for block in list(blocks)[case.frozen_layers:]:
        for p in block.parameters():
            p.requires_grad_(True)
    if family == "gpt2":
        trainable_extra = [model.transformer.ln_f]
    elif family == "llama" and hasattr(model, "gpt_neox"):
        trainable_extra = [model.gpt_neox.final_layer_norm, model.lm_head]
    elif family == "llama":
        trainable_extra = [model.model.norm]
        if not SHAPES[case.shape]["tied_embeddings"]:
            trainable_extra.append(model.lm_head)
    elif hasattr(model, "roberta"):
        trainable_extra = [model.classifier]  # RobertaClassificationHead (no pooler)
    else:
        trainable_extra = [model.bert.pooler, model.classifier]
    for module in trainable_extra:
        for p in module.parameters():
            p.requires_grad_(True)


def _peft_family(case: Case) -> str:
    """The key of PEFT_TARGETS: Phi-3's fused matrices have their own names; other LLaMA layouts share LLaMA's."""
    arch = SHAPES[case.shape].get("arch")
    return arch if arch in ("phi3", "gpt_neox") else SHAPES[case.shape]["family"]


def build(case: Case, device: str = "cpu"):
    """(model, optimizer, batch): the model in train mode, its method applied, one batch of inputs."""
    import torch
    import transformers

    family = SHAPES[case.shape]["family"]
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[case.precision]
    torch.manual_seed(0)
    config = _hf_config(case)
    model_class = {"gpt2": transformers.GPT2LMHeadModel, "llama": transformers.LlamaForCausalLM,
                   "bert": transformers.BertForSequenceClassification}[family]
    if SHAPES[case.shape].get("arch") == "roberta":
        model_class = transformers.RobertaForSequenceClassification
    elif SHAPES[case.shape].get("arch") not in (None, "gpt2", "llama"):
        model_class = transformers.AutoModelForCausalLM.from_config  # Qwen2ForCausalLM, MistralForCausalLM
    model = model_class(config)
    model = model.to(device=device, dtype=dtype)
    if case.checkpointing:
        # transformers' default: non-reentrant torch.utils.checkpoint around every block, and a hook
        # that makes the embedding output require grad (so frozen early blocks still checkpoint).
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    if case.method == "freeze":
        _freeze(model, case, family)
    elif case.method == "lora":
        import peft

        lora_config = peft.LoraConfig(r=case.lora_rank, lora_alpha=LORA_ALPHA, lora_dropout=0.0, bias="none",
                                      target_modules=PEFT_TARGETS[(_peft_family(case), case.lora_targets)],
                                      fan_in_fan_out=(family == "gpt2"))
        # autocast_adapter_dtype=True (peft's default) keeps adapters in fp32 on a 16-bit base.
        autocast = case.adapter_format == "fp32"
        model = peft.get_peft_model(model, lora_config, autocast_adapter_dtype=autocast)
    elif case.method == "houlsby":
        from . import houlsby

        houlsby.insert(model, model_blocks(model, family), family, SHAPES[case.shape]["hidden_size"], case.bottleneck,
                       dtype)
    elif case.method != "full":
        raise ValueError(f"unknown method {case.method!r}")
    model.train()

    optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad], case.optimizer)

    generator = torch.Generator().manual_seed(1)
    vocab = SHAPES[case.shape]["vocab_size"]
    input_ids = torch.randint(1, vocab, (case.batch_size, case.seq_len), generator=generator).to(device)
    if family == "bert":
        labels = (torch.arange(case.batch_size) % SHAPES[case.shape]["num_labels"]).to(device)
    else:
        labels = input_ids.clone()
    return model, optimizer, {"input_ids": input_ids, "labels": labels}


# ---- measuring ------------------------------------------------------------------------------------
def _storage_key(t):
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


class SavedTensorRecorder:
    """Records every storage that autograd saves for backward while active, once, by block.

    Parameters and buffers are left out (they exist without the forward pass). A forward pre-hook
    on each block says which block is running; anything saved outside a block counts as "outside".
    """

    def __init__(self, model, blocks):
        self.excluded = {_storage_key(t)[0] for t in itertools.chain(model.parameters(), model.buffers())}
        self.region = -1
        self.first_region: dict[int, int] = {}
        self.nbytes: dict[int, int] = {}
        self.handles = []
        self.log = []  # (region, shape, dtype, bytes or 0 when already counted, producing op) for --explain
        for i, block in enumerate(blocks):
            self.handles.append(block.register_forward_pre_hook(lambda *_, i=i: self._enter(i)))
            self.handles.append(block.register_forward_hook(lambda *_: self._enter(-1)))

    def _enter(self, region):
        self.region = region

    def pack(self, t):
        ptr, nbytes = _storage_key(t)
        if not ptr or ptr in self.excluded:
            return t
        new = ptr not in self.nbytes
        if new:
            self.nbytes[ptr] = nbytes
            self.first_region[ptr] = self.region
        op = type(t.grad_fn).__name__ if t.grad_fn is not None else ("leaf" if t.requires_grad else "no grad")
        self.log.append((self.region, tuple(t.shape), str(t.dtype).replace("torch.", ""), nbytes if new else 0, op))
        return t

    @staticmethod
    def unpack(t):
        return t

    def hooks(self):
        import torch

        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def per_region(self, n_blocks):
        per_block = [0] * n_blocks
        outside = 0
        for ptr, nbytes in self.nbytes.items():
            region = self.first_region[ptr]
            if region < 0:
                outside += nbytes
            else:
                per_block[region] += nbytes
        return per_block, outside

    def close(self):
        for handle in self.handles:
            handle.remove()


def report_progress(i: int, n: int, case, measured: dict, started: float) -> None:
    """One line on stderr per recorded case: its saved bytes and both step peaks, and how long it took."""
    print(f"[{i:3d}/{n}] {case.case_id}  saved {measured['saved_bytes']:,} B  peak "
          f"{measured.get('peak_step1_bytes', 0):,} / {measured.get('peak_bytes', 0):,} B  "
          f"({time.perf_counter() - started:.2f} s)", file=sys.stderr)


def quiet_libraries() -> None:
    """Warnings off and transformers' logging at errors only, for a recording's output to stay readable."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    try:
        import transformers

        transformers.logging.set_verbosity_error()
    except Exception:  # pragma: no cover
        pass


STEPS = 2  # step 1 builds the optimizer states; from step 2 on they exist during forward and backward


def _is_adapter(name: str) -> bool:
    """A LoRA (peft) or Houlsby (validation/houlsby.py) adapter's parameter."""
    return "lora_" in name or ".houlsby." in name


def adapter_grid() -> list[Case]:
    """Houlsby adapters in BERT and LLaMA (validation/houlsby.py): counts, gradients and states to
    check; saved activations and peaks recorded (memmath's transformers model refuses adapters)."""
    cases = []
    for i, shape in enumerate(("bert", "llama-mha", "llama-gqa", "bert-wide", "llama-wide")):
        for j, bottleneck in enumerate((8, 32)):
            for k, optimizer in enumerate(("adamw", "sgd_momentum")):
                cases.append(Case(shape, precision=("fp32", "bf16")[(i + j + k) % 2], optimizer=optimizer,
                                  method="houlsby", bottleneck=bottleneck, group="Houlsby adapters"))
    return cases


def configure_torch():
    """Settings every measurement runs under (the recording and the live tests alike).

    One thread: CPU kernels size scratch buffers by thread count. oneDNN off: with it, BERT's bf16
    linear layers (bias, 3-d input) allocate oneDNN scratch pads whose size depends on the host's
    instruction set (measured: the same case peaked 1,373,508 B on the recording host and 1,417,672 B
    on a host without avx512_bf16; with ONEDNN_MAX_CPU_ISA=AVX2 or oneDNN off, 1,320,724 B on both).
    A GPU has no oneDNN, so the peak memmath models is the one without those pads.
    """
    import torch

    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False


def measure(case: Case, device: str = "cpu", explain: bool = False, build_fn=None) -> dict:
    """Run two training steps of `case` and return what they allocated (see the module docstring).

    The loop is the usual one: loss = model(**batch).loss; loss.backward(); optimizer.step();
    optimizer.zero_grad(set_to_none=True), the loss kept until the next step replaces it. A case with
    grad_accum_steps = k > 1 (validation/grad_accum.py) runs k forward and backward passes of its batch before each
    optimizer.step(), each loss divided by k; peak_step{n}_micro{j}_{phase}_bytes records each pass and
    peak_step{n}_{phase}_bytes the highest of them.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    family = SHAPES[case.shape]["family"]
    model, optimizer, batch = (build_fn or build)(case, device)  # build_fn: validation/quantized.py's, amp.py's
    blocks = model_blocks(model, family)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    adapters = [p for n, p in model.named_parameters() if _is_adapter(n)]
    # Alive before the step: parameters, buffers, the batch, and what the optimizer made at
    # construction (bitsandbytes' quantization maps, name2qmap, shared later by every 8-bit state).
    made_by_optimizer = [t for t in getattr(optimizer, "name2qmap", {}).values() if hasattr(t, "untyped_storage")]
    # Tensors a build_fn says exist besides parameters and buffers (bitsandbytes' quantization states).
    made_by_build = getattr(model, "resident_tensors", ())
    resident = _unique_bytes(itertools.chain(params, model.buffers(), batch.values(), made_by_optimizer, made_by_build))
    recorder = SavedTensorRecorder(model, blocks)
    phases = ("forward", "backward", "optimizer_step")
    # Gradient accumulation (validation/grad_accum.py's cases): `micro` micro-batches of the batch per optimizer step,
    # each loss divided by micro and backward adding into .grad; each micro-batch's pass is profiled apart.
    micro = getattr(case, "grad_accum_steps", 1)

    def label(k, j, phase):
        return f"step{k}/{phase}" if micro == 1 or phase == "optimizer_step" else f"step{k}/micro{j}/{phase}"

    names = list(dict.fromkeys(label(k, j, phase) for k in range(1, STEPS + 1) for j in range(1, micro + 1)
                               for phase in phases))

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        allocated_before = torch.cuda.memory_allocated()
        prof_context = contextlib.nullcontext()
    else:
        prof_context = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    cuda_peaks = []
    loss = None
    with prof_context as prof:
        for k in range(1, STEPS + 1):
            for j in range(1, micro + 1):
                hooks = recorder.hooks() if k == 1 and j == 1 else contextlib.nullcontext()
                with record_function(label(k, j, "forward")), hooks:
                    loss = model(**batch).loss  # the logits go at once, as in a loop that keeps the loss only
                    if micro > 1:
                        loss = loss / micro
                with record_function(label(k, j, "backward")):
                    loss.backward()
            with record_function(f"step{k}/optimizer_step"):
                optimizer.step()
            if k == 1:
                grad_bytes = _unique_bytes(p.grad for p in params)
            optimizer.zero_grad(set_to_none=True)
            if device == "cuda":
                torch.cuda.synchronize()
                cuda_peaks.append(torch.cuda.max_memory_allocated())
                torch.cuda.reset_peak_memory_stats()
    recorder.close()
    if explain:
        for region, shape, dtype, nbytes, op in recorder.log:
            where = "outside" if region < 0 else f"block {region}"
            print(f"  {where:8s} {str(shape):18s} {dtype:9s} {nbytes:>9,} {op}" if nbytes else
                  f"  {where:8s} {str(shape):18s} {dtype:9s} {'(again)':>9s} {op}", file=sys.stderr)

    per_block, outside = recorder.per_region(len(blocks))
    # Each storage once: bitsandbytes shares its two quantization maps (qmap1, qmap2) across tensors.
    states: dict[str, int] = {}
    seen_states = set()
    for state in optimizer.state.values():
        for key, value in state.items():
            if torch.is_tensor(value) and _storage_key(value)[0] not in seen_states:
                seen_states.add(_storage_key(value)[0])
                states[key] = states.get(key, 0) + value.untyped_storage().nbytes()
    result = {
        "total_params": sum(p.numel() for n, p in model.named_parameters() if not _is_adapter(n)),
        "trainable_params": sum(p.numel() for p in trainable),
        "adapter_params": sum(p.numel() for p in adapters),
        "trainable_tensors": len(trainable),
        "param_bytes": _unique_bytes(params),
        "grad_bytes": grad_bytes,
        "optimizer_state_bytes": sum(states.values()),
        "optimizer_state_detail": dict(sorted(states.items())),
        "saved_bytes": sum(per_block) + outside,
        "saved_per_layer": per_block,
        "saved_outside_layers": outside,
        "resident_before_bytes": resident,
    }
    if device == "cuda":
        result["cuda_allocated_before_bytes"] = allocated_before
        for k, peak in enumerate(cuda_peaks, 1):
            result[f"cuda_max_allocated_step{k}_bytes"] = peak
        result["cuda_reserved_bytes"] = torch.cuda.memory_reserved()
    else:
        peaks, _ = phase_peaks(prof, names)
        for k in range(1, STEPS + 1):
            for phase in phases:
                if micro > 1 and phase != "optimizer_step":  # the step's phase: its highest micro-batch
                    for j in range(1, micro + 1):
                        result[f"peak_step{k}_micro{j}_{phase}_bytes"] = resident + peaks[label(k, j, phase)]
                    result[f"peak_step{k}_{phase}_bytes"] = max(
                        result[f"peak_step{k}_micro{j}_{phase}_bytes"] for j in range(1, micro + 1))
                    continue
                result[f"peak_step{k}_{phase}_bytes"] = resident + peaks[f"step{k}/{phase}"]
            result[f"peak_step{k}_bytes"] = max(result[f"peak_step{k}_{phase}_bytes"] for phase in phases)
        # The steady-state peak (every step after the first): what memmath.peak_memory predicts by default.
        result["peak_bytes"] = result[f"peak_step{STEPS}_bytes"]
    del model, optimizer, loss
    return result


def versions() -> dict:
    import bitsandbytes
    import peft
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "bitsandbytes": bitsandbytes.__version__, "python": platform.python_version()}


def recorder_main(doc: str, grid_fn, run_fn, default_out: Path, description: str, shapes: dict, argv=None, *,
                  appendable: bool = False, extra: dict | None = None) -> None:
    """The command line of a script that measures its own group of cases into its own data file (validation/
    sliding.py, padding.py): --out, --only, --print, --explain (and --append, keeping the file's other records, where
    appendable). grid_fn() gives the cases, run_fn(cases, explain=) their records; the file holds `description`,
    the machine's versions, the shapes the cases use (from `shapes`) and any `extra` keys (a loss's beta)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--only", default=None, help="measure only cases whose id contains this text")
    parser.add_argument("--print", action="store_true", help="print the records instead of writing a file")
    parser.add_argument("--explain", action="store_true", help="list every saved storage (to stderr)")
    if appendable:
        parser.add_argument("--append", action="store_true", help="keep the file's other records, replace these")
    args = parser.parse_args(argv)

    quiet_libraries()
    cases = [c for c in grid_fn() if not args.only or args.only in c.case_id]
    records = run_fn(cases, explain=args.explain)
    if args.print:
        json.dump(records, sys.stdout, indent=1)
        return
    document = {"schema": SCHEMA_VERSION, "description": description, "device": "cpu", "threads": 1,
                "versions": versions(), "dropout_p": DROPOUT_P, "lora_alpha": LORA_ALPHA, **(extra or {}),
                "shapes": {name: dict(shapes[name]) for name in sorted({c.shape for c in cases})}, "cases": records}
    if appendable and args.append and args.out.exists():
        old = json.loads(args.out.read_text(encoding="utf-8"))
        new_ids = {r["config"]["case_id"] for r in records}
        document["cases"] = [r for r in old["cases"] if r["config"]["case_id"] not in new_ids] + records
        document["shapes"] = {**old.get("shapes", {}), **document["shapes"]}
        document["versions"] = old["versions"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)


def run(cases, device="cpu", progress=True, explain=False) -> list[dict]:
    configure_torch()
    records = []
    for i, case in enumerate(cases, 1):
        started = time.perf_counter()
        measured = measure(case, device, explain=explain)
        if progress:
            report_progress(i, len(cases), case, measured, started)
        records.append({"config": case.config(), "measured": measured})
    return records


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--out", type=Path, default=None, help=f"data file to write (default {DEFAULT_OUT} on cpu)")
    parser.add_argument("--only", default=None, help="measure only cases whose id contains this text")
    parser.add_argument("--limit", type=int, default=None, help="measure at most this many cases")
    parser.add_argument("--print", action="store_true", help="print the records instead of writing a file")
    parser.add_argument("--append", action="store_true",
                        help="add the measured cases to the existing data file, keeping its other records")
    parser.add_argument("--explain", action="store_true", help="list every saved storage (implies --print)")
    parser.add_argument("--no-sharded", action="store_true",
                        help="accepted for older scripts: the sharded runs are python -m validation.sharded's, always kept")
    args = parser.parse_args(argv)

    quiet_libraries()

    cases = grid()
    if args.only:
        cases = [c for c in cases if args.only in c.case_id]
    if args.limit:
        cases = cases[: args.limit]
    started = time.perf_counter()
    records = run(cases, device=args.device, explain=args.explain)
    adapter_cases = [c for c in adapter_grid() if not args.only or args.only in c.case_id]
    adapter_records = run(adapter_cases, device=args.device)
    sharded_records = []
    out = args.out or (DEFAULT_OUT if args.device == "cpu" else None)
    if out is not None and out.exists():
        # The sharded runs are recorded by `python -m validation.sharded` (which imports this module): kept here.
        sharded_records = json.loads(out.read_text(encoding="utf-8")).get("sharded_cases", [])
    elapsed = time.perf_counter() - started
    print(f"measured {len(records)} cases in {elapsed:.1f} s", file=sys.stderr)
    if args.print or args.explain:
        json.dump(records + adapter_records, sys.stdout, indent=1)
        return
    if out is None:
        parser.error("--out is required with --device cuda (the CPU recording stays as it is)")
    document = {
        "schema": SCHEMA_VERSION,
        "description": "One training step per case, measured by validation/measure.py; see memmath/measured.py.",
        "device": args.device,
        "threads": 1,
        "versions": versions(),
        "dropout_p": DROPOUT_P,
        "lora_alpha": LORA_ALPHA,
        "shapes": SHAPES,
        "cases": records,
        # Houlsby adapters (validation/houlsby.py): memmath predicts their counts, gradients and states.
        "adapter_cases": adapter_records,
        # One record per sharded case, every measured value a list with one entry per rank.
        "sharded_cases": sharded_records,
    }
    if args.append and out.exists():
        old = json.loads(out.read_text(encoding="utf-8"))
        for key in ("cases", "adapter_cases", "sharded_cases"):  # keep every record not measured anew
            new_ids = {r["config"]["case_id"] for r in document[key]}
            document[key] = [r for r in old.get(key, []) if r["config"]["case_id"] not in new_ids] + document[key]
        for key, value in old.items():  # and what the other recorders wrote (quantized_cases, amp_cases, ...)
            document.setdefault(key, value)
        if old.get("versions") != document["versions"]:
            document["versions_appended"] = document.pop("versions")
            document["versions"] = old["versions"]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}", file=sys.stderr)


def make_optimizer(params, name: str):
    """The optimizer a case names (memmath.OPTIMIZERS keys, and bitsandbytes' 8-bit two), at lr 1e-3."""
    import torch

    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    if name == "adam_amsgrad":
        return torch.optim.Adam(params, lr=1e-3, amsgrad=True)
    if name == "sgd_momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    if name in ("adam8bit", "adamw8bit"):
        import bitsandbytes as bnb

        # bitsandbytes' defaults: block-wise 8-bit states, min_8bit_size=4096.
        return (bnb.optim.Adam8bit if name == "adam8bit" else bnb.optim.AdamW8bit)(params, lr=1e-3)
    raise ValueError(f"unknown optimizer {name!r}")

if __name__ == "__main__":
    main()
