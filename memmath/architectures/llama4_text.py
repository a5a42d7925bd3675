"""Llama 4's language model (transformers 5.24 configuration_llama4.py Llama4TextConfig, modeling_llama4.py
Llama4ForCausalLM), whose defaults are Llama-4-Scout-17B-16E's text model (@auto_docstring(checkpoint=
"meta-llama/Llama-4-Scout-17B-16E")):

- chunked attention on the rotary layers (attention_chunk_size, 8,192 tokens), full attention on the NoPE layers
  (no_rope_layers: every fourth layer by default). transformers caches a chunked layer exactly as a sliding window
  of attention_chunk_size tokens (cache_utils.py DYNAMIC_LAYER_TYPE_MAPPING: "chunked_attention" is a
  DynamicSlidingWindowLayer), so memmath reads those layers as sliding_attention with that window: the KV cache
  is exact; the masks differ, which changes no stored byte;
- Llama4TextMoe in every block where moe_layers names it (interleave_moe_layer_step, 1 for Scout): a router (an
  nn.Linear, E x h), the routed experts as two 3-D Parameters stored (E, h, 2I) and (E, I, h), and a shared expert
  (gate, up, down at intermediate_size); a dense block is Llama4TextMLP, a SwiGLU MLP at intermediate_size_mlp
  (Llama 4 Maverick's every other block: a second block layout, ModelShape.block_layouts);
- q/k L2 norm (use_qk_norm) and attention temperature tuning: no parameters.

Activations: Llama4TextMoe runs every token through every routed expert (its inputs scaled by the
sigmoid router scores, zero for the experts not chosen), not top-k routing, so the saved activations are not
the mixture-of-experts trace's: traced=False (activations='textbook', a GPT block's, far below this block's).
Its prefill's MLP phase is Llama4TextMoe's own, measured (prefill_phases)."""

from __future__ import annotations

from functools import partial

from .. import validate
from . import _decoder
from ._parts import ParamTensor, linear
from .record import ATTENTION_BIAS, MOE, Architecture, decoder_fields
from .smollm3 import rope_layers

# Llama4TextConfig.base_model_tp_plan's entries for the modules every Scout block has
TP_PLAN = {"layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.k_proj": "colwise",
           "layers.*.self_attn.v_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise",
           "layers.*.feed_forward.shared_expert.gate_proj": "colwise",
           "layers.*.feed_forward.shared_expert.up_proj": "colwise",
           "layers.*.feed_forward.shared_expert.down_proj": "rowwise",
           "layers.*.feed_forward.gate_proj": "colwise", "layers.*.feed_forward.up_proj": "colwise",
           "layers.*.feed_forward.down_proj": "rowwise"}
TRACED_HINT = "memmath train CONFIG --traced gives PyTorch's traced answer"


def moe_blocks(config, layers) -> list:
    """Llama4TextConfig.__post_init__: moe_layers as given, else every interleave_moe_layer_step-th block from
    step - 1."""
    given = config.get("moe_layers")
    if given is not None:
        if not isinstance(given, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in given):
            raise ValueError(f"config field 'moe_layers' must list block indices; got {validate.describe(given)}")
        return sorted(set(given))
    step = config.get("interleave_moe_layer_step", 1)
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"config field 'interleave_moe_layer_step' must be a whole number >= 1; got "
                         f"{validate.describe(step)}")
    return list(range(step - 1, layers, step))


