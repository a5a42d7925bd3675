"""Multi-head latent attention (DeepSeek-V2, Liu et al. 2024, section 2.1) as transformers 5.24 stores and caches it
(modeling_deepseek_v2.py, modeling_deepseek_v3.py: DeepseekV2Attention, DeepseekV3Attention; Kimi-K2 builds as
DeepseekV3ForCausalLM): its parameter tensors and the values its cache holds.

The queries come from the hidden state through q_proj (q_lora_rank null: DeepSeek-V2-Lite) or a low-rank pair
q_a_proj -> q_a_layernorm -> q_b_proj; the keys and values from one down-projection kv_a_proj_with_mqa (the
compressed key/value, kv_lora_rank, and one rotary key of qk_rope_head_dim shared by every head), its norm
kv_a_layernorm, and the up-projection kv_b_proj to every head's non-rotary key (qk_nope_head_dim) and value
(v_head_dim). The cache holds the compressed key/value and the rotary key: (kv_lora_rank + qk_rope_head_dim) values a
token a layer (memmath/states.py, latent_attention_bytes).

peft 0.21 (measured on the meta device, tests/test_families_moe.py): "all-linear" adapts each linear listed here,
the router and the routed experts, and leaves the dense blocks' MLP and the shared experts; the names q_proj, k_proj
and v_proj match nothing with q_lora_rank set (only q_proj without it), so a record refuses the targets "k" and "v"
(and "q" with q_lora_rank) by name.

A record composes these with _moe.shared_experts_tensors once ModelShape lists blocks of more than one layout:
DeepSeek-V2/V3 and Kimi-K2 keep dense MLPs in their first first_k_dense_replace blocks (DeepseekV3DecoderLayer).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import validate
from ._parts import linear, norm

# The config fields of multi-head latent attention (DeepseekV2Config, DeepseekV3Config), and what they change.
LATENT_FIELDS = {"q_lora_rank": "the queries' low-rank width (null: one q_proj, DeepSeek-V2-Lite)",
                 "kv_lora_rank": "the compressed key/value width (KV cache)",
                 "qk_nope_head_dim": "each head's non-rotary query/key width",
                 "qk_rope_head_dim": "the rotary query/key width (the rotary key is cached once a token)",
                 "v_head_dim": "each head's value width"}


@dataclass(frozen=True)
class LatentDims:
    """The widths of one latent-attention layer, as DeepseekV2Config/DeepseekV3Config name them."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def __post_init__(self):
        for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            validate.count(key, getattr(self, key), high=validate.MAX_DIM, scalar=True)
        if self.q_lora_rank is not None:
            validate.count("q_lora_rank", self.q_lora_rank, high=validate.MAX_DIM, scalar=True)

    @property
    def qk_head_dim(self) -> int:
        """A query's and a key's width per head: the non-rotary and the rotary parts."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def cached_per_token(self) -> int:
        """Values the cache holds a token a layer: the compressed key/value and the shared rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


def read_dims(config: dict, get, defaults) -> LatentDims:
    """The latent widths from a config.json (`get`: its reader), the config class's `defaults` where a field is
    absent; q_lora_rank may be null (one q_proj, DeepSeek-V2-Lite)."""
    q_rank = config.get("q_lora_rank", defaults["q_lora_rank"])
    return LatentDims(q_lora_rank=None if q_rank is None else get("q_lora_rank", q_rank),
                      **{key: get(key, defaults[key]) for key in
                         ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")})


def attention_tensors(hidden_size: int, heads: int, dims: LatentDims, bias: bool = False) -> list:
    """One latent-attention layer's tensors in parameters() order (DeepseekV3Attention.__init__); attention_bias
    puts biases on q_a_proj, kv_a_proj_with_mqa and o_proj only."""
    h, a = hidden_size, heads
    if dims.q_lora_rank is None:
        query = linear("self_attn.q_proj", "attention", h, a * dims.qk_head_dim, False)
    else:
        query = (linear("self_attn.q_a_proj", "attention", h, dims.q_lora_rank, bias)
                 + norm("self_attn.q_a_layernorm", dims.q_lora_rank, False)
                 + linear("self_attn.q_b_proj", "attention", dims.q_lora_rank, a * dims.qk_head_dim, False))
    return (query
            + linear("self_attn.kv_a_proj_with_mqa", "attention", h, dims.cached_per_token, bias)
            + norm("self_attn.kv_a_layernorm", dims.kv_lora_rank, False)
            + linear("self_attn.kv_b_proj", "attention", dims.kv_lora_rank,
                     a * (dims.qk_nope_head_dim + dims.v_head_dim), False)
            + linear("self_attn.o_proj", "attention", a * dims.v_head_dim, h, bias))


def cache_values(dims: LatentDims, *, layers: int, context_len, batch_size):
    """Values the cache holds: cache.update(kv_nope, k_pe) stores the normed compressed key/value and the rotary key
    of one head, (kv_lora_rank + qk_rope_head_dim) x tokens x batch a layer, whatever the head count. Every layer
    attends to the whole context (no sliding layers in these families)."""
    return dims.cached_per_token * context_len * batch_size * layers
