"""Published model shapes, from each model's config.json (or paper for GPT-3 and LLaMA-1), and
`resolve_model`, which turns a preset name or a parameter count into a ModelShape.

Counts in the comments are what PyTorch's parameters() sum to for that config; the tests check
the first ones against the model cards' published counts.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import validate
from .models import ModelShape, bert_model, gpt2_model, llama_model, uniform_model

PRESETS: dict[str, ModelShape] = {
    # GPT-2 family (openai-community/gpt2*): tied head, 1024 positions, vocabulary 50,257.
    "gpt2": gpt2_model(n_layers=12, hidden_size=768, n_heads=12, name="gpt2"),  # 124,439,808 params
    "gpt2-medium": gpt2_model(n_layers=24, hidden_size=1024, n_heads=16, name="gpt2-medium"),  # 354,823,168
    "gpt2-large": gpt2_model(n_layers=36, hidden_size=1280, n_heads=20, name="gpt2-large"),  # 774,030,080
    "gpt2-xl": gpt2_model(n_layers=48, hidden_size=1600, n_heads=25, name="gpt2-xl"),  # 1,557,611,200
    # GPT-3 175B (Brown et al. 2020, table 2.1): GPT-2's architecture at 96 layers x 12,288, 2,048 positions.
    "gpt3-175b": gpt2_model(n_layers=96, hidden_size=12288, n_heads=96, max_positions=2048,
                            name="gpt3-175b"),  # 174,604,259,328
    # BERT (google-bert/bert-*-uncased): BertModel with its pooler.
    "bert-base-uncased": bert_model(n_layers=12, hidden_size=768, n_heads=12, name="bert-base-uncased"),  # 109,482,240
    "bert-large-uncased": bert_model(n_layers=24, hidden_size=1024, n_heads=16,
                                     name="bert-large-uncased"),  # 335,141,888
    # LLaMA family (meta-llama/*): untied head, SwiGLU, RMSNorm.
    "llama-65b": llama_model(n_layers=80, hidden_size=8192, n_heads=64, intermediate_size=22016,
                             vocab_size=32000, name="llama-65b"),  # 65,285,660,672 (LLaMA-1, QLoRA's 65B)
    "llama-2-7b": llama_model(n_layers=32, hidden_size=4096, n_heads=32, intermediate_size=11008,
                              vocab_size=32000, name="llama-2-7b"),  # 6,738,415,616
    "llama-2-13b": llama_model(n_layers=40, hidden_size=5120, n_heads=40, intermediate_size=13824,
                               vocab_size=32000, name="llama-2-13b"),  # 13,015,864,320
    "llama-2-70b": llama_model(n_layers=80, hidden_size=8192, n_heads=64, n_kv_heads=8, intermediate_size=28672,
                               vocab_size=32000, name="llama-2-70b"),  # 68,976,648,192
    "llama-3-8b": llama_model(n_layers=32, hidden_size=4096, n_heads=32, n_kv_heads=8, intermediate_size=14336,
                              vocab_size=128256, name="llama-3-8b"),  # 8,030,261,248
    "llama-3-70b": llama_model(n_layers=80, hidden_size=8192, n_heads=64, n_kv_heads=8, intermediate_size=28672,
                               vocab_size=128256, name="llama-3-70b"),  # 70,553,706,496
    # Mistral 7B (mistralai/Mistral-7B-v0.1): LLaMA layout with 8 key/value heads.
    "mistral-7b": llama_model(n_layers=32, hidden_size=4096, n_heads=32, n_kv_heads=8, intermediate_size=14336,
                              vocab_size=32000, name="mistral-7b"),  # 7,241,732,096
}


def resolve_model(model) -> ModelShape:
    """A ModelShape from a shape, a preset name, or a plain parameter count (one layer, no widths)."""
    if isinstance(model, ModelShape):
        return model
    if isinstance(model, str):
        key = model.strip().lower()
        if key in PRESETS:
            return PRESETS[key]
        raise ValueError(f"model {validate.describe(model)} is not a preset; presets: {', '.join(PRESETS)} (or pass a parameter count)")
    if isinstance(model, (bool, np.bool_)):
        raise ValueError("model must be a ModelShape, a preset name or a parameter count; got a boolean")
    if isinstance(model, (int, float, np.integer, np.floating, np.ndarray, list, tuple)):
        n = validate.count("model (parameter count)", model, high=validate.MAX_PARAMS)
        return dataclasses.replace(uniform_model(n, 1, name="plain parameter count"), from_count=True)
    raise TypeError(f"model must be a ModelShape, a preset name or a parameter count; got {type(model).__name__}")


def is_plain_count(shape: ModelShape) -> bool:
    """True for a model given only as a parameter count (no layers to freeze, no widths)."""
    return shape.from_count
