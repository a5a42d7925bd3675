"""A model's parameter counts, total and active per token, from a preset, a ModelShape or a config.json.

A mixture of experts runs each token through its shared tensors and the experts_per_tok routed experts it is sent
to of n_experts (ModelShape.active_params); a dense model's active count is every parameter. Model cards often quote
the active count without the token embedding (gpt-oss: "3.6B active"), which a lookup, not a matmul: both are given.
"""

from __future__ import annotations

from . import validate
from .config_reader import from_hf_config
from .models import ModelShape
from .sources import resolve_model
from .sources import resolve_source


def parameter_counts(model) -> dict:
    """Total and active parameters of `model`: a preset name, a ModelShape, a config dict or JSON text, or a path to a
    config.json, its folder or a Hub id in the local cache (memmath/sources.py resolves the text as the command line
    does).

    Returns a dict: name, params, active_params (what one token passes through), active_params_without_embeddings
    (less the input embedding rows, a lookup), n_experts and experts_per_tok (0 for a dense model), and
    stored_format (a quantized checkpoint's format name, else None).
    """
    shape = _shape(model)
    active = shape.active_params
    embeddings = shape.group_params("embeddings") if shape.tensor_count_known else 0
    return {"name": shape.name, "params": int(shape.n_params), "active_params": int(active),
            "active_params_without_embeddings": int(active - embeddings), "n_experts": int(shape.n_experts),
            "experts_per_tok": int(shape.experts_per_tok),
            "stored_format": None if shape.stored_format is None else shape.stored_format.name}


def _shape(model) -> ModelShape:
    if isinstance(model, ModelShape):
        return model
    if isinstance(model, dict):
        return from_hf_config(model)
    if isinstance(model, str) and model.lstrip().startswith("{"):
        return from_hf_config(model)
    if isinstance(model, str):
        if not model.strip():
            raise validate.FieldError("model", "model must name a preset, a config.json, its folder or a Hub id; got "
                                      "an empty string")
        return resolve_source(model)[0]
    if hasattr(model, "__fspath__"):
        return from_hf_config(model)
    if isinstance(model, (int, float)) and not isinstance(model, bool):
        return resolve_model(model)
    raise validate.FieldTypeError("model", "model must be a preset name, a ModelShape, a config dict or JSON text, or "
                                  f"a path to a config.json or its folder; got {validate.describe(model)}")
