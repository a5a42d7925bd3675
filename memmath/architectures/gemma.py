"""Gemma (transformers 5.24 configuration_gemma.py, modeling_gemma.py): GeGLU, head_dim 256, a tied head,
embeddings scaled by sqrt(h), RMSNorm weights applied as (1 + w)."""

from .record import ATTENTION_BIAS, Architecture, decoder_fields


def read_options(config, get):
    return {}


ARCHITECTURE = Architecture(
    model_type="gemma", family="llama", title="Gemma", source="configuration_gemma.py, modeling_gemma.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS,
                           "hidden_act": "the MLP activation ('gelu' is read as gelu_pytorch_tanh, as GemmaConfig "
                                         "does)"}),
    defaults={"head_dim": 256, "tie_word_embeddings": True},
    # GemmaConfig.__post_init__ replaces the legacy 'gelu' with the tanh form (config_reader reads it so)
    activations=("gelu_pytorch_tanh", "gelu"),
    block="gemma", traced_activations=("gelu_pytorch_tanh", "gelu"), scaled_embedding=True, final_norm="rms_plus_one",
)
