"""GPT-2 (transformers 5.24 configuration_gpt2.py, modeling_gpt2.py: GPT2LMHeadModel)."""

from .record import Architecture

ARCHITECTURE = Architecture(
    model_type="gpt2", family="gpt2", title="GPT-2", source="configuration_gpt2.py, modeling_gpt2.py",
    fields={"n_layer": "blocks", "n_embd": "width", "n_head": "heads", "n_inner": "MLP width (None: 4h)",
            "n_positions": "learned position rows", "vocab_size": "embedding rows",
            "tie_word_embeddings": "head shares wte",
            "activation_function": "gelu_new, gelu_pytorch_tanh or gelu (saved activations)",
            "attn_pdrop": "dropout_p", "resid_pdrop": "dropout_p", "embd_pdrop": "dropout_p",
            "add_cross_attention": "refused when true (cross-attention blocks)",
            "scale_attn_by_inverse_layer_idx": "refused when true (an extra op on the scores)",
            "reorder_and_upcast_attn": "refused when true (fp32 attention scores)",
            "torch_dtype": "checked: float32, bfloat16 or float16 (the step's precision is an argument)",
            "dtype": "as torch_dtype", "quantization_config": "refused: a pre-quantized checkpoint is not modelled",
            "use_cache": "saved activations: true runs k and v through a DynamicCache when training without "
                         "checkpointing (absent: read as false)"},
    activation_field="activation_function", activations=("gelu_new", "gelu_pytorch_tanh", "gelu"),
    dropout_fields={"attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1},
    refused_flags=("add_cross_attention", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"),
    block="gpt2", embedding="wte", final_norm="layer", amp_measured=True,
    lora_modules=lambda m: {
        "q": ("attn.c_attn", m.hidden_size, 3 * m.hidden_size),
        "k": ("attn.c_attn", m.hidden_size, 3 * m.hidden_size),
        "v": ("attn.c_attn", m.hidden_size, 3 * m.hidden_size),
        "o": ("attn.c_proj", m.hidden_size, m.hidden_size),
        "up": ("mlp.c_fc", m.hidden_size, m.intermediate_size),
        "down": ("mlp.c_proj", m.intermediate_size, m.hidden_size),
    },
)
