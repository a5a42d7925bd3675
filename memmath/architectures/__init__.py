"""One module per transformers model type (memmath/architectures/<model_type>.py), found by listing this folder.

Each module holds one `Architecture` (record.py) named ARCHITECTURE: the config fields the type reads and what
they change, and its behaviour as functions the record names. The generic modules only ask the record:

- models.py: `record.tensors(shape, group)` lists the parameter tensors ("embeddings", "layer", "final_norm",
  "head"), `record.lora_modules(shape)` maps peft's targets onto its modules, `record.module_order` orders them;
- hf_activations.py: `record.trace_embeddings`, `record.trace_block` and `record.trace_head` replay the forward pass
  on memmath/trace.py's tracer (one block gets a `_steps.Pass`: attention kind, dropout, rotary tables, cache, LoRA);
- parallel.py and sharding.py: `record.tp_plan` (transformers' base_model_tp_plan names) and `record.conv1d`;
- inference.py: `record.kv_cache_values` and `record.prefill_phases`;
- peak.py, the config reader and ModelShape's checks: facts such as `causal`, `rotary`, `norms_last`.

The private modules are the pieces records share, each once, as both tensors and trace steps: _decoder.py (the rotary
decoder: attention, SwiGLU MLP, RMSNorms, embeddings, the causal LM head and loss, its KV cache and prefill),
_moe.py (a sparse mixture of experts), _encoder.py (BERT's encoder, used by BERT and RoBERTa), _steps.py (what
every block shares: Pass, the DynamicCache copies, Houlsby adapters), _parts.py (ParamTensor, LoraAdapter).

To add a model type:
1. A LLaMA clone (new config fields, the same layers): copy mistral.py or qwen2.py, list its fields with
   decoder_fields(...), read its options in read_options, and name the facts that differ (sliding windows, masks,
   biases). Nothing else changes: the defaults are the rotary decoder's.
2. A new attention kind, MLP, MoE variant or norm placement: write its tensors and its trace step in the type's
   module (see gpt_neox.py: its attention tensors composed into _decoder.tensors, its own block; olmo2.py: its own
   rotary and block), composing _decoder's and _steps' pieces; a variant several types share (an MoE router, a
   latent attention) goes in a private module of its own, like _moe.py. Name the functions in the record:
   tensors=partial(_decoder.tensors, attention=...), trace_block=..., lora_modules=..., tp_plan=...
3. A recurrent state (Mamba-style layers) or a cache of another shape: give the record its own kv_cache_values
   (the values the state holds for a batch and context) and prefill_phases.
4. Tests: its parameter count against transformers' on the meta device (tests/test_architectures.py), its LoRA
   targets against peft, and, before `traced=True`, its activations against a recorded PyTorch measurement
   (validation/measure.py, tests/test_fidelity.py). Until measured, set traced=False (activations='textbook').
Add the type to _ORDER below to place it in listings. Vision-language wrappers (gemma3, llava, mistral3,
qwen2_vl, ...) read their language model through these records; their own fields live in memmath/multimodal.py.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping

from . import _decoder
from ._refused import refusal
from .record import Architecture

# The order models are listed in (the families first, then the rotary decoders as transformers added them).
_ORDER = ("gpt2", "llama", "mistral", "bert", "roberta", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
          "gemma", "gemma2", "gemma3_text", "phi3", "olmo2", "gpt_neox")
_ORDER += ("gpt_oss", "deepseek_v3", "deepseek_v2", "glm4_moe")  # the mixtures of experts of the latest releases
_ORDER += ("smollm3", "granite", "llama4_text")  # SmolLM3, Granite 3.x, Llama 4: NoPE, multipliers, chunks
_ORDER += ("olmo3", "seed_oss")  # OLMo 3, Seed-OSS: OLMo 2 with sliding windows, LLaMA with residual dropout
_ORDER += ("cohere2", "apertus")  # Command R7B / Command A, Apertus: a parallel block, xIELU
_ORDER += ("ernie4_5", "exaone4")  # ERNIE 4.5 dense, EXAONE 4.0: LLaMA with biases, hybrid post-norm
_ORDER += ("ernie4_5_moe",)  # ERNIE 4.5 MoE: shared experts, dense MLPs between the MoE blocks
_ORDER += ("minimax_m2", "glm4_moe_lite")  # MiniMax-M2: q/k norms over all heads; GLM-4.7-Flash: latent attention


class _Records(Mapping):
    """Every model type's record, by model type, each module imported the first time its type is asked for (as
    transformers' CONFIG_MAPPING does): a question about one model loads one record, not all of them."""

    def __init__(self):
        # The folder's .py files (pkgutil.iter_modules would also import typing, through functools.singledispatch:
        # some 3 ms of every command line run).
        names = [name[:-3] for name in os.listdir(__path__[0])
                 if name.endswith(".py") and name != "record.py" and not name.startswith("_")]
        self._types = tuple([t for t in _ORDER if t in names] + sorted(set(names) - set(_ORDER)))
        self._loaded: dict[str, Architecture] = {}

    def __getitem__(self, model_type) -> Architecture:
        record = self._loaded.get(model_type)
        if record is None:
            if model_type not in self._types:
                raise KeyError(model_type)
            record = importlib.import_module(f".{model_type}", __name__).ARCHITECTURE
            if record.model_type != model_type:
                raise RuntimeError(f"memmath/architectures/{model_type}.py describes {record.model_type!r}")
            self._loaded[model_type] = record
        return record

    def __contains__(self, model_type) -> bool:
        return isinstance(model_type, str) and model_type in self._types

    def __iter__(self):
        return iter(self._types)

    def __len__(self) -> int:
        return len(self._types)


