"""memmath: the memory math of training and serving neural networks, in integer bytes.

    >>> import memmath
    >>> m = memmath.training_memory(memmath.uniform_model(7e9, 32), precision="bf16", optimizer="adam")
    >>> memmath.format_bytes(m.weights), memmath.format_bytes(m.without_activations)
    ('14.00 GB', '56.00 GB')
"""

from .activations import ActivationEstimate, ActivationTerm, korthikanti_per_layer, korthikanti_terms
from .formats import FORMATS, NF4_LEVELS, NumberFormat, absmax_scale, float_step, get_format, round_to_format
from .gpus import GPU, GPUS, Fit, check_fit, fit_table, get_gpu
from .inference import (
    RULE_OF_THUMB_FACTOR, InferenceMemory, decode_tokens_per_second, inference_memory, kv_cache_bytes,
    rule_of_thumb_context_limit, working_set_bytes,
)
from .measured import load_measured, measured_metadata, predict_case, predict_peak_case, predicted_saved_per_layer
from .methods import Adapters, Freeze, Full, LoRA, Method, QLoRA, quant_constant_bytes
from .models import (
    LORA_TARGETS, ModelShape, bert_model, from_hf_config, gpt2_model, llama_model, resolve_model, uniform_model,
)
from .peak import PeakEstimate, peak_memory
from .planner import Suggestion, config_from_text, path_to_fit, suggest_changes, suggestions_frame
from .presets import PRESETS
from .recipes import OPTIMIZERS, RECIPES, bytes_per_parameter, get_optimizer, get_recipe
from .training import PART_LABELS, PARTS, TrainingMemory, training_memory
from . import literature, published, viz
from .units import UNITS, format_bytes, parse_bytes, parse_count, to_unit

__all__ = [
    "ActivationEstimate", "ActivationTerm", "Adapters", "FORMATS", "Fit", "Freeze", "Full", "GPU", "GPUS", "InferenceMemory",
    "LORA_TARGETS", "LoRA", "Method", "ModelShape", "NF4_LEVELS", "NumberFormat", "OPTIMIZERS", "PARTS",
    "PART_LABELS", "PRESETS", "QLoRA", "RECIPES", "RULE_OF_THUMB_FACTOR", "Suggestion", "TrainingMemory", "UNITS",
    "absmax_scale", "bert_model", "bytes_per_parameter", "check_fit", "config_from_text", "decode_tokens_per_second",
    "fit_table", "float_step", "format_bytes",
    "from_hf_config", "get_format", "get_gpu", "get_optimizer", "get_recipe", "gpt2_model", "inference_memory",
    "korthikanti_per_layer", "korthikanti_terms", "kv_cache_bytes", "llama_model", "parse_bytes", "parse_count",
    "path_to_fit", "quant_constant_bytes", "resolve_model", "round_to_format", "rule_of_thumb_context_limit",
    "suggest_changes", "suggestions_frame", "to_unit", "training_memory", "uniform_model", "working_set_bytes",
    "PeakEstimate", "load_measured", "measured_metadata", "peak_memory", "predict_case", "predict_peak_case",
    "predicted_saved_per_layer",
]
