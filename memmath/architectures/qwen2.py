"""Qwen2 (transformers 5.24 configuration_qwen2.py, modeling_qwen2.py): biases on q, k and v (none on o);
sliding attention only with use_sliding_window, from max_window_layers on."""

from .record import LAYER_TYPES_FIELD, QWEN_SLIDING, SLIDING_WINDOW, Architecture, decoder_fields


def slide_from_max_window_layers(get, layers):
    """Qwen2Config / Qwen3Config: blocks from max_window_layers (default 28) on slide."""
    first = get("max_window_layers", 28, low=0)
    return tuple("sliding_attention" if i >= first else "full_attention" for i in range(layers))


def read_options(config, get):
    return {"qkv_bias": True}  # Qwen2Attention: bias=True on q, k, v, none on o


ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="qwen2", family="llama", title="Qwen2", source="configuration_qwen2.py, modeling_qwen2.py",
    fields=decoder_fields({"sliding_window": SLIDING_WINDOW, **QWEN_SLIDING, "layer_types": LAYER_TYPES_FIELD}),
    defaults={"tie_word_embeddings": False}, read_options=read_options,
    derive_layer_types=slide_from_max_window_layers, sliding_needs_flag=True, amp_measured=True,
    causal_mask_always=True,  # modeling_qwen2.py:371-376
    tp_traced=True,  # one tensor-parallel rank traced (validation/parallel.py)
)
