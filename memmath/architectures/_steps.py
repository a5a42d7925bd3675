"""What every traced block reads besides its input, and the steps blocks of every family share: transformers'
DynamicCache in a training forward and Houlsby adapters after a projection. The replay itself is
memmath/hf_activations.py; the ops are memmath/trace.py's."""

from __future__ import annotations


from ..arrays import is_ndarray, np
from ..trace import Tensor, Trace
from ..values import frozen

INT64 = 8  # token ids, position ids and labels are int64


@frozen
class Pass:
    """One forward pass as a block sees it.

    kind: the attention kernel ("eager", "flash" for SDPA without dropout, "math" for the CPU's SDPA with
    dropout); dropout: the config's dropout is on; tables: the rotary cos and sin (shared by every block);
    cache: k and v go through transformers' DynamicCache first (kv_cache); lora_modules and lora: the modules
    LoRA adapts and its (rank, adapter bytes per element); houlsby: the bottleneck of the Houlsby adapters
    (None: none); checkpointed: the run checkpoints its blocks.
    """

    kind: str
    dropout: bool
    tables: tuple = ()
    cache: bool = False
    lora_modules: frozenset = frozenset()
    lora: tuple | None = None
    houlsby: object = None
    checkpointed: bool = False  # gradient checkpointing: the block runs inside torch.utils.checkpoint

    def lora_of(self, module: str):
        """(rank, adapter bytes) when LoRA adapts `module`, else None."""
        return self.lora if module in self.lora_modules else None


def dims(shape):
    """The letters of hf_activations' docstring: h, a heads, k key/value heads, d head size, I, V, labels, rd."""
    a, d = shape.n_heads, shape.head_dim
    rd = shape.rotary_dim or d
    if getattr(shape.architecture, "rotary_half_tables", False):  # rd: the width of the rotary cos and sin tables
        rd //= 2
    return dict(h=shape.hidden_size, a=a, k=shape.n_kv_heads or a, d=d, I=shape.intermediate_size,
                V=shape.vocab_size, labels=shape.num_labels, rd=rd)


def kv_cache(tr: Trace, k: Tensor, v: Tensor):
    """transformers' DynamicCache in a training forward: with config.use_cache (every config class's default)
    and no gradient checkpointing, each decoder model builds one (modeling_gpt_neox.py:328-329,
    modeling_phi3.py:378-379, ...) and attention reads k and v back from cache.update(), which returns
    torch.cat([self.keys, key_states], dim=-2) and the same for values (cache_utils.py:136-137): new contiguous
    copies, held by the cache until the forward returns. What was a view of a fused projection (GPT-2's c_attn,
    GPT-NeoX's query_key_value, Phi-3's qkv_proj) is no longer what attention keeps: found when GPT-NeoX and
    Phi-3 configs with transformers' defaults measured 2 x t x h x e per block less than the trace without it."""
    copies = []
    for x in (k, v):
        copy = tr.new(x.numel, x.elem, x.grad)
        tr.use(x)
        copies.append(tr.cache_held(copy))
    return tuple(copies)


def houlsby(tr: Trace, x: Tensor, p: Pass, name: str) -> Tensor:
    """x + up(gelu(down(x))) after a projection when Houlsby adapters train (validation/houlsby.py; Houlsby et
    al. 2019, figure 2): each trainable linear keeps its input, F.gelu keeps its own."""
    if p.houlsby is None:
        return x
    down = tr.linear(x, tr.t * p.houlsby, True, None, f"{name} adapter down")
    up = tr.linear(tr.gelu(down, f"{name} adapter GELU"), x.numel, True, None, f"{name} adapter up")
    return tr.add(x, up)


def merged_copy(tr: Trace, ctx: Tensor) -> Tensor:
    """transpose(1, 2).contiguous() of an SDPA output that is contiguous as (b, a, s, d) (its q came from torch.cat):
    a copy for the output projection."""
    merged = tr.new(ctx.numel, ctx.elem, ctx.grad)
    tr.use(ctx)
    return merged


def smaller(x, y):
    """min for Python ints and element-wise for int64 arrays alike."""
    return np.minimum(x, y) if is_ndarray(x) or is_ndarray(y) else min(x, y)


def larger(x, y):
    """max for Python ints and element-wise for int64 arrays alike."""
    return np.maximum(x, y) if is_ndarray(x) or is_ndarray(y) else max(x, y)


def mul(tr: Trace, x: Tensor, y: Tensor, numel=None, elem=None, names=("x", "y")) -> Tensor:
    """x * y (broadcast to `numel` elements of `elem` bytes; x's size in the model's dtype by default): MulBackward0
    keeps x for y's gradient and y for x's (a view keeps its whole storage)."""
    out = tr.new(x.numel if numel is None else numel, tr.e if elem is None else elem, x.grad or y.grad)
    tr.use(x, y)
    if y.grad:
        tr.save(x, names[0])
    if x.grad:
        tr.save(y, names[1])
    return out


def to_fp32(tr: Trace, x: Tensor) -> Tensor:
    """x.float(): x itself in fp32, else an fp32 copy."""
    if x.elem == 4:
        return x
    out = tr.new(x.numel, 4, x.grad)
    tr.use(x)
    return out
