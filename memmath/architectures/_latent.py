"""Multi-head latent attention (DeepSeek-V2, Liu et al. 2024, section 2.1) as transformers 5.24 stores and caches it
(modeling_deepseek_v2.py, modeling_deepseek_v3.py: DeepseekV2Attention, DeepseekV3Attention; Kimi-K2 builds as
DeepseekV3ForCausalLM): its parameter tensors and the values its cache holds.

The queries come from the hidden state through q_proj (q_lora_rank null: DeepSeek-V2-Lite) or a low-rank pair
q_a_proj -> q_a_layernorm -> q_b_proj; the keys and values from one down-projection kv_a_proj_with_mqa (the
compressed key/value, kv_lora_rank, and one rotary key of qk_rope_head_dim shared by every head), its norm
kv_a_layernorm, and the up-projection kv_b_proj to every head's non-rotary key (qk_nope_head_dim) and value
(v_head_dim). The cache holds the compressed key/value and the rotary key: (kv_lora_rank + qk_rope_head_dim) values a
token a layer (memmath/states.py, latent_attention_bytes).

peft 0.21 (measured on the meta device, tests/test_families_moe.py and test_families_deepseek.py): "all-linear" adapts
each linear listed here, the router and the routed experts, and leaves the dense blocks' MLP and the shared experts;
the names k_proj and v_proj match nothing, q_proj only without q_lora_rank. The records (_deepseek.lora_table) name
the query path "q" and the key/value path "k" and "v".

The forward pass (trace, attention) is DeepseekV3Attention's and DeepseekV2Attention's; the records compose it with
a dense MLP or _deepseek's mixture of experts, one ModelShape per block layout (_deepseek.BLOCK_FIELDS).
"""

from __future__ import annotations


from .. import validate
from ..trace import Tensor
from ._parts import linear, norm
from ._steps import kv_cache
from ..values import frozen

# The config fields of multi-head latent attention (DeepseekV2Config, DeepseekV3Config), and what they change.
LATENT_FIELDS = {"q_lora_rank": "the queries' low-rank width (null: one q_proj, DeepSeek-V2-Lite)",
                 "kv_lora_rank": "the compressed key/value width (KV cache)",
                 "qk_nope_head_dim": "each head's non-rotary query/key width",
                 "qk_rope_head_dim": "the rotary query/key width (the rotary key is cached once a token)",
                 "v_head_dim": "each head's value width"}


@frozen
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


# ---- the forward pass ------------------------------------------------------------------------------------------
def trace(tr, shape, x, trainable: bool, p, *, rotary) -> object:
    """DeepseekV3Attention / DeepseekV2Attention on the normed input x through o_proj (memmath/trace.py's ops).

    The queries: q_proj, or q_a_proj, q_a_layernorm (an RMSNorm over q_lora_rank) and q_b_proj. The keys and
    values: kv_a_proj_with_mqa, split into the compressed key/value and the rotary key (views of its output);
    kv_a_layernorm reads the first view, so in fp32 (where .to(float32) returns the view) it keeps the whole
    kv_a_proj_with_mqa output. rotary(tr, q_rot, k_rot, p) rotates the rotary parts (views); the DynamicCache of a
    training forward copies the normed latent and the rotary key (cache.update); torch.cat builds the queries;
    expand_kv's kv_b_proj gives each head's non-rotary key and value (the value a strided view of its output), and
    the keys are copied into a fresh tensor (new_empty + copy_, which keep nothing). Then the attention
    (attention(), below), the heads merged, o_proj."""
    t = tr.t
    h, a, dims = shape.hidden_size, shape.n_heads, shape.latent
    qk, rope, v_width = dims.qk_head_dim, dims.qk_rope_head_dim, dims.v_head_dim
    if dims.q_lora_rank is None:
        q = tr.linear(x, t * a * qk, trainable, p.lora_of("q_proj"), "q_proj")
    else:
        q = tr.linear(x, t * dims.q_lora_rank, trainable, p.lora_of("q_a_proj"), "q_a_proj")
        q = tr.rms_norm(q, trainable, "q_a_layernorm")
        q = tr.linear(q, t * a * qk, trainable, p.lora_of("q_b_proj"), "q_b_proj")
    compressed = tr.linear(x, t * dims.cached_per_token, trainable, p.lora_of("kv_a_proj_with_mqa"),
                           "kv_a_proj_with_mqa")
    latent = _view(compressed, t * dims.kv_lora_rank)
    latent = tr.rms_norm(latent, trainable, "kv_a_layernorm")
    q_rot, k_rot = rotary(tr, _view(q, t * a * rope), _view(compressed, t * rope), p)
    if p.cache:  # cache.update(kv_nope, k_rot): torch.cat copies, held by the cache to the end of the forward pass
        latent, k_rot = kv_cache(tr, latent, k_rot)
    query = tr.new(t * a * qk, tr.e, q.grad or q_rot.grad)  # torch.cat((q_pass, q_rot), dim=-1)
    tr.use(q, q_rot)
    kv = tr.linear(latent, t * a * (dims.qk_nope_head_dim + v_width), trainable, p.lora_of("kv_b_proj"), "kv_b_proj")
    key = tr.new(t * a * qk, tr.e, kv.grad or k_rot.grad)  # new_empty, then copy_ of k_nope and the expanded k_rot
    tr.use(kv, k_rot)
    value = _view(kv, t * a * v_width)
    ctx = attention(tr, query, key, value, heads=a, qk=qk, v_width=v_width, kind=p.kind, dropout=p.dropout)
    merged = tr.new(t * a * v_width, ctx.elem, ctx.grad)  # transpose(1, 2).contiguous() / reshape(...).contiguous()
    tr.use(ctx)
    return tr.linear(merged, t * h, trainable, p.lora_of("o_proj"), "o_proj")


