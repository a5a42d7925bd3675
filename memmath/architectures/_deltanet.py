"""Gated DeltaNet linear attention (Yang et al. 2025, "Gated Delta Networks") as transformers 5.24 stores it in
Qwen3-Next (modeling_qwen3_next.py, Qwen3NextGatedDeltaNet): its parameter tensors, its fixed-size cache, and the
block layouts of a model that interleaves it with full attention (config layer_types).

A linear-attention block's token mixer holds a depthwise causal convolution over the queries, keys and values
(conv1d, conv_dim x 1 x conv_kernel, no bias), the input projections in_proj_qkvz (h -> 2 key_dim + 2 value_dim: q,
k, v and the output gate z) and in_proj_ba (h -> 2 value heads: the beta and decay inputs), dt_bias and A_log (one
value a value head), a gated RMSNorm over one value head (norm.weight) and out_proj (value_dim -> h). Its cache is a
conv state and an fp32 recurrent state, the same size at any context (memmath/states.py, GatedDeltaNet).

The trace steps below replay transformers' PyTorch path of the mixer (causal_conv1d_fn, torch_chunk_gated_delta_rule,
Qwen3NextRMSNormGated), which the CPU always takes and a GPU takes without flash-linear-attention and causal-conv1d
(Run.mixer_kernels='torch'), and Qwen3NextDecoderLayer's gated full attention beside it; measured to the byte against
autograd by tests/test_families_deltanet_trace.py.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from ..recurrent import RECURRENT_STATE_FORMAT, GatedDeltaNet, values_bytes
from ..arrays import is_ndarray, np, pick
from ..trace import Tensor, Trace
from . import _decoder
from ._parts import ParamTensor, linear
from ._steps import dims, kv_cache, merged_copy, mul, to_fp32
from .gpt_neox import partial_rotary

# The config fields of the linear-attention layers (Qwen3NextConfig) and what they change.
DELTANET_FIELDS = {
    "linear_num_key_heads": "key heads of a linear-attention layer (tensors, state)",
    "linear_num_value_heads": "value heads of a linear-attention layer (tensors, state)",
    "linear_key_head_dim": "a linear-attention key head's width (tensors, state)",
    "linear_value_head_dim": "a linear-attention value head's width (tensors, state)",
    "linear_conv_kernel_dim": "the causal convolution's width (tensors, conv state)",
    "layer_types": "per block linear_attention or full_attention (a second block layout)",
    "full_attention_interval": "layer_types when not given (every n-th block full attention)",
}
LINEAR = "linear_attention"  # ModelShape.block_kind of a linear-attention block
# The trace's kind (trace_shape) of a linear-attention block in a model with full-attention blocks too, whose rotary
# cos and sin one table pair for all blocks, saved by the full-attention blocks, this layout counts when it is last.
LINEAR_BESIDE_FULL = "linear_attention beside full attention"


def is_linear(m) -> bool:
    """Whether a shape's (or a block layout's) blocks are linear-attention blocks, in the record or in the trace."""
    return m.block_kind in (LINEAR, LINEAR_BESIDE_FULL)


def read_dims(get) -> GatedDeltaNet:
    """The linear-attention widths from a config (`get`: its reader, with Qwen3NextConfig's defaults)."""
    return GatedDeltaNet(key_heads=get("linear_num_key_heads", 16), value_heads=get("linear_num_value_heads", 32),
                         key_head_dim=get("linear_key_head_dim", 128), value_head_dim=get("linear_value_head_dim", 128),
                         conv_kernel=get("linear_conv_kernel_dim", 4))


def layer_types(config, get, layers) -> tuple:
    """config layer_types as given, else Qwen3NextConfig.__post_init__'s: every full_attention_interval-th block
    full attention, the others linear."""
    given = config.get("layer_types")
    if given is None:
        interval = get("full_attention_interval", 4)
        return tuple(LINEAR if (i + 1) % interval else "full_attention" for i in range(layers))
    if not isinstance(given, list) or len(given) != layers or any(t not in (LINEAR, "full_attention") for t in given):
        raise ValueError(f"config field 'layer_types' must list linear_attention or full_attention for each of the "
                         f"{layers} blocks; got {given!r:.200}")
    return tuple(given)


def conv_dim(dims: GatedDeltaNet) -> int:
    """The convolution's channels: queries, keys and values (2 key_dim + value_dim)."""
    return 2 * dims.key_heads * dims.key_head_dim + dims.value_heads * dims.value_head_dim


def state_bytes(dims: GatedDeltaNet, batch_size, dtype):
    """One linear-attention block's cache: its conv state, batch x conv_dim x conv_kernel values in dtype (the model's:
    Qwen3NextGatedDeltaNet hands the cache the convolution's input, and LinearAttentionLayer allocates zeros of its
    dtype), and its recurrent state, batch x value heads x key_head_dim x value_head_dim values in fp32 (the PyTorch
    torch_chunk_gated_delta_rule computes it in fp32 and the cache keeps zeros_like of it)."""
    conv = batch_size * conv_dim(dims) * dims.conv_kernel
    recurrent = batch_size * dims.value_heads * dims.key_head_dim * dims.value_head_dim
    return values_bytes(conv, dtype) + values_bytes(recurrent, RECURRENT_STATE_FORMAT)


def tensors(hidden_size: int, dims: GatedDeltaNet) -> list:
    """Qwen3NextGatedDeltaNet's parameters in parameters() order: its own (dt_bias, A_log) before its submodules'."""
    h, kd, vd = hidden_size, dims.key_heads * dims.key_head_dim, dims.value_heads * dims.value_head_dim
    return ([ParamTensor("linear_attn.dt_bias", "attention", (dims.value_heads,)),
             ParamTensor("linear_attn.A_log", "attention", (dims.value_heads,)),
             ParamTensor("linear_attn.conv1d.weight", "attention", (conv_dim(dims), 1, dims.conv_kernel))]
            + linear("linear_attn.in_proj_qkvz", "attention", h, 2 * kd + 2 * vd, False)
            + linear("linear_attn.in_proj_ba", "attention", h, 2 * dims.value_heads, False)
            + [ParamTensor("linear_attn.norm.weight", "norms", (dims.value_head_dim,))]
            + linear("linear_attn.out_proj", "attention", vd, h, False))


def split_tensors(hidden_size: int, dims: GatedDeltaNet) -> list:
    """Qwen 3.5's Qwen3_5GatedDeltaNet in parameters() order: dt_bias and A_log, then its submodules as it registers
    them: conv1d, the gated norm, out_proj, and the input projection split in four (in_proj_qkv: h -> 2 key_dim +
    value_dim; in_proj_z: h -> value_dim; in_proj_b and in_proj_a: h -> value heads)."""
    h, kd, vd, heads = hidden_size, dims.key_heads * dims.key_head_dim, dims.value_heads * dims.value_head_dim, \
        dims.value_heads
    return ([ParamTensor("linear_attn.dt_bias", "attention", (heads,)),
             ParamTensor("linear_attn.A_log", "attention", (heads,)),
             ParamTensor("linear_attn.conv1d.weight", "attention", (conv_dim(dims), 1, dims.conv_kernel)),
             ParamTensor("linear_attn.norm.weight", "norms", (dims.value_head_dim,))]
            + linear("linear_attn.out_proj", "attention", vd, h, False)
            + linear("linear_attn.in_proj_qkv", "attention", h, 2 * kd + vd, False)
            + linear("linear_attn.in_proj_z", "attention", h, vd, False)
            + linear("linear_attn.in_proj_b", "attention", h, heads, False)
            + linear("linear_attn.in_proj_a", "attention", h, heads, False))


def group_blocks(per_block: list) -> tuple:
    """ModelShape.block_layouts from each block's field changes (() where a block is the shape's own layout):
    the blocks with the same changes together, in the order of their first block."""
    groups: dict = {}
    for i, changes in enumerate(per_block):
        if changes:
            groups.setdefault(tuple(changes), []).append(i)
    return tuple((tuple(blocks), changes) for changes, blocks in groups.items())


# ---- the forward pass: transformers 5.24's PyTorch path (Run.mixer_kernels='torch') -------------------------------
CHUNK = 64  # torch_chunk_gated_delta_rule's chunk_size, as Qwen3NextGatedDeltaNet.forward calls it
KERNELS = "flash-linear-attention's and causal-conv1d's kernels"  # what transformers calls instead where installed
FP32 = 4
# tests/test_families_deltanet_trace.py's checkpointed CPU steps (b 2, s 64): measured / predicted - 1
QWEN3_5_CHECKPOINTED_PEAK_REFUSAL = ("with checkpointing: not measured for Qwen 3.5, whose gated DeltaNet blocks "
                                     "are Qwen3-Next's, where CPU steps peaked up to 19.5% above the prediction")
CHECKPOINTED_PEAK_REFUSAL = ("with checkpointing, the backward of a recomputed gated DeltaNet block holds more than "
                             "memmath's moments price (not located): CPU steps peaked up to 19.5% above the prediction")


def trace_refusal(shape) -> str:
    """What the trace has no steps for: as many key heads as value heads, where no repeat_interleave copies q and k
    and the fp32 path keeps views of the convolution's output in other layouts."""
    dims = shape.linear_attention
    if dims is not None and dims.key_heads == dims.value_heads:
        return ("traces the gated DeltaNet blocks with fewer key heads than value heads (linear_num_key_heads < "
                "linear_num_value_heads, as the published configs have); with as many, q and k are not copied by "
                "repeat_interleave and keep other storages")
    return ""


def trace_shape(shape):
    """The shape the trace replays: a model with blocks of both kinds marks its linear-attention blocks
    LINEAR_BESIDE_FULL (hf_activations takes the rotary tables, shared by all blocks, from the last block's layout);
    any other shape as it is."""
    kinds = [shape.block_kind] * shape.n_layers
    for blocks, changes in shape.block_layouts:
        for i in blocks:
            kinds[i] = dict(changes).get("block_kind", shape.block_kind)
    if LINEAR not in kinds or all(kind == LINEAR for kind in kinds):
        return shape

    def marked(changes):
        return tuple(("block_kind", LINEAR_BESIDE_FULL) if change == ("block_kind", LINEAR) else change
                     for change in changes)

    return replace(shape, block_kind=LINEAR_BESIDE_FULL if shape.block_kind == LINEAR else shape.block_kind,
                   block_layouts=tuple((blocks, marked(changes)) for blocks, changes in shape.block_layouts))


def _matmul_operand(tr: Trace, x: Tensor, copy, name: str, grad: bool) -> None:
    """What a batched matmul keeps of one operand (when the other needs a gradient): x itself, and where `copy` (a
    bool, or one a point for a sweep) the contiguous copy torch.matmul's reshape to 3-D makes of an operand laid out
    (b, s, heads, d)."""
    if not grad:
        return
    tr.save(x, name)
    if is_ndarray(copy) or copy:
        tr.save(tr.new(pick(copy, x.numel, 0) if is_ndarray(copy) else x.numel, x.elem), f"{name}, reshape copy")


def _l2norm(tr: Trace, x: Tensor, rows, name: str) -> Tensor:
    """l2norm (modeling_qwen3_next.py): x * rsqrt((x * x).sum(-1) + eps) keeps x and the rsqrt (rows values)."""
    inv = tr.new(rows, FP32, x.grad)
    tr.tmp(x.numel, FP32, x)  # x * x
    tr.use(x)
    if x.grad:
        tr.save(x, f"{name} (l2norm input, fp32)")
        tr.save(inv, f"{name} l2norm rsqrt (fp32)")
    out = tr.new(x.numel, FP32, x.grad)
    tr.use(x, inv)
    return out


def chunk_rule(tr: Trace, dims: GatedDeltaNet, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor,
               cache: bool = False) -> Tensor:
    """torch_chunk_gated_delta_rule (modeling_qwen3_next.py) on q, k (b, s, key heads, dk), v, g and beta; returns the
    output as the module reads it, (t x value heads, dv) in the model's dtype.

    q and k are repeated to every value head (repeat_interleave, a new (b, s, H, d) tensor), then q, k, v, beta and g
    go to fp32 (b, H, s, .): a 16-bit model copies them contiguous, an fp32 one keeps (b, s, H, d)-laid-out views
    (.to() without a dtype change aliases), so its padded q, k and their products stay so laid out and every batched
    matmul over them keeps a contiguous copy (measured). Then l2norm on q and k, F.pad to whole chunks of CHUNK (a
    copy even with no padding), the beta products, the fp32 C x C decays and products of every chunk (b x H x N x C x
    C each: the exp'd decay mask, k_beta k^T, the UT system, q k^T, the intra-chunk attention), the two triangular
    solves (keeping the UT system and their results), the decayed q and k, and the scan over the N chunks: each keeps
    the recurrent state it reads (H x dk x dv per sequence, the first the zeros) and its v_new; the last chunk's state
    update is dropped with the final state (output_final_state is false without a cache; with one, cache, the final
    state goes to the cache's recurrent state, and the update is kept)."""
    e, b, s = tr.e, tr.b, tr.s
    heads, dk, dv = dims.value_heads, dims.key_head_dim, dims.value_head_dim
    n = (s + CHUNK - 1) // CHUNK  # chunks (the padded length n x CHUNK)
    rows, padded = b * s * heads, b * n * CHUNK * heads
    squares = padded * CHUNK  # b x H x N x C x C
    # an fp32 model's q and k keep their (b, s, H, d) layout through F.pad when it pads nothing (s a multiple of
    # CHUNK; a real padding makes them contiguous), and the batched matmuls over them then copy their operands
    fp32_layout = (np.asarray(s) % CHUNK == 0) if is_ndarray(s) else s % CHUNK == 0
    fp32_layout = fp32_layout & (e == FP32) if is_ndarray(fp32_layout) else fp32_layout and e == FP32
    grad = q.grad or k.grad or v.grad or g.grad or beta.grad

    def fp32(x, numel, copy=True):  # .transpose(1, 2).to(torch.float32, memory_format=contiguous)
        if e == FP32 and not copy:
            return x
        out = tr.new(numel, FP32, x.grad)
        tr.use(x)
        return out

    def repeated(x):  # repeat_interleave to every value head, in the model's dtype
        out = tr.new(rows * dk, e, x.grad)
        tr.use(x)
        return out

    qn = _l2norm(tr, fp32(repeated(q), rows * dk), b * s * heads, "linear attention q")
    kn = _l2norm(tr, fp32(repeated(k), rows * dk), b * s * heads, "linear attention k")
    v32, beta32 = fp32(v, rows * dv, copy=False), fp32(beta, rows, copy=False)
    qs = tr.tmp(rows * dk, FP32, qn)  # * scaling
    qs.grad = qn.grad

    def pad(x, width):
        out = tr.new(padded * width, FP32, x.grad)
        tr.use(x)
        return out

    qp, kp, vp, bp, gp = pad(qs, dk), pad(kn, dk), pad(v32, dv), pad(beta32, 1), pad(g, 1)
    v_beta = mul(tr, vp, bp, padded * dv, FP32, ("linear attention v (padded)", "linear attention beta (padded)"))
    k_beta = mul(tr, kp, bp, padded * dk, FP32, ("linear attention k (padded)", "linear attention beta (padded)"))
    cum = tr.new(padded, FP32, gp.grad)  # decay.cumsum(dim=3)
    tr.use(gp)
    pairwise = tr.tmp(squares, FP32, cum)  # cum_decay_i - cum_decay_j
    upper = tr.new(CHUNK * CHUNK, 1)  # the strictly upper triangular bool mask, made in each call
    masked = tr.new(squares, FP32, cum.grad)
    tr.use(pairwise, upper)
    if cum.grad:
        tr.save(upper, "linear attention chunk mask (bool)")
    decay = tr.new(squares, FP32, cum.grad)  # .exp(), which keeps its output
    tr.use(masked)
    if cum.grad:
        tr.save(decay, "linear attention pairwise decay (fp32, C x C a chunk)")

    def batched(x, y, numel, names):  # x @ y^T over (b, H, N): each operand kept for the other's gradient
        _matmul_operand(tr, x, fp32_layout, names[0], y.grad)
        _matmul_operand(tr, y, fp32_layout, names[1], x.grad)
        out = tr.new(numel, FP32, x.grad or y.grad)
        tr.use(x, y)
        return out

    ut = mul(tr, batched(k_beta, kp, squares, ("k_beta (matmul operand)", "k^T (matmul operand)")), decay, squares,
              FP32, ("k_beta k^T", "linear attention pairwise decay (fp32, C x C a chunk)"))
    intra = mul(tr, batched(qp, kp, squares, ("scaled q (matmul operand)", "k^T (matmul operand)")), decay, squares,
                 FP32, ("q k^T", "linear attention pairwise decay (fp32, C x C a chunk)"))

    def exp_of(x, numel, name):  # an exp of the cumulative decay, which keeps its output
        out = tr.new(numel, FP32, x.grad)
        tr.use(x)
        if x.grad:
            tr.save(out, name)
        return out

    decayed_k_beta = mul(tr, k_beta, exp_of(cum, padded, "exp(cumulative decay)"), padded * dk, FP32,
                          ("k_beta", "exp(cumulative decay)"))

    def solve(rhs, width, name):  # torch.linalg.solve_triangular keeps the system and its result
        out = tr.new(padded * width, FP32, ut.grad or rhs.grad)
        tr.use(ut, rhs)
        if out.grad:
            tr.save(ut, "UT system (fp32, C x C a chunk)")
            tr.save(out, name)
        return out

    new_values = solve(v_beta, dv, "UT-solved values")
    k_cumdecay = solve(decayed_k_beta, dk, "UT-solved decayed keys")
    core = tr.new(padded * dv, FP32)  # zeros_like(new_values), filled chunk by chunk
    q_decayed = mul(tr, qp, exp_of(cum, padded, "exp(cumulative decay) for q"), padded * dk, FP32,
                     ("scaled q (padded)", "exp(cumulative decay) for q"))
    k_decayed = mul(tr, kp, exp_of(cum, padded, "exp(chunk-end decay) for k"), padded * dk, FP32,
                     ("linear attention k (padded)", "exp(chunk-end decay) for k"))
    chunk_decay = exp_of(cum, b * heads * n, "exp(chunk decay)")
    state_numel, chunk_rows = b * heads * dk * dv, b * heads * CHUNK
    later = n - 1  # the chunks after the first: each reads the state the one before it wrote
    state = tr.new(state_numel, FP32)  # the zero initial state, which k_cumdecay @ state and q @ state keep
    if grad:
        tr.save(state, "recurrent state (fp32)")
    # The scan, its chunks together: v_new of each (kept by intra @ v_new), the states after each but the last (kept
    # by the next chunk's matmuls), and what the matmuls with them keep of the decayed q (chunks 1..N-1) and the
    # decayed k (chunks 0..N-2): chunk copies in the fp32 layout, else the whole tensors (views) once N > 1.
    v_new = tr.new(padded * dv, FP32, grad)
    tr.use(new_values, k_cumdecay, state)
    # one chunk's q @ state, intra @ v_new and their sum, alive at once before the sum is copied into the output
    inter, product = tr.new(chunk_rows * dv, FP32), tr.new(chunk_rows * dv, FP32)
    tr.tmp(chunk_rows * dv, FP32, inter, product, intra, q_decayed, core)
    states = tr.new(later * state_numel, FP32, grad)
    tr.use(k_decayed, chunk_decay, v_new)
    # with a cache the last chunk's state update is kept too (its result, the final state, goes to the cache): the
    # decayed k of every chunk is then read
    k_chunks = n if cache else later
    if not is_ndarray(n) and not is_ndarray(fp32_layout):
        if fp32_layout:  # the chunks' copies of the decayed q (chunks 1..N-1) and k (chunks 0..N-2, or 0..N-1)
            kept = [tr.new(later * chunk_rows * dk, FP32), tr.new(k_chunks * chunk_rows * dk, FP32)]
        else:  # views of the whole decayed q (once N > 1) and k (once it is read)
            kept = ([q_decayed] if n > 1 else []) + ([k_decayed] if k_chunks else [])
    else:  # a sweep: each point's bytes
        several = np.asarray(n) > 1
        kept = [tr.new(pick(np.asarray(fp32_layout), chunks * chunk_rows * dk, pick(read, padded * dk, 0)), FP32)
                for chunks, read in ((later, several), (k_chunks, several | bool(cache)))]
    if cache:  # the final state, which the cache copies into its own zeros_like of it, held to the forward's end
        final = tr.new(state_numel, FP32, grad)
        tr.use(k_decayed, states)
        held = tr.new(state_numel, FP32)
        tr.use(final)
        tr.cache_held(held)
    tr.use(q_decayed, intra, core, states)
    if grad:
        tr.save(intra, "intra-chunk attention (fp32, C x C a chunk)")
        tr.save(v_new, "v_new of each chunk (fp32)")
        tr.save(states, "recurrent state after each chunk but the last (fp32)")
        tr.save(chunk_decay, "exp(chunk decay)")
        for x in kept:
            tr.save(x, "decayed q or k (matmul operand, or its chunks' copies)")
    core.grad = grad
    if is_ndarray(n) or n > 1:  # reshape of the chunked output, laid out as solve_triangular's result: a copy
        core = tr.tmp(pick(np.asarray(n) > 1, padded * dv, 0) if is_ndarray(n) else padded * dv, FP32, core)
        core.grad = grad
    # the function's locals live until it returns: the padded v, beta and decay, the C x C decay, UT system and
    # intra-chunk attention, the products and solves, the decayed q and k, the chunk mask
    locals_ = (vp, bp, gp, cum, decay, ut, intra, upper, v_beta, k_beta, decayed_k_beta, new_values, k_cumdecay,
               q_decayed, k_decayed, chunk_decay, v_new, states)
    if e == FP32:  # the module's reshape(-1, dv) of the (b, s, H, dv) transposed fp32 output: a copy, after return
        tr.use(*locals_)
        out = tr.new(rows * dv, FP32, grad)
    else:  # .to(initial_dtype, memory_format=contiguous): a copy in the model's dtype, reshaped as a view
        out = tr.new(rows * dv, e, grad)
        tr.use(*locals_)
    tr.use(core)
    return out


def gated_norm(tr: Trace, x: Tensor, z: Tensor, rows, width, trainable: bool) -> Tensor:
    """Qwen3NextRMSNormGated(x, z): the fp32 RMSNorm of x over each value head (keeping x in fp32 and the rsqrt),
    back to the model's dtype, times the weight (keeping that when the weight trains), times silu(z) in fp32 (keeping
    z in fp32, the silu output and the weighted x); the product back to the model's dtype."""
    e = tr.e
    numel = rows * width
    x32 = to_fp32(tr, x)
    inv = tr.new(rows, FP32, x.grad)  # rsqrt(pow(2).mean + eps)
    tr.use(x32)
    if x.grad:
        tr.save(x32, "gated norm input (fp32)")
        tr.save(inv, "gated norm rsqrt (fp32)")
    normed = tr.new(numel, FP32, x.grad)
    tr.use(x32, inv)
    if e != FP32:
        normed = tr.tmp(numel, e, normed)
        normed.grad = x.grad
    if trainable:
        tr.save(normed, "gated norm normalized input")
    weighted = tr.new(numel, e, x.grad or trainable)
    tr.use(normed)
    z32 = z if e == FP32 else tr.new(numel, FP32, z.grad)
    tr.use(z)
    act = tr.new(numel, FP32, z.grad)
    tr.use(z32)
    if z.grad:
        tr.save(z32, "gated norm gate (SiLU input, fp32)")
    out = mul(tr, weighted, act, numel, FP32, ("gated norm weighted input", "gated norm SiLU output (fp32)"))
    if e != FP32:
        out = tr.tmp(numel, e, out)
        out.grad = weighted.grad or act.grad
    return out


def mixer(tr: Trace, shape, x: Tensor, trainable: bool, p, split: bool = False) -> Tensor:
    """Qwen3NextGatedDeltaNet.forward on the normalized input (t x h), through out_proj: in_proj_qkvz and in_proj_ba
    (one input kept), the depthwise causal convolution (causal_conv1d_fn: F.conv1d keeps its input, the torch.cat of
    q, k, v transposed; silu keeps the conv output, padded by conv_kernel - 1 on the sequence), beta = sigmoid(b)
    (keeps its output), g = -exp(A_log.float()) * softplus(a.float() + dt_bias) in fp32, the chunked delta rule
    (chunk_rule), the gated norm against z (z.reshape(-1, dv) of the split projection: a copy) and out_proj.
    split: Qwen 3.5's Qwen3_5GatedDeltaNet, whose four projections (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a) give
    the convolution in_proj_qkv's output itself (transposed, no cat) and z contiguous (its reshape a view)."""
    dims = shape.linear_attention
    t, e, b, s = tr.t, tr.e, tr.b, tr.s
    if shape.block_kind == LINEAR_BESIDE_FULL and (x.grad or trainable):
        # the full-attention blocks' rotary cos and sin (one pair for all blocks), counted with whichever layout is last
        tables = _rotary_tables(tr, shape, p.tables, split)
        tr.save(tables[0], "rotary cos table")
        tr.save(tables[1], "rotary sin table")
    heads, dk, dv = dims.value_heads, dims.key_head_dim, dims.value_head_dim
    kd, vd, cd = dims.key_heads * dk, heads * dv, conv_dim(dims)
    if split:
        mixed = tr.linear(x, t * cd, trainable, p.lora_of("in_proj_qkv"), "in_proj_qkv")
        z = tr.linear(x, t * vd, trainable, p.lora_of("in_proj_z"), "in_proj_z")
        ba = tr.linear(x, t * heads, trainable, p.lora_of("in_proj_b"), "in_proj_b")
        a_out = tr.linear(x, t * heads, trainable, p.lora_of("in_proj_a"), "in_proj_a")
        qkvz = None
    else:
        qkvz = tr.linear(x, t * (2 * kd + 2 * vd), trainable, p.lora_of("in_proj_qkvz"), "in_proj_qkvz")
        ba = a_out = tr.linear(x, t * 2 * heads, trainable, p.lora_of("in_proj_ba"), "in_proj_ba")
        mixed = tr.new(t * cd, e, qkvz.grad)  # torch.cat((query, key, value), dim=-1)
        tr.use(qkvz)
    conv = tr.new(b * cd * (s + dims.conv_kernel - 1), e, mixed.grad or trainable)
    tr.use(mixed)
    if conv.grad:  # ConvolutionBackward keeps its input whenever it is differentiated (measured: frozen weights too)
        tr.save(mixed, "conv1d input")
        tr.save(conv, "conv1d output, padded (SiLU input)")
    act = tr.new(t * cd, e, conv.grad)  # [:, :, :seq_len] then silu; q, k, v its views
    tr.use(conv)
    q, k, v = (Tensor(t * n, e, act.grad, act.storage) for n in (kd, kd, vd))
    beta = tr.new(t * heads, e, ba.grad)
    tr.use(ba)
    if beta.grad:
        tr.save(beta, "beta (sigmoid output)")
    a_log = tr.new(heads, FP32, trainable)  # A_log.float().exp()
    if trainable:
        tr.save(a_log, "exp(A_log) (fp32)")
    minus = tr.new(heads, FP32, trainable)
    tr.use(a_log)
    shifted = tr.new(t * heads, FP32, a_out.grad or trainable)  # a.float() + dt_bias
    tr.use(a_out)
    if shifted.grad:
        tr.save(shifted, "softplus input (fp32)")
    soft = tr.new(t * heads, FP32, shifted.grad)
    tr.use(shifted)
    g = mul(tr, minus, soft, t * heads, FP32, ("-exp(A_log) (fp32)", "softplus output (fp32)"))
    if p.cache:  # LinearAttentionLayer.update_conv_state: the cache's own conv state (b x conv_dim x kernel), a copy
        tr.cache_held(tr.new(b * cd * dims.conv_kernel, e))
        tr.use(mixed)
    core = chunk_rule(tr, dims, q, k, v, g, beta, cache=p.cache)
    tr.use(act, beta, g, ba, a_out)  # the module's locals (query, key, value views of the conv output, beta, g, b, a)
    if not split:
        z = tr.new(t * vd, e, qkvz.grad)  # z.reshape(-1, dv) of the split: a copy
        tr.use(qkvz)
    gated = gated_norm(tr, core, z, t * heads, dv, trainable)
    return tr.linear(gated, t * shape.hidden_size, trainable, p.lora_of("out_proj"), "out_proj")


def _rotary_tables(tr: Trace, shape, tables, per_sequence: bool) -> tuple:
    """The rotary cos and sin the blocks read: hf_activations' pair, or (per_sequence: Qwen 3.5's text rotary, whose
    interleaved multimodal sections expand the position ids to (3, b, s)) one (b, s, rotary_dim) pair for all blocks,
    made once per trace."""
    if not per_sequence:
        return tables
    made = tr.__dict__.setdefault("per_sequence_tables", {})
    key = id(tables[0].storage)
    if key not in made:
        numel = tr.b * tr.s * dims(shape)["rd"]
        made[key] = tuple(tr.new(numel, x.elem, shared=True, existing=x.storage.existing) for x in tables)
    return made[key]


def gated_attention(tr: Trace, shape, x: Tensor, trainable: bool, p, per_sequence_tables: bool = False) -> Tensor:
    """Qwen3NextAttention on the normalized input: q_proj gives each head its query and a gate (h -> 2 a d), chunked
    into two views; the gate's reshape copies it; q/k RMSNorm (1 + w) over each head (q_norm's pow keeps the whole
    q_proj output in fp32, its chunk a view of it); apply_rotary_pos_emb on the first rotary_dim of each head, whose
    torch.cat makes q and k contiguous (b, heads, s, d) (glm4_moe.py's attention); the attention kernel (SDPA's output
    then copied by transpose(1, 2).contiguous()); times sigmoid(gate) (keeping both); o_proj."""
    t, dm = tr.t, dims(shape)
    a, kv, d, rd = dm["a"], dm["k"], dm["d"], dm["rd"]
    qg = tr.linear(x, t * 2 * a * d, trainable, p.lora_of("q_proj"), "q_proj")
    gate = tr.new(t * a * d, tr.e, qg.grad)  # gate.reshape(*input_shape, -1): a copy
    tr.use(qg)
    q = Tensor(t * a * d, qg.elem, qg.grad, qg.storage)
    k = tr.linear(x, t * kv * d, trainable, p.lora_of("k_proj"), "k_proj")
    v = tr.linear(x, t * kv * d, trainable, p.lora_of("v_proj"), "v_proj")
    q = tr.rms_norm(q, trainable, "q_norm", rows=t * a, plus_one=d)
    k = tr.rms_norm(k, trainable, "k_norm", rows=t * kv, plus_one=d)
    tables = _rotary_tables(tr, shape, p.tables, per_sequence_tables)
    q, k = partial_rotary(tr, q, tables, t * a * rd), partial_rotary(tr, k, tables, t * kv * rd)
    if p.cache:
        k, v = kv_cache(tr, k, v)
    ctx = tr.attention(q, k, v, heads=a, head_dim=d, kind=p.kind, dropout=p.dropout, softmax_fp32=True,
                       name="attention", kv_contiguous=True)
    if p.kind == "flash":
        ctx = merged_copy(tr, ctx)
    sig = tr.new(t * a * d, tr.e, gate.grad)
    tr.use(gate)
    if gate.grad:
        tr.save(sig, "attention gate sigmoid output")
    gated = mul(tr, ctx, sig, t * a * d, tr.e, ("attention output (gated)", "attention gate sigmoid output"))
    return tr.linear(gated, t * dm["h"], trainable, p.lora_of("o_proj"), "o_proj")


def block(tr: Trace, shape, x: Tensor, trainable: bool, p, split: bool = False) -> Tensor:
    """Qwen3NextDecoderLayer: input_layernorm (1 + w), the gated DeltaNet or the gated attention, residual;
    post_attention_layernorm, the sparse MoE block (_moe.trace: the shared expert and its sigmoid gate) or the dense
    SwiGLU MLP, residual. split: Qwen 3.5's decoder layers (Qwen3_5GatedDeltaNet's four input projections)."""
    h = shape.hidden_size
    normed = tr.rms_norm(x, trainable, "input_layernorm", plus_one=h)
    if is_linear(shape):
        mixed = mixer(tr, shape, normed, trainable, p, split=split)
    else:
        mixed = gated_attention(tr, shape, normed, trainable, p, per_sequence_tables=split)
    r1 = tr.add(x, mixed)
    normed = tr.rms_norm(r1, trainable, "post_attention_layernorm", plus_one=h)
    out = _decoder.mlp(tr, shape, normed, trainable, p)
    if shape.n_experts and not shape.shared_expert_intermediate_size:
        out = tr.add(out, _empty_shared_expert(tr, shape, normed, trainable, p))
    return tr.add(r1, out)


def _empty_shared_expert(tr: Trace, shape, x: Tensor, trainable: bool, p) -> Tensor:
    """Qwen3NextSparseMoeBlock builds its shared expert at any width: at shared_expert_intermediate_size 0 its
    down_proj returns zeros (t x h), which sigmoid(shared_expert_gate(x)) * shared keeps with the t x 1 sigmoid
    output, as _moe.trace's shared expert gate does (found by a held-out config with no shared width)."""
    t, e = tr.t, tr.e
    shared = tr.new(t * shape.hidden_size, e, x.grad or trainable)  # the zero-width MLP's output
    gate_logit = tr.linear(x, t, trainable, p.lora_of("shared_expert_gate"), "shared_expert_gate")
    sig = tr.new(t, e, gate_logit.grad)
    tr.use(gate_logit)
    if gate_logit.grad:
        tr.save(sig, "shared expert gate sigmoid output")
    return mul(tr, sig, shared, t * shape.hidden_size, e, ("shared expert gate sigmoid output",
                                                             "shared expert output (zeros, width 0)"))


# The record fields of a Qwen 3.5 type (split input projections) traced under the PyTorch path
TRACED_SPLIT = dict(trace_block=partial(block, split=True), final_norm="rms_plus_one", trace_refusal=trace_refusal,
                    trace_shape=trace_shape, mixer_kernels=KERNELS,
                    checkpointed_peak_refusal=QWEN3_5_CHECKPOINTED_PEAK_REFUSAL)
