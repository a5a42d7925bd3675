"""SmolLM3 (transformers 5.24 configuration_smollm3.py, modeling_smollm3.py): LLaMA's layers, tied embeddings, and
NoPE layers (no_rope_layers: a 0 leaves that layer's q and k unrotated), every fourth layer by default.

NoPE changes no parameter (rotary positions have none) and no cache (the keys are cached either way), and no
saved byte: a NoPE block's attention keeps the q and k projections where a rotary block keeps the rotated q and k,
the same sizes, and the rotary tables are shared by the whole model. So the rotary decoder's trace is SmolLM3's:
measured on the CPU (tests/test_families_dense.py steps tiny SmolLM3s, with and without sliding NoPE layers,
under SDPA and eager, in fp32 and bf16: the saved bytes equal the trace's to the byte)."""

from .. import validate
from . import _decoder
from .record import ATTENTION_BIAS, LAYER_TYPES_FIELD, QWEN_SLIDING, SLIDING_WINDOW, Architecture, decoder_fields


def rope_layers(config, layers) -> list:
    """SmolLM3Config.__post_init__: no_rope_layers as given (1 rotates, 0 is NoPE), else 0 at every
    no_rope_layer_interval-th layer (default 4)."""
    given = config.get("no_rope_layers")
    if given is None:
        interval = config.get("no_rope_layer_interval", 4)
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ValueError(f"config field 'no_rope_layer_interval' must be a whole number >= 1; got "
                             f"{validate.describe(interval)}")
        return [int((i + 1) % interval != 0) for i in range(layers)]
    if not isinstance(given, list) or len(given) < layers or any(v not in (0, 1) or isinstance(v, bool)
                                                                  for v in given):
        raise ValueError(f"config field 'no_rope_layers' must list 0 (NoPE) or 1 (rotary) for each of the "
                         f"{layers} layers; got {validate.describe(given)}")
    return list(given[:layers])


def prefill_phases(shape, s, b, e, eager):
    """The rotary decoder's prefill, plus the sliding-window mask SmolLM3Model builds beside the causal one when
    NoPE layers slide: under eager an e x b x s x s mask, under SDPA a (1, 1, s, s) bool one (the causal mask is
    SDPA's is_causal there). Measured with validation/inference_working_set.py's LiveBytes (tests/
    test_families_dense.py)."""
    outside, attn, mlp = _decoder.prefill_phases(shape, s, b, e, eager)
    if "sliding_attention" in (shape.layer_types or ()):
        outside = outside + (e * b * s * s if eager else s * s)
    return outside, attn, mlp


def read_options(config, get):
    rope_layers(config, get("num_hidden_layers"))  # checked: a malformed list is refused by name
    return {}


def nope_layers_slide(get, layers):
    """SmolLM3Config.__post_init__: with use_sliding_window and a sliding_window, the NoPE layers slide."""
    return tuple("full_attention" if rope else "sliding_attention" for rope in rope_layers(get.config, layers))


ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="smollm3", family="llama", title="SmolLM3", source="configuration_smollm3.py, modeling_smollm3.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, "mlp_bias": "biases on gate, up, down",
                           "sliding_window": SLIDING_WINDOW, "use_sliding_window": QWEN_SLIDING["use_sliding_window"],
                           "layer_types": LAYER_TYPES_FIELD,
                           "no_rope_layers": "per layer 1 (rotary) or 0 (NoPE); NoPE layers slide when "
                                             "use_sliding_window (KV cache)",
                           "no_rope_layer_interval": "no_rope_layers when not given (every n-th layer NoPE)"}),
    defaults={"tie_word_embeddings": True, "num_key_value_heads": 4},
    read_options=read_options, derive_layer_types=nope_layers_slide, sliding_needs_flag=True,
    prefill_phases=prefill_phases,
)
