"""Gemma 3's language model (transformers 5.24 configuration_gemma3.py Gemma3TextConfig, modeling_gemma3.py):
Gemma 2's layers with q/k norms, no softcapping by default, every sliding_window_pattern-th block full."""

from .gemma2 import GEMMA_FIELDS, softcap
from . import gemma
from .record import QK_NORM, Architecture, decoder_fields, full_every, refuse_true


def read_options(config, get):
    refuse_true(get, "use_bidirectional_attention")
    # Gemma3TextConfig does not cap by default
    return {"qk_norm": "head", "norm_layout": "sandwich",
            "attn_softcap": softcap(config, "attn_logit_softcapping", None),
            "final_softcap": softcap(config, "final_logit_softcapping", None)}


def every_nth_full(get, layers):
    """Gemma3TextConfig: every sliding_window_pattern-th block is full (default 6)."""
    pattern = get("sliding_window_pattern", 6)
    return full_every(pattern, layers)


ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="gemma3_text", family="llama", title="Gemma 3 (text)",
    source="configuration_gemma3.py, modeling_gemma3.py",
    fields=decoder_fields({**GEMMA_FIELDS, **QK_NORM, "use_bidirectional_attention": "refused when true",
                           "sliding_window_pattern": "layer_types when not given (every n-th full)"},
                          drop=("hidden_act",)),
    defaults={"head_dim": 256, "tie_word_embeddings": True, "sliding_window": 4096},
    activation_field="hidden_activation", activations=("gelu_pytorch_tanh",),
    read_options=read_options, derive_layer_types=every_nth_full, rotary_per_layer_type=True,
    trace_block=gemma.block, traced_activations=("gelu_pytorch_tanh", "gelu"), scaled_embedding=True, final_norm="rms_plus_one", eager_sliding_mask=True,
    both_masks_always=True,  # modeling_gemma3.py:525-527
)
