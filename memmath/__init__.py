"""memmath: the memory math of training and serving neural networks, in integer bytes.

The calculator only: numpy is its one dependency, and it is imported only when an array is in play
(a sweep; memmath/arrays.py), pandas only inside the functions that build a DataFrame. What it is checked against lives in `memmath.reference`; the workbook's charts
and controls live in the separate `memmath_lessons` package.

    >>> import memmath
    >>> m = memmath.training_memory(memmath.uniform_model(7e9, 32), precision="bf16", optimizer="adam")
    >>> memmath.format_bytes(m.weights), memmath.format_bytes(m.without_activations)
    ('14.00 GB', '56.00 GB')
"""

from __future__ import annotations

import importlib


# Public name -> the module that defines it. Modules load on first use (PEP 562), so `import memmath`
# costs almost nothing (benchmarks/import_speed.py) and a command line pays only for what it uses.
_EXPORTS = {
    "ActivationEstimate": "activations", "ActivationTerm": "activations",
    "korthikanti_per_layer": "activations", "korthikanti_terms": "activations",
    "FORMATS": "formats", "NF4_LEVELS": "formats", "NumberFormat": "formats", "absmax_scale": "formats",
    "float_step": "formats", "get_format": "formats", "round_to_format": "formats",
    "CUDA_CONTEXT_BYTES": "gpus", "CUDA_CONTEXT_SOURCE": "gpus", "FIT_MARGIN": "gpus",
    "Fit": "gpus", "GPU": "gpus", "GPUS": "gpus", "check_fit": "gpus", "fit_table": "gpus", "get_gpu": "gpus",
    "RecipeWarning": "gpus", "recipe_warning": "gpus",
    "InferenceMemory": "inference", "RULE_OF_THUMB_FACTOR": "inference",
    "decode_tokens_per_second": "inference", "inference_memory": "inference", "kv_cache_bytes": "inference",
    "rule_of_thumb_context_limit": "inference", "working_set_bytes": "inference",
    "Adapters": "methods", "Freeze": "methods", "Full": "methods", "LoRA": "methods", "Method": "methods",
    "QLoRA": "methods", "quant_constant_bytes": "methods", "AdapterMethod": "methods",
    "DPO": "preference",
    "bits_per_weight": "methods", "quant_constant_bits": "methods",
    "Note": "notes",
    "LORA_TARGETS": "models", "LORA_GROUPS": "models", "ModelShape": "models", "bert_model": "models", "from_hf_config": "config_reader",
    "gpt2_model": "models", "llama_model": "models", "uniform_model": "models",
    "CONFIG_FIELDS": "config_reader", "SUPPORTED_MODEL_TYPES": "architectures", "UNSUPPORTED_EXAMPLES": "config_reader",
    "ARCHITECTURES": "architectures", "READABLE_MODEL_TYPES": "config_reader",
    "MULTIMODAL_MODEL_TYPES": "multimodal", "VISION_CHOICES": "multimodal",
    "PeakEstimate": "peak", "peak_memory": "peak", "step_timeline": "timeline",
    "Suggestion": "planner", "config_from_text": "planner", "path_to_fit": "planner", "step_peak": "planner",
    "suggest_changes": "planner", "suggestions_frame": "planner", "TrainingPlan": "planner", "DEFAULT_MAX_GPUS": "planner",
    "plan_training": "planner", "plan_layout": "planner", "Requirement": "decision", "requirement": "decision",
    "parallel_memory": "parallel", "worst_rank": "parallel",
    "ServingChange": "serving", "ServingPlan": "serving", "longest_context_that_fits": "serving",
    "plan_serving": "serving", "serving_changes": "serving", "SERVING_DEFAULTS": "inference",
    "Run": "run", "DEFAULT_SEQ_LEN": "run", "FieldError": "validate",
    "TRAINED_CONTEXT": "planner", "fewest_gpus_that_fit": "planner", "largest_batch_that_fits": "planner",
    "longest_sequence_that_fits": "planner", "trained_context": "planner",
    "PRESETS": "presets", "PRESET_SOURCES": "presets", "resolve_model": "sources",
    "OPTIMIZERS": "recipes", "RECIPES": "recipes", "bytes_per_parameter": "recipes",
    "get_optimizer": "recipes", "get_recipe": "recipes",
    "PARTS": "training", "PART_LABELS": "training", "TrainingMemory": "training", "OptimizerStates": "training",
    "training_memory": "memory",
    "UNITS": "units", "format_bytes": "units", "parse_bytes": "units", "parse_count": "units",
    "to_unit": "units",
    "measured_qlora": "reference.measured",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Load the module that defines a public name on first use, and keep the name here."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memmath' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