ARCHITECTURES: Mapping[str, Architecture] = _Records()
SUPPORTED_MODEL_TYPES = tuple(ARCHITECTURES)
# The record a model built in code (arch "") follows: its family's own model type.
_FAMILY_DEFAULT = {"gpt2": "gpt2", "llama": "llama", "bert": "bert"}


# Where memmath has no record, PyTorch can still step the model under fake tensors (memmath/traced.py).
TRACED_HINT = 'install memmath[torch] to get a traced answer: memmath train CONFIG --traced'


# Remote-code model types whose config.json's `architectures` names a transformers class of another type, which
# from_pretrained builds: read as that type (Kimi-K2: DeepseekV3ForCausalLM).
READ_AS = {"kimi_k2": "deepseek_v3"}


def architecture(model_type: str) -> Architecture:
    """The record of a model type; a ValueError naming the supported ones for any other."""
    record = ARCHITECTURES.get(READ_AS.get(model_type, model_type) if isinstance(model_type, str) else model_type)
    if record is None and refusal(model_type):  # a type transformers builds that memmath refuses, with the reason
        raise ValueError(f"model_type {model_type!r} is not supported: {refusal(model_type)}")
    if record is None:
        raise ValueError(f"model_type {model_type!r} is not supported: memmath reads {len(SUPPORTED_MODEL_TYPES)} "
                         f"model types, which `memmath models` lists; {TRACED_HINT}")
    return record


def of(shape) -> Architecture | None:
    """The record a ModelShape's tensors follow: its arch's, else its family's own type's (a model built in code
    with another arch label keeps its family's layout); None for the uniform family, which has no layout."""
    record = ARCHITECTURES.get(shape.arch)
    if record is not None and record.family == shape.family:
        return record
    return ARCHITECTURES.get(_FAMILY_DEFAULT.get(shape.family, ""))


def known(shape) -> bool:
    """Whether the shape's arch is a recorded model type of its family ("" counts as the family's own)."""
    record = ARCHITECTURES.get(shape.arch or _FAMILY_DEFAULT.get(shape.family, ""))
    return record is not None and record.family == shape.family


def kv_cache_values(shape, *, context_len, batch_size, after_prefill=False):
    """Values a shape's cache holds for batch_size sequences of context_len tokens: its record's rule, the rotary
    decoder's for a shape without one (the uniform family)."""
    record = of(shape)
    rule = _decoder.kv_cache_values if record is None else record.kv_cache_values
    return rule(shape, context_len=context_len, batch_size=batch_size, after_prefill=after_prefill)


__all__ = ["ARCHITECTURES", "READ_AS", "Architecture", "SUPPORTED_MODEL_TYPES", "architecture", "known", "kv_cache_values", "of"]
