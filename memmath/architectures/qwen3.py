"""Qwen3 (transformers 5.24 configuration_qwen3.py, modeling_qwen3.py): RMSNorm over each head of q and k,
head_dim 128 by default, Qwen2's sliding rules."""

from .qwen2 import slide_from_max_window_layers
from .record import (ATTENTION_BIAS, LAYER_TYPES_FIELD, QK_NORM, QWEN_SLIDING, SLIDING_WINDOW, Architecture,
                     decoder_fields)


def read_options(config, get):
    return {"qk_norm": "head"}


ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="qwen3", family="llama", title="Qwen3", source="configuration_qwen3.py, modeling_qwen3.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, "sliding_window": SLIDING_WINDOW, **QWEN_SLIDING,
                           "layer_types": LAYER_TYPES_FIELD, **QK_NORM}),
    defaults={"head_dim": 128}, read_options=read_options,
    derive_layer_types=slide_from_max_window_layers, sliding_needs_flag=True, amp_measured=True,
    causal_mask_always=True,  # modeling_qwen3.py, as Qwen2's
    tp_traced=True,  # one tensor-parallel rank traced (validation/parallel.py)
)
