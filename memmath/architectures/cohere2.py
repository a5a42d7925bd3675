"""Cohere 2: Command R7B and Command A (transformers 5.24 configuration_cohere2.py, modeling_cohere2.py).

Cohere2DecoderLayer runs attention and the SwiGLU MLP side by side on one normed input and adds both to the
residual (a parallel block), so a block has one norm, input_layernorm: a Cohere2LayerNorm, which subtracts the mean
but has a weight and no bias. Every sliding_window_pattern-th block (default 4) attends to every token without
rotary positions; the others slide over sliding_window tokens with rotary positions. The head is tied by default
and its logits are multiplied by logit_scale, a new tensor that keeps nothing for backward.

Cohere2Model builds the causal and the sliding-window mask in every forward, whatever layer_types holds. A prefill
keeps the rotary decoder's working set plus those masks (measured on the CPU with validation/inference_working_set.py's
LiveBytes: tests/test_families_kin.py); its parallel block's phases measure as LLaMA's.

Activations are the textbook model's (traced=False): the parallel block, the fp32 LayerNorm and the fp32 rotary
(apply_rotary_pos_emb computes in q.float()) are not traced yet."""

from . import _decoder
from ._parts import norm
from .record import ATTENTION_BIAS, LAYER_TYPES_FIELD, SLIDING_WINDOW, Architecture, decoder_fields


def every_nth_full(get, layers):
    """Cohere2Config.__post_init__: without layer_types, every sliding_window_pattern-th block is full (default 4)."""
    pattern = get("sliding_window_pattern", 4)
    return tuple("sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers))


def tensors(m, group: str) -> list:
    """Cohere2ForCausalLM's tensors: the rotary decoder's outside the blocks (a weight-only Cohere2LayerNorm for the
    final norm); in a block, attention, the MLP (never biased) and the one input_layernorm, in parameters() order."""
    if group != "layer":
        return _decoder.tensors(m, group)
    return _decoder.attention_tensors(m) + _decoder.mlp_tensors(m) + norm("input_layernorm", m.hidden_size, False)


def prefill_phases(shape, s, b, e, eager):
    """The rotary decoder's prefill plus the sliding-window mask: under eager an e x b x s x s tensor beside the
    causal one (the record's eager_sliding_mask), under SDPA a (1, 1, s, s) bool tensor once the prompt reaches the
    window (sdpa_mask skips it while every key is inside the window)."""
    outside, attn, mlp = _decoder.prefill_phases(shape, s, b, e, eager)
    if not eager and shape.sliding_window is not None:
        outside = outside + s * s * (s >= shape.sliding_window)
    return outside, attn, mlp


def read_options(config, get):
    return {"parallel_residual": True}  # Cohere2DecoderLayer: residual + attention(h) + mlp(h), h = norm(residual)


ARCHITECTURE = Architecture(
    model_type="cohere2", family="llama", title="Cohere 2 (Command R7B, Command A)",
    source="configuration_cohere2.py, modeling_cohere2.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, "sliding_window": SLIDING_WINDOW,
                           "layer_types": LAYER_TYPES_FIELD,
                           "sliding_window_pattern": "layer_types when not given (every n-th full)",
                           "logit_scale": "multiplies the logits (a t x V tensor in place of the unscaled, nothing "
                                          "saved)"}),
    defaults={"tie_word_embeddings": True, "sliding_window": 4096},
    read_options=read_options, derive_layer_types=every_nth_full, tensors=tensors, traced=False,
    prefill_phases=prefill_phases, eager_sliding_mask=True,
    both_masks_always=True,  # modeling_cohere2.py: Cohere2Model.forward's causal_mask_mapping
)