def _view(x, numel):
    """A view of part of x: x's storage, numel elements."""
    return Tensor(numel, x.elem, x.grad, x.storage)


def attention(tr, q, k, v, *, heads, qk, v_width, kind, dropout):
    """The attention of multi-head latent attention, whose queries and keys (qk wide a head) differ in width from
    its values (v_width): the value is a strided view of kv_b_proj's output.

    eager (eager_attention_forward): q @ k^T keeps q and k themselves (contiguous, reshaped as views); the fp32
    softmax keeps its output, cast to the model's dtype for probs @ v, which keeps the cast probabilities and a
    contiguous copy of v (matmul's reshape of the strided view).
    SDPA on the CPU: torch runs its flash kernel only for equal widths; otherwise its math kernel
    (_scaled_dot_product_attention_math), which upcasts 16-bit inputs to fp32 and keeps the scaled q and k, the
    fp32 softmax output and a contiguous fp32 copy of v. SDPA on CUDA is taken to keep q, k, v (the view's storage),
    its output and the fp32 log-sum-exp, as its flash and memory-efficient kernels do (not measured here)."""
    t, e, b, s = tr.t, tr.e, tr.b, tr.s
    scores = b * heads * s * s
    nq, nv = t * heads * qk, t * heads * v_width
    grad = q.grad or k.grad or v.grad
    if kind == "flash" and (tr.device != "cpu" or qk == v_width):
        out = tr.new(nv, e, grad)
        lse = tr.new(b * heads * s, 4)
        tr.use(q, k, v, lse)
        if grad:
            for x, what in ((q, "q"), (k, "k"), (v, "v")):
                tr.save(x, f"attention {what} (SDPA input)")
            tr.save(lse, "attention log-sum-exp (fp32)")
            tr.save(out, "attention SDPA output")
        return out
    if kind == "eager":
        if k.grad:
            tr.save(q, "attention q (QK^T)")
        if q.grad:
            tr.save(k, "attention k^T (QK^T)")
        raw = tr.tmp(scores, e, q, k)  # q @ k^T
        raw = tr.tmp(scores, e, raw)  # * scaling (+ mask)
        probs = tr.new(scores, 4, grad)  # softmax(dtype=float32)
        tr.use(raw)
        if grad:
            tr.save(probs, "attention softmax output (fp32)")
        if e != 4:  # .to(query.dtype)
            cast = tr.new(scores, e, grad)
            tr.use(probs)
            probs = cast
        probs = tr.dropout(probs, dropout, "attention")
        vc = tr.new(nv, e, v.grad)  # matmul's reshape of the strided value view: a copy
        tr.use(v)
        if v.grad:
            tr.save(probs, "attention probabilities (PV)")
        if probs.grad:
            tr.save(vc, "attention v copy (PV)")
        out = tr.new(nv, e, grad)
        tr.use(probs, vc)
        return out
    # the math kernel (the CPU's SDPA for unequal widths, or with dropout)
    qs = tr.new(nq, 4, q.grad)  # q (upcast and) scaled
    ks = tr.new(nq, 4, k.grad)
    tr.use(q, k)
    if ks.grad:
        tr.save(qs, "attention q, scaled (fp32, SDPA math)")
    if qs.grad:
        tr.save(ks, "attention k, scaled (fp32, SDPA math)")
    raw = tr.tmp(scores, 4, qs, ks)
    probs = tr.new(scores, 4, grad)
    tr.use(raw)
    if grad:
        tr.save(probs, "attention softmax output (fp32, SDPA math)")
    probs = tr.dropout(probs, dropout, "attention")
    vc = tr.new(nv, 4, v.grad)  # v upcast and made contiguous
    tr.use(v)
    if v.grad:
        tr.save(probs, "attention probabilities (fp32, SDPA math)")
    if probs.grad:
        tr.save(vc, "attention v copy (fp32, SDPA math)")
    out = tr.new(nv, 4, grad)
    tr.use(probs, vc)
    if e != 4:
        out = tr.tmp(nv, e, out)
        out.grad = grad
    return out