def read_options(config, get):
    layers = get("num_hidden_layers")
    if get.flag("output_router_logits", False):
        raise ValueError("config field 'output_router_logits' is true; memmath models only output_router_logits="
                         "false (the router's auxiliary loss)")
    moe = moe_blocks(config, layers)
    if any(i >= layers or i < 0 for i in moe):
        raise ValueError(f"config field 'moe_layers' must list block indices from 0 to {layers - 1}; got {moe}")
    width = get("intermediate_size")
    options = {"n_experts": get("num_local_experts", 16), "experts_per_tok": get("num_experts_per_tok", 1),
               "expert_intermediate_size": width, "shared_expert_intermediate_size": width}
    dense = tuple(i for i in range(layers) if i not in moe)
    if dense:  # Llama4TextMLP at intermediate_size_mlp (Maverick: every second block)
        options["block_layouts"] = ((dense, (("n_experts", 0), ("experts_per_tok", 0),
                                             ("expert_intermediate_size", None), ("shared_expert_intermediate_size", 0),
                                             ("intermediate_size", get("intermediate_size_mlp", 16384)))),)
    chunk = config.get("attention_chunk_size", 8192)
    given = config.get("layer_types")
    if given is None:  # Llama4TextConfig: the rotary layers chunked when attention_chunk_size is set
        # an empty no_rope_layers (Scout's config.json) takes the default, as Llama4TextConfig.__post_init__ does
        rope = rope_layers(dict(config, no_rope_layers=config.get("no_rope_layers") or None), layers)
        given = ["chunked_attention" if r and chunk is not None else "full_attention" for r in rope]
    if not isinstance(given, list) or len(given) != layers or any(t not in ("chunked_attention", "full_attention")
                                                                   for t in given):
        raise ValueError(f"config field 'layer_types' must list chunked_attention or full_attention for each of the "
                         f"{layers} blocks; got {validate.describe(given)}")
    if "chunked_attention" in given:
        options.update(sliding_window=get("attention_chunk_size", 8192),
                       layer_types=tuple("sliding_attention" if t == "chunked_attention" else t for t in given))
    return options


def feed_forward_tensors(m) -> list:
    """Llama4TextMoe in parameters() order: the experts (E x h x 2I, E x I x h), the router, the shared expert; a
    dense block's Llama4TextMLP: gate, up, down at its intermediate_size."""
    if not m.n_experts:
        i = m.intermediate_size
        return (linear("feed_forward.gate_proj", "mlp", m.hidden_size, i, False)
                + linear("feed_forward.up_proj", "mlp", m.hidden_size, i, False)
                + linear("feed_forward.down_proj", "mlp", i, m.hidden_size, False))
    h, e, ei, si = m.hidden_size, m.n_experts, m.expert_intermediate_size, m.shared_expert_intermediate_size
    return ([ParamTensor("feed_forward.experts.gate_up_proj", "mlp", (e, h, 2 * ei)),
             ParamTensor("feed_forward.experts.down_proj", "mlp", (e, ei, h))]
            + linear("feed_forward.router", "mlp", h, e, False)
            + linear("feed_forward.shared_expert.gate_proj", "mlp", h, si, False)
            + linear("feed_forward.shared_expert.up_proj", "mlp", h, si, False)
            + linear("feed_forward.shared_expert.down_proj", "mlp", si, h, False))


def lora_table(m) -> dict:
    """peft 0.21's names: the router is an nn.Linear (Llama4Router), adapted by "all-linear"; gate, up and down
    are the shared expert's linears; the routed experts are 3-D Parameters that peft does not convert for
    llama4 (all-linear leaves them), adapted by target_parameters through lora.ParamWrapper, which reads a
    stored (E, d1, d2) as A (r E) x d2 and B d1 x (r E) (and doubles gate_up_proj's rank by rank_pattern, as its
    conversion does elsewhere)."""
    h, a, kv, d = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim
    if not m.n_experts:  # a dense block's Llama4TextMLP
        i, moe = m.intermediate_size, "a dense block has no router or routed experts"
        return {"q": ("q_proj", h, a * d), "k": ("k_proj", h, kv * d), "v": ("v_proj", h, kv * d),
                "o": ("o_proj", a * d, h), "gate": ("gate_proj", h, i), "up": ("up_proj", h, i),
                "down": ("down_proj", i, h), "router": moe, "experts": moe, "shared_gate": moe}
    e, ei, si = m.n_experts, m.expert_intermediate_size, m.shared_expert_intermediate_size
    return {"q": ("q_proj", h, a * d), "k": ("k_proj", h, kv * d), "v": ("v_proj", h, kv * d),
            "o": ("o_proj", a * d, h), "gate": ("gate_proj", h, si), "up": ("up_proj", h, si),
            "down": ("down_proj", si, h), "router": ("router", h, e),
            "experts": [("experts.gate_up_proj", 2 * ei, h, 2 * e), ("experts.down_proj", h, ei, e)],
            "shared_gate": "Llama 4's shared expert has no gate"}


