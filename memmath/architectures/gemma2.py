"""Gemma 2 (transformers 5.24 configuration_gemma2.py, modeling_gemma2.py): Gemma's layers with four norms per
block, softcapped scores (50) and logits (30), even blocks sliding; Gemma2PreTrainedModel has no SDPA."""

from .. import validate
from . import gemma
from .record import ATTENTION_BIAS, LAYER_TYPES_FIELD, SLIDING_WINDOW, Architecture, decoder_fields, full_every

GEMMA_FIELDS = {"attention_bias": ATTENTION_BIAS, "sliding_window": SLIDING_WINDOW, "layer_types": LAYER_TYPES_FIELD,
                "hidden_activation": "the MLP activation (Gemma 2/3's name for it)",
                "attn_logit_softcapping": "softcapping of the scores (saved activations)",
                "final_logit_softcapping": "softcapping of the logits (saved activations)",
                "query_pre_attn_scalar": "a scale only: no memory"}


def softcap(config, key, default):
    """A softcapping constant: None (off) or a positive number, as Gemma 2/3's config classes keep it."""
    value = config.get(key, default)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
        raise ValueError(f"config field {key!r} must be a positive number or null (no softcapping); "
                         f"got {validate.describe(value)}")
    return None if value is None else float(value)


def read_options(config, get):
    # Gemma2Config caps at 50 / 30 by default
    return {"norm_layout": "sandwich", "attn_softcap": softcap(config, "attn_logit_softcapping", 50.0),
            "final_softcap": softcap(config, "final_logit_softcapping", 30.0)}


def even_blocks_slide(get, layers):
    """Gemma2Config: even blocks (0, 2, ...) slide."""
    return full_every(2, layers)


ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="gemma2", family="llama", title="Gemma 2", source="configuration_gemma2.py, modeling_gemma2.py",
    # these read hidden_activation; hidden_act is ignored by transformers
    fields=decoder_fields(GEMMA_FIELDS, drop=("hidden_act",)),
    defaults={"head_dim": 256, "tie_word_embeddings": True, "sliding_window": 4096},
    activation_field="hidden_activation", activations=("gelu_pytorch_tanh",),
    read_options=read_options, derive_layer_types=even_blocks_slide,
    trace_block=gemma.block, traced_activations=("gelu_pytorch_tanh", "gelu"), scaled_embedding=True, final_norm="rms_plus_one", sdpa=False, eager_sliding_mask=True,
    both_masks_always=True,  # modeling_gemma2.py:431-433
)
