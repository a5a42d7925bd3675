"""One record per transformers model type (memmath/architectures/<model_type>.py), found by listing this folder.

Adding a model type is one new module here whose ARCHITECTURE is an `Architecture` (record.py), and its tests:
the config reader, the tensor builders, the LoRA tables, the activation trace and the inference working set
read everything type-specific from the record. Vision-language wrappers (gemma3, llava, mistral3, qwen2_vl,
...) read their language model through these records; their own fields live in memmath/multimodal.py.
"""

from __future__ import annotations

import importlib
import pkgutil

from .record import Architecture

# The order models are listed in (the families first, then the rotary decoders as transformers added them).
_ORDER = ("gpt2", "llama", "mistral", "bert", "roberta", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
          "gemma", "gemma2", "gemma3_text", "phi3", "olmo2", "gpt_neox")


def _discover() -> dict[str, Architecture]:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name == "record" or info.name.startswith("_"):
            continue
        record = importlib.import_module(f".{info.name}", __name__).ARCHITECTURE
        if record.model_type != info.name:
            raise RuntimeError(f"memmath/architectures/{info.name}.py describes {record.model_type!r}")
        found[record.model_type] = record
    ordered = [t for t in _ORDER if t in found] + sorted(set(found) - set(_ORDER))
    return {t: found[t] for t in ordered}


ARCHITECTURES: dict[str, Architecture] = _discover()
SUPPORTED_MODEL_TYPES = tuple(ARCHITECTURES)
# The record a model built in code (arch "") follows: its family's own model type.
_FAMILY_DEFAULT = {"gpt2": "gpt2", "llama": "llama", "bert": "bert"}


# Where memmath has no record, PyTorch can still step the model under fake tensors (memmath/traced.py).
TRACED_HINT = 'install memmath[torch] to get a traced answer: memmath train CONFIG --traced'


def architecture(model_type: str) -> Architecture:
    """The record of a model type; a ValueError naming the supported ones for any other."""
    record = ARCHITECTURES.get(model_type)
    if record is None:
        raise ValueError(f"model_type {model_type!r} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}; "
                         f"{TRACED_HINT}")
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


__all__ = ["ARCHITECTURES", "Architecture", "SUPPORTED_MODEL_TYPES", "architecture", "known", "of"]
