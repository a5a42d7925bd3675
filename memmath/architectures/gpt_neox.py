"""GPT-NeoX (transformers 5.24 configuration_gpt_neox.py, modeling_gpt_neox.py): LayerNorm, one fused
query_key_value, a GELU MLP (no gate), a parallel residual, rotary on part of each head."""

from .record import Architecture, decoder_fields


def read_options(config, get):
    from .. import validate

    # GPTNeoXConfig: rope_parameters' partial_rotary_factor, from rotary_pct (default 0.25); the attention
    # rotates int(head_size * factor) dims of each head (GPTNeoXAttention.rotary_ndims).
    rope = config.get("rope_parameters") if isinstance(config.get("rope_parameters"), dict) else {}
    factor = rope.get("partial_rotary_factor", config.get("rotary_pct", 0.25))
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise ValueError(f"config field 'rotary_pct' must be a fraction in (0, 1]; got {validate.describe(factor)}")
    return {"layer_norm": True, "fused_qkv": True, "gated_mlp": False,
            "parallel_residual": get.flag("use_parallel_residual", True),
            "rotary_dim": max(1, int(get("hidden_size") // get("num_attention_heads") * factor))}


def lora_modules(m):
    """peft's target names in a GPT-NeoX layer: one query_key_value, dense, and the two MLP matrices."""
    h, a, kv, d, inner = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, m.intermediate_size
    qkv = ("query_key_value", h, (a + 2 * kv) * d)
    return {"q": qkv, "k": qkv, "v": qkv, "o": ("dense", a * d, h),
            "up": ("dense_h_to_4h", h, inner), "down": ("dense_4h_to_h", inner, h)}


ARCHITECTURE = Architecture(
    model_type="gpt_neox", family="llama", title="GPT-NeoX", source="configuration_gpt_neox.py, modeling_gpt_neox.py",
    # GPTNeoXConfig has neither head_dim nor num_key_value_heads: every head is h / heads wide, one k and v each
    fields=decoder_fields({"attention_bias": "biases on q, k, v, o (GPT-NeoX: on query_key_value and dense)",
                           "hidden_dropout": "dropout_p", "use_parallel_residual": "saved activations",
                           "rotary_pct": "rotated dims per head (saved activations; no parameters)",
                           "rope_parameters": "partial_rotary_factor as rotary_pct",
                           "classifier_dropout": "no memory for a causal LM"},
                          drop=("head_dim", "num_key_value_heads")),
    defaults={"attention_bias": True}, activations=("gelu",), traced_activations=("gelu",),
    dropout_fields={"attention_dropout": 0.0, "hidden_dropout": 0.0}, read_options=read_options,
    block="gpt_neox", embedding="embed_in", embedding_dropout=True, final_norm="layer",
    final_norm_module="final_layer_norm", lora_modules=lora_modules,
)
