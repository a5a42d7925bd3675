"""GLM-4.7-Flash (transformers 5.24 configuration_glm4_moe_lite.py, modeling_glm4_moe_lite.py: Glm4MoeLiteForCausalLM).

Its modeling file is DeepSeek-V3's (deepseek_v3.py, _deepseek.py) but for two things, read here: which blocks have a
dense MLP (Glm4MoeLiteDecoderLayer builds Glm4MoeLiteMLP where config mlp_layer_types says "dense" and the mixture of
experts where it says "sparse"; Glm4MoeLiteConfig.__post_init__ makes the first block dense and the others sparse
when the config lists none), and the rotary frequencies over int(qk_rope_head_dim x partial_rotary_factor) dims.

- Glm4MoeLiteAttention is DeepseekV3Attention: multi-head latent attention (_latent.py), q through q_a_proj,
  q_a_layernorm and q_b_proj (or q_proj without q_lora_rank), keys and values through kv_a_proj_with_mqa,
  kv_a_layernorm and kv_b_proj, the rotary part of qk_rope_head_dim dims, a latent cache of kv_lora_rank +
  qk_rope_head_dim values a token a layer.
- Glm4MoeLiteMoE is DeepseekV3MoE (GLM-4.5's Glm4MoeMoE): routed experts as two 3-D Parameters, a sigmoid router
  (an fp32 E x h weight, the fp32 buffer e_score_correction_bias, group-limited top-k, renormalized where
  norm_topk_prob, times routed_scaling_factor) and the shared experts, one SwiGLU MLP of n_shared_experts x
  moe_intermediate_size; a dense block's Glm4MoeLiteMLP is intermediate_size wide.

The dense blocks are a second block layout (ModelShape.block_layouts) with _deepseek.DENSE_FIELDS, at whatever
indices mlp_layer_types names. The forward pass, the latent cache and a prefill's working set are DeepSeek-V3's
functions (tests/test_families_glm_lite.py steps and prefills small models on the CPU, measured after this record was
written).

Refused: a partial_rotary_factor other than 1 (transformers builds the model, but apply_rotary_pos_emb_interleave then
multiplies qk_rope_head_dim query values by fewer cos values and fails, unless one frequency is left, which
broadcasts). A 16-bit load keeps the router's weight in fp32 (_keep_in_fp32_modules_strict: gate.weight;
fp32_modules), as for DeepSeek-V3. Not modelled: the multi-token-prediction block of the checkpoint (num_nextn_predict_layers), which Glm4MoeLiteForCausalLM does not build."""

from __future__ import annotations

from functools import partial

from .. import validate
from . import _deepseek
from .record import Architecture

# Glm4MoeLiteConfig's defaults (GLM-4.7-Flash's shape, as the class names it) of the fields memmath reads where the
# reader has none
DEFAULTS = {"vocab_size": 154880, "hidden_size": 2048, "intermediate_size": 10240, "num_hidden_layers": 47,
            "num_attention_heads": 20, "head_dim": 64, "q_lora_rank": 768, "kv_lora_rank": 512,
            "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256, "moe_intermediate_size": 1536,
            "n_routed_experts": 64, "n_shared_experts": 1, "num_experts_per_tok": 4, "norm_topk_prob": True,
            "num_key_value_heads": 20, "n_group": 1, "topk_group": 1}
MLP_LAYER_TYPES = ("dense", "sparse")

# Glm4MoeLiteConfig.base_model_tp_plan's colwise and rowwise entries: q_b_proj (after the low-rank q_a_proj, which
# stays whole), the key/value up-projection, o_proj and a dense block's MLP; it names no shared experts (whole on
# every rank, unlike DeepSeek-V3's plan), and kv_a_proj_with_mqa's "mla_kv_a_proj" is not a plain split (memmath keeps
# it whole, as for DeepSeek-V2); the routed experts split by ep and their widths by tp (memmath/parallel.py)
TP_PLAN = {"layers.*.self_attn.q_b_proj": "colwise", "layers.*.self_attn.kv_b_proj": "colwise",
           "layers.*.self_attn.o_proj": "rowwise", "layers.*.mlp.gate_proj": "colwise",
           "layers.*.mlp.up_proj": "colwise", "layers.*.mlp.down_proj": "rowwise"}

