"""ERNIE 4.5 dense (transformers 5.24 configuration_ernie4_5.py, modeling_ernie4_5.py): LLaMA's layers with one
use_bias flag for all seven projections (q, k, v, o, gate, up, down), head_dim 128, 2 key/value heads and a tied head
by default (ERNIE-4.5-0.3B's shape), and no attention dropout (Ernie4_5Attention fixes attention_dropout = 0.0 and
its config class has no such field, so a config's attention_dropout changes nothing)."""

from . import _decoder
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


def prefill_phases(shape, s, b, e, eager):
    """The rotary decoder's prefill with ERNIE's fp32 rotary (modeling_ernie4_5.py): Ernie4_5RotaryEmbedding returns
    cos and sin in fp32 (2 x 4 s d held all pass), and apply_rotary_pos_emb repeats each to two fp32 (s, d) tables and
    rotates q.float() and k.float(): rotating q holds three fp32 copies of q at once (q * cos, the rotated half, times
    sin) beside the block input, its normed copy, q and k; rotating k holds the rotated q (fp32) and three fp32 copies
    of k. The k it holds is as large as the rotated k the cache will keep, counted in the cache's part. Measured with
    validation/inference_working_set.py's LiveBytes (tests/test_families_dense.py)."""
    outside, attn, mlp = _decoder.prefill_phases(shape, s, b, e, eager)
    h, a, kv, d = shape.hidden_size, shape.n_heads, shape.n_kv_heads, shape.head_dim
    outside = outside + 2 * (4 - e) * s * d  # the fp32 tables where LLaMA's are cast to the model dtype
    rotating = s * b * (2 * e * h + e * a * d + max(12 * a * d, 4 * a * d + 12 * kv * d)) + 8 * s * d
    return outside, max(attn, rotating), mlp


ARCHITECTURE = Architecture(
    model_type="ernie4_5", family="llama", title="ERNIE 4.5", source="configuration_ernie4_5.py, modeling_ernie4_5.py",
    fields=decoder_fields({"use_bias": "biases on q, k, v, o, gate, up, down"}, drop=("attention_dropout",)),
    defaults={"head_dim": 128, "num_key_value_heads": 2, "tie_word_embeddings": True},
    dropout_fields={},  # Ernie4_5Attention: self.attention_dropout = 0.0 whatever the config says
    read_options=read_options, prefill_phases=prefill_phases,
    traced=False,  # its rotary runs in fp32 (Ernie4_5RotaryEmbedding returns fp32 tables): not measured yet
)
