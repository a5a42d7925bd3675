"""OLMo 3 (transformers 5.24 configuration_olmo3.py, modeling_olmo3.py): OLMo 2's layers (olmo2.py: no norm before
the sublayers, a norm after each, q/k RMSNorm over all heads, fp32 norm weights and rotary tables) with
sliding-window attention on three blocks of four (config layer_types; sliding_window 4,096 by default).

What differs from OLMo 2 changes no parameter: Olmo3RotaryEmbedding keeps one inv_freq buffer per layer type
(buffers, not parameters) and Olmo3Model computes one fp32 cos/sin pair per layer type, builds the causal and the
sliding-window mask in every forward (modeling_olmo3.py, Olmo3Model.forward), and DynamicCache(config) keeps a
sliding layer's last sliding_window tokens (DynamicSlidingWindowLayer, cache_utils.py).

Its trace is OLMo 2's block with the second fp32 rotary pair (rotary_tables_fp32): measured on the CPU
(tests/test_families_dense.py steps tiny OLMo 3s under SDPA and eager, in fp32 and bf16, below and past the window,
with given layer_types and with use_cache: the saved bytes equal the trace's to the byte). The second pair was
found there: counted in the model dtype, bf16 steps measured 2 x s x d x 2 B more."""

from . import olmo2
from .record import ATTENTION_BIAS, LAYER_TYPES_FIELD, QK_NORM, SLIDING_WINDOW, Architecture, decoder_fields, full_every


def every_fourth_full(get, layers):
    """Olmo3Config.__post_init__: without layer_types, every fourth block full and the others sliding."""
    return full_every(4, layers)


def prefill_phases(shape, s, b, e, eager):
    """OLMo 2's prefill (no normed copy of a sublayer's input; fp32 rotary tables, one pair per layer type), plus
    under SDPA the (1, 1, s, s) bool sliding-window mask sdpa_mask materializes once the prompt reaches the window
    (masking_utils._ignore_causal_mask_sdpa skips it below); eager's sliding-window mask beside the causal one is
    the rotary decoder's (eager_sliding_mask). Measured with validation/inference_working_set.py's LiveBytes
    (tests/test_families_dense.py): the normed copy was found there, the first prediction counting it measured
    e*s*b*h above every case."""
    outside, attn, mlp = olmo2.prefill_phases(shape, s, b, e, eager)
    if not eager and "sliding_attention" in (shape.layer_types or ()):
        outside = outside + (s >= shape.sliding_window) * s * s
    return outside, attn, mlp


ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="olmo3", family="llama", title="OLMo 3", source="configuration_olmo3.py, modeling_olmo3.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, **QK_NORM, "sliding_window": SLIDING_WINDOW,
                           "layer_types": LAYER_TYPES_FIELD + " (default: every fourth full)"}),
    defaults={"sliding_window": 4096},
    read_options=olmo2.read_options, derive_layer_types=every_fourth_full, trace_block=olmo2.block,
    final_norm="rms_fp32_weight", rotary_per_layer_type=True, rotary_tables_fp32=True, prefill_phases=prefill_phases,
    eager_sliding_mask=True, both_masks_always=True,  # modeling_olmo3.py, Olmo3Model.forward
)
