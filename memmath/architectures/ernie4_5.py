"""ERNIE 4.5 dense (transformers 5.24 configuration_ernie4_5.py, modeling_ernie4_5.py): LLaMA's layers with one
use_bias flag for all seven projections (q, k, v, o, gate, up, down), head_dim 128, 2 key/value heads and a tied head
by default (ERNIE-4.5-0.3B's shape), and no attention dropout (Ernie4_5Attention fixes attention_dropout = 0.0 and
its config class has no such field, so a config's attention_dropout changes nothing)."""

from .record import Architecture, decoder_fields


def read_options(config, get):
    """use_bias on every projection; Ernie4_5Config.__post_init__ turns an explicit null head_dim into h / a and a
    null num_key_value_heads into one per query head (an absent one takes the class defaults, 128 and 2)."""
    bias = get.flag("use_bias", False)
    options = {"attention_bias": bias, "mlp_bias": bias}
    for key, field in (("head_dim", "head_dim"), ("num_key_value_heads", "n_kv_heads")):
        if key in config and config[key] is None:
            options[field] = None  # ModelShape's own default: h / a, and n_heads
    return options


ARCHITECTURE = Architecture(
    model_type="ernie4_5", family="llama", title="ERNIE 4.5", source="configuration_ernie4_5.py, modeling_ernie4_5.py",
    fields=decoder_fields({"use_bias": "biases on q, k, v, o, gate, up, down"}, drop=("attention_dropout",)),
    defaults={"head_dim": 128, "num_key_value_heads": 2, "tie_word_embeddings": True},
    dropout_fields={},  # Ernie4_5Attention: self.attention_dropout = 0.0 whatever the config says
    read_options=read_options,
    traced=False,  # its rotary runs in fp32 (Ernie4_5RotaryEmbedding returns fp32 tables): not measured yet
)