FIELDS = {key: text for key, text in _deepseek.fields({
    "rope_interleave": "the rotary key's layout (saved activations only)",
    "mlp_layer_types": "per block dense (Glm4MoeLiteMLP) or sparse (the mixture of experts): the dense blocks are a "
                       "second block layout (default: the first block dense)",
    "rope_parameters": "partial_rotary_factor: 1 only",
    "partial_rotary_factor": "as the top-level field: 1 only",
    # Glm4MoeLiteConfig.attribute_map: head_dim is qk_rope_head_dim (hidden_size need not be heads x head_dim:
    # GLM-4.7-Flash's 2,048 is not a multiple of its 20 heads)
    "head_dim": "qk_rope_head_dim's other name",
}).items() if key != "first_k_dense_replace"}  # Glm4MoeLiteConfig does not read it (mlp_layer_types does its work)


def _mlp_layer_types(config, layers: int) -> tuple:
    """mlp_layer_types as Glm4MoeLiteConfig holds it: the config's list, else the first block dense and the others
    sparse (__post_init__)."""
    given = config.get("mlp_layer_types")
    if given is None:
        return ("dense",) + ("sparse",) * (layers - 1)
    if not isinstance(given, list) or len(given) != layers or any(t not in MLP_LAYER_TYPES for t in given):
        raise ValueError(f"config field 'mlp_layer_types' must list one of {', '.join(MLP_LAYER_TYPES)} per block "
                         f"({layers}); got {validate.describe(given)}")
    return tuple(given)


def _check_rotary(config) -> None:
    """Glm4MoeLiteRotaryEmbedding makes int(qk_rope_head_dim x partial_rotary_factor) rotary values; the attention
    rotates all qk_rope_head_dim of them, so only a factor of 1 runs."""
    rope = config.get("rope_parameters") if isinstance(config.get("rope_parameters"), dict) else {}
    factor = rope.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
    if factor != 1:
        raise ValueError(f"config field 'partial_rotary_factor' is {validate.describe(factor)}; memmath models 1 only "
                         "(Glm4MoeLiteAttention rotates every one of the qk_rope_head_dim dims, and the forward pass "
                         "fails with fewer rotary frequencies)")


def read_options(config, get):
    """DeepSeek-V3's reading (_deepseek.read_options) of a config whose every block is a mixture of experts, or
    whose every block is dense, then the dense blocks mlp_layer_types names as a second block layout."""
    _check_rotary(config)
    layers = get("num_hidden_layers")
    types = _mlp_layer_types(config, layers)
    dense = tuple(i for i, kind in enumerate(types) if kind == "dense")
    every = dict(config, first_k_dense_replace=layers if len(dense) == layers else 0)
    options = _deepseek.read_options(every, type(get)(every, get.defaults), sigmoid=True)
    if dense and len(dense) < layers:
        options["block_layouts"] = ((dense, tuple(_deepseek.DENSE_FIELDS.items())),)
    return options


ARCHITECTURE: Architecture = _deepseek.LatentArchitecture(
    model_type="glm4_moe_lite", family="llama", title="GLM-4.7-Flash",
    source="configuration_glm4_moe_lite.py, modeling_glm4_moe_lite.py",
    fields=FIELDS, defaults=DEFAULTS, read_options=read_options, tensors=_deepseek.tensors,
    lora_modules=_deepseek.lora_table, lora_order=_deepseek.LORA_ORDER, tp_plan=TP_PLAN,
    kv_cache_values=_deepseek.kv_cache_values,
    trace_block=partial(_deepseek.block, rotary=_deepseek.rotary_tables, sigmoid=True),
    prefill_phases=partial(_deepseek.prefill_phases, complex_rotary=False),
    routing_weights_fp32=True,  # the top-k weights stay fp32 (the sigmoid scores times a float)
    fp32_modules=("e_score_correction_bias", "gate.weight"),  # Glm4MoeLitePreTrainedModel._keep_in_fp32_modules_strict
)