def prefill_phases(shape, s, b, e, eager):
    """The rotary decoder's outside and attention phases; the MLP phase from Llama4TextMoe.forward, at the
    experts' down projection: the block input, the residual, the attention output (a local the decoder layer
    keeps) and the normed input (4h a token), the router's logits and scores (2E), routed_in (the input repeated
    for every expert and scaled by its score, E h), the experts' gate_up (2 E I, alive while its chunks are),
    the SwiGLU product (E I) and the down projection's output (E h).

    Under eager (modeling_llama4.py's eager_attention_forward): the scores and their softmax in the model's dtype
    (no fp32 copy), 2 e a b s^2 at the softmax; the decoder layer keeps the returned attention weights in a local
    (`attention_states, _ = self.self_attn(...)`) through the MLP, e a b s^2 more there; and Llama4TextModel builds
    one mask per layer type present, the chunked one beside the causal one.

    Measured (validation/inference_working_set.py's LiveBytes on tiny Llama 4s in bf16, h 256): written against
    4 experts of 176 at s 256 (b 1) and 512 (b 2), SDPA and eager; held out, 8 experts of 96 at s 384 (b 3) and
    128 (b 2), and full attention only at s 320: every case 0.1% or less below the measured peak."""
    outside, attn, mlp = _decoder.prefill_phases(shape, s, b, e, eager)  # a dense block's MLP phase: the decoder's
    h, a, d, n, ei = shape.hidden_size, shape.n_heads, shape.head_dim, shape.n_experts, shape.expert_intermediate_size
    if n:
        mlp = s * b * e * (4 * h + 2 * n + 2 * n * h + 3 * n * ei)
    if eager:
        repeated = 2 * a * d if shape.n_kv_heads < a else 0  # repeat_kv copies k and v to every head
        attn = s * b * e * (2 * h + a * d + repeated) + 2 * e * a * b * s * s
        mlp = mlp + e * a * b * s * s
        if len(set(shape.attention_windows)) > 1:  # chunked and full layers: two masks
            outside = outside + e * b * s * s
    return outside, attn, mlp


ARCHITECTURE = Architecture(
    model_type="llama4_text", family="llama", title="Llama 4 (text)",
    source="configuration_llama4.py, modeling_llama4.py",
    fields=decoder_fields({
        "attention_bias": ATTENTION_BIAS, **MOE, "num_local_experts": "routed experts",
        "intermediate_size": "one routed expert's and the shared expert's width",
        "intermediate_size_mlp": "a dense block's MLP width",
        "moe_layers": "the mixture-of-experts blocks; the others are dense",
        "interleave_moe_layer_step": "moe_layers when not given (every n-th block a mixture of experts)",
        "attention_chunk_size": "tokens a chunked layer caches (read as a sliding window: KV cache)",
        "layer_types": "per block chunked_attention or full_attention (KV cache)",
        "no_rope_layers": "per layer 1 (rotary, chunked) or 0 (NoPE, full attention) (KV cache)",
        "no_rope_layer_interval": "no_rope_layers when not given (every n-th layer NoPE)",
        "use_qk_norm": "an L2 norm without parameters (no memory modelled)",
    }),
    defaults={"head_dim": 128, "num_key_value_heads": 8}, read_options=read_options,
    tensors=partial(_decoder.tensors, mlp=feed_forward_tensors), lora_modules=lora_table,
    lora_order=("experts.gate_up_proj", "experts.down_proj", "router", "gate_proj", "up_proj", "down_proj"),
    not_all_linear=("experts",), tp_plan=TP_PLAN, prefill_phases=prefill_phases,
    traced=False,  # every token through every expert: not the MoE trace (activations='textbook')
)
