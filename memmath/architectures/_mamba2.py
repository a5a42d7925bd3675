"""The Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs", the state space duality layer) as transformers 5.24
stores it in its hybrid models (modeling_granitemoehybrid.py GraniteMoeHybridMambaLayer, modeling_nemotron_h.py
NemotronHMamba2Mixer, modeling_falcon_h1.py FalconH1Mixer): its parameter tensors and its fixed-size cache.

A Mamba-2 mixer of `heads` heads of `head_dim` channels (its inner width heads x head_dim) and `n_groups` groups of B
and C of `state_size` values each holds:
- in_proj (h -> 2 inner + 2 n_groups state_size + heads): the gate z, the convolution's input (x, B and C) and the
  time step dt of each head, with a bias where the config asks (mamba_proj_bias, use_bias);
- conv1d, a depthwise causal convolution over conv_dim = inner + 2 n_groups state_size channels (conv_dim x 1 x
  conv_kernel, and conv_dim biases where the config asks: mamba_conv_bias, use_conv_bias);
- dt_bias, A_log and D, one value a head;
- a gated RMSNorm over the inner width (norm.weight; normalized in n_groups groups, which changes no tensor), which
  Falcon-H1 holds only where mamba_rms_norm says;
- out_proj (inner -> h, its bias as in_proj's; Falcon-H1's where projectors_bias says).

Its cache (transformers' LinearAttentionLayer in a DynamicCache) is a conv state of conv_dim x conv_kernel values in
the model's dtype and an fp32 SSM state of heads x head_dim x state_size values, the same size at any context
(memmath/states.py, mamba2_state_bytes).

Saved activations: the mixer runs mamba-ssm's and causal-conv1d's kernels on CUDA where they are installed and
transformers' PyTorch fallback (torch_forward's path: causal_conv1d_fn, mamba2_chunk_scan) elsewhere, the CPU always;
the two save different tensors. `mixer` below replays the PyTorch path (Run.mixer_kernels='torch'), measured to the
byte on the CPU for Granite 4.0, Nemotron-H and Falcon-H1 (tests/test_families_mamba2_trace.py); a record that uses
it names the kernels (Architecture.mixer_kernels), and a run under them keeps the textbook model and no verdict. The
textbook estimate leaves the mixer's own tensors out: two held-out CPU
steps of tiny Granite 4.0, Nemotron-H and Falcon-H1 models (batch 2 x 64 tokens, AdamW, fp32 full and bf16 LoRA)
saved 1.5 to 3.2 times its bytes with a 64-token chunk size, and 12 to 14 times with Granite's 256 (the fallback pads
each sequence to whole chunks).
"""

from __future__ import annotations


from ..arrays import is_ndarray, pick
from ..recurrent import RECURRENT_STATE_FORMAT, Mamba2, values_bytes
from ..trace import Tensor, Trace
from . import _decoder
from ._parts import ParamTensor, linear
from ._steps import Pass, kv_cache, to_fp32
from .record import Architecture
from ..values import frozen

LINEAR = "linear_attention"  # ModelShape.block_kind of a Mamba-2 block: transformers' layer_types name for it
KERNELS = "mamba-ssm's and causal-conv1d's kernels"  # what transformers calls for the mixer where installed
# block_kind of an attention block that rotates q and k (Granite 4.0 with position_embedding_type rope)
ROTARY = "rotary"


@frozen
class Mamba2Mixer(Mamba2):
    """A Mamba-2 mixer's widths (memmath.states.Mamba2, whose cache it has) and its biases: conv_bias on the
    convolution, proj_bias on in_proj, out_bias on out_proj (Falcon-H1's projectors_bias; proj_bias elsewhere), and
    gated_norm: whether it holds the gated RMSNorm (Falcon-H1's mamba_rms_norm; always elsewhere)."""

    conv_bias: bool = True
    proj_bias: bool = False
    out_bias: bool | None = None  # None: proj_bias
    gated_norm: bool = True
    chunk_size: int = 256  # the PyTorch path's chunk (mamba_chunk_size): each sequence is padded to whole chunks
    # Falcon-H1's mamba_norm_before_gate: its gated norm normalizes, then multiplies by silu(gate) (False: gate first)
    norm_before_gate: bool = False

    def __post_init__(self):
        super().__post_init__()
        if self.out_bias is None:
            object.__setattr__(self, "out_bias", self.proj_bias)
        for name in ("conv_bias", "proj_bias", "out_bias", "gated_norm", "norm_before_gate"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Mamba-2 {name} must be true or false; got {getattr(self, name)!r:.50}")
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"Mamba-2 chunk_size must be a positive whole number; got {self.chunk_size!r:.50}")

    @property
    def inner(self) -> int:
        """The mixer's inner width: heads x head_dim."""
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """The convolution's channels: x, B and C (inner + 2 n_groups state_size)."""
        return self.inner + 2 * self.n_groups * self.state_size


def tensors(prefix: str, hidden_size: int, dims: Mamba2Mixer) -> list:
    """The mixer's parameters in parameters() order: its own (dt_bias, A_log, D) before its submodules (conv1d,
    in_proj, norm, out_proj), as GraniteMoeHybridMambaLayer and NemotronHMamba2Mixer register them."""
    h, heads, inner = hidden_size, dims.heads, dims.inner
    conv = [ParamTensor(f"{prefix}.conv1d.weight", "attention", (dims.conv_dim, 1, dims.conv_kernel))]
    if dims.conv_bias:
        conv.append(ParamTensor(f"{prefix}.conv1d.bias", "attention", (dims.conv_dim,)))
    return ([ParamTensor(f"{prefix}.{name}", "attention", (heads,)) for name in ("dt_bias", "A_log", "D")] + conv
            + linear(f"{prefix}.in_proj", "attention", h, inner + dims.conv_dim + heads, dims.proj_bias)
            + ([ParamTensor(f"{prefix}.norm.weight", "norms", (inner,))] if dims.gated_norm else [])
            + linear(f"{prefix}.out_proj", "attention", inner, h, dims.out_bias))


def mixer_state_bytes(dims: Mamba2Mixer, batch_size, dtype):
    """One mixer's cache: its conv state, batch x conv_dim x conv_kernel values in dtype (the model's: the cache
    allocates it like the convolution's input, and LinearAttentionLayer pads or cuts it to conv_kernel columns), and
    its SSM state, batch x heads x head_dim x state_size values in fp32 (transformers' PyTorch torch_forward computes
    and returns it in fp32)."""
    conv = batch_size * dims.conv_dim * dims.conv_kernel
    return values_bytes(conv, dtype) + values_bytes(batch_size * dims.heads * dims.head_dim * dims.state_size,
                                                    RECURRENT_STATE_FORMAT)


def kv_cache_values(shape, *, context_len, batch_size, after_prefill):
    """Keys and values of every attention block (block_kind "" or ROTARY: every token), in the cache's format; nothing
    for a block of another kind (a Mamba-2 block's states are state_bytes'; Nemotron-H's MLP and MoE blocks hold
    none)."""
    blocks = sum(len(b) for layout, b in shape.layouts() if layout.block_kind in ("", ROTARY))
    return blocks * 2 * shape.n_kv_heads * shape.head_dim * context_len * batch_size


def state_bytes(shape, *, batch_size, dtype):
    """Each Mamba-2 block's conv state in dtype (the model's) and SSM state in fp32 (mixer_state_bytes)."""
    blocks = sum(len(b) for layout, b in shape.layouts() if layout.block_kind == LINEAR)
    return blocks * mixer_state_bytes(shape.linear_attention, batch_size, dtype)


def all_linear_refusal(owner: str) -> str:
    """Why LoRA 'all' cannot be counted in a Mamba-2 block: peft's all-linear adapts in_proj and out_proj, which
    memmath's target names do not cover."""
    return (f"peft's all-linear also adapts each Mamba-2 block's in_proj and out_proj ({owner}), which memmath's "
            "target names do not cover yet; name the targets instead")


@frozen
class BlockOrderArchitecture(Architecture):
    """A record whose blocks register their modules in another order than LlamaDecoderLayer (Granite 4.0's MLP
    before its mixer, Nemotron-H's one mixer a block): lora_order lists a block's adapted modules in parameters()
    order."""

    def adapter_order(self, shape) -> tuple:
        return self.lora_order


# ---- the forward pass: transformers 5.24's PyTorch path (Run.mixer_kernels='torch') --------------------------------
def _segment_sum(tr: Trace, x: Tensor, rows, width: int, grad: bool) -> Tensor:
    """segment_sum (modeling_granitemoehybrid.py) over `rows` vectors of `width` values: x[..., None].expand(...)
    (a view), masked_fill(~tril(ones, -1), 0), cumsum(dim=-2), masked_fill(~tril(ones, 0), -inf); each masked_fill
    keeps its width x width bool mask, which the forward makes anew (tril of a ones tensor, then ~)."""
    out = x
    for step in range(2):
        ones = tr.new(width * width, 1)
        mask = tr.tmp(width * width, 1, ones)  # tril
        inverted = tr.new(width * width, 1)  # ~mask
        tr.use(mask)
        if grad:
            tr.save(inverted, "Mamba-2 segment-sum mask (bool)")
        filled = tr.new(rows * width * width, 4, grad)  # masked_fill
        tr.use(out, inverted)
        out = filled
        if step == 0:
            out = tr.tmp(rows * width * width, 4, out)  # cumsum(dim=-2)
            out.grad = grad
    return out


def _chunk_copy(tr: Trace, x: Tensor, numel) -> Tensor:
    """reshape_into_chunks: F.pad by pad_size along the sequence (a new tensor even for a pad of 0), then a view."""
    out = tr.new(numel, 4, x.grad)
    tr.use(x)
    return out


def _bmm_operand(tr: Trace, numel, source: Tensor) -> Tensor:
    """An einsum operand permuted into bmm's (batch, rows, columns) layout: a contiguous fp32 copy."""
    out = tr.new(numel, 4, source.grad)
    tr.use(source)
    return out


def _operand(tr: Trace, source: Tensor, numel, view, shared: Tensor | None = None) -> Tensor:
    """An einsum operand that bmm reads as `source` itself where `view` (a sequence of one chunk), else a permuted fp32
    copy of numel values. shared: the operand an earlier einsum read from the same source, which is `source` itself
    where `view` (one storage, saved once). For a sweep whose points differ in `view`: a copy whose bytes are the
    source's where it is read as it is (0 where `shared` already stands for it)."""
    if not is_ndarray(view):
        return (shared if shared is not None else source) if view else _bmm_operand(tr, numel, source)
    out = _bmm_operand(tr, numel, source)
    out.storage.nbytes = pick(view, 0 if shared is not None else source.storage.nbytes, out.storage.nbytes)
    return out


def chunk_scan(tr: Trace, dims: Mamba2Mixer, hs: Tensor, dt: Tensor, B: Tensor, C: Tensor, trainable: bool) -> Tensor:
    """mamba2_chunk_scan (modeling_granitemoehybrid.py; Nemotron-H's and Falcon-H1's are the same function) on the
    convolution's x (t x inner), B and C (t x groups x state each) and dt (t x heads, a view of in_proj's output),
    with dt_bias, softplus and clamp to time_step_limit. Every step computes in fp32 (x, B, C and dt cast first);
    each sequence is padded to whole chunks of chunk_size (l) positions, c of them; autograd keeps:
    dt + dt_bias for softplus, softplus's output for clamp, dt in fp32 for x * dt (which keeps x in fp32) and again
    for A * dt (which keeps A = -exp(A_log), whose exp keeps its output) when A_log trains; the padded x for D's skip
    term when D trains; the chunked B for B * decay; exp(segment_sum(A)) = L (b x heads x c x l x l) and the scores
    G = C B^T for G * L; each einsum's bmm operands as permuted fp32 copies (C and B for G, G * L and x for Y_diag,
    x and B * decay for the states, the chunk decay and the states for the inter-chunk recurrence, C and the states
    for C x states), but x and the states themselves where a sequence is one chunk; the decays exp(A_cumsum[-1] -
    A_cumsum) and exp(A_cumsum); C x states for Y_off; the two
    segment sums' masks. Returns the output (b x padded s x inner fp32; the caller reads its first s positions, a
    view that keeps the whole)."""
    b, s, e = tr.b, tr.s, tr.e
    heads, inner, n, l = dims.heads, dims.inner, dims.state_size, dims.chunk_size
    chunks = -(-s // l)
    sp = chunks * l  # the padded length
    g = dt.grad or trainable
    dt = tr.new(tr.t * heads, e, g)  # dt + dt_bias
    tr.use(dt)
    soft = tr.new(tr.t * heads, e, g)  # F.softplus
    tr.use(dt)
    if g:
        tr.save(dt, "Mamba-2 softplus input (dt + dt_bias)")
    clamped = tr.new(tr.t * heads, e, g)  # torch.clamp(dt, *dt_limit)
    tr.use(soft)
    if g:
        tr.save(soft, "Mamba-2 clamp input (softplus output)")
    x32 = to_fp32(tr, hs)
    wide = []
    for part in (B, C):  # .float().repeat_interleave(heads // groups, dim=2)
        part32 = to_fp32(tr, part)
        wide.append(tr.new(tr.t * heads * n, 4, part.grad))
        tr.use(part32)
    B, C = wide
    padded = _chunk_copy(tr, x32, b * sp * inner)  # pad_tensor_by_size(hidden_states, pad_size)
    if trainable:
        tr.save(padded, "Mamba-2 padded x (D's skip term)")
    d_residual = tr.new(b * sp * inner, 4, padded.grad or trainable)  # D[..., None] * padded
    tr.use(padded)
    dt32 = to_fp32(tr, clamped)
    x_dt = tr.new(tr.t * inner, 4, g or x32.grad)  # hidden_states * dt[..., None].float()
    tr.use(x32, dt32)
    if g:
        tr.save(x32, "Mamba-2 x in fp32 (x * dt)")
    if x32.grad:
        tr.save(dt32, "Mamba-2 dt in fp32 (x * dt)")
    if trainable:  # A = -torch.exp(self.A_log.float()) in the mixer's forward
        tr.save(tr.new(heads, 4), "Mamba-2 exp(A_log)")
    a = tr.new(heads, 4, trainable)  # -exp(.)
    dt32b = to_fp32(tr, clamped) if e != 4 else dt32
    a_dt = tr.new(tr.t * heads, 4, g)  # A.to(hidden_states.dtype) * dt.float()
    tr.use(a, dt32b)
    if g:
        tr.save(a, "Mamba-2 A = -exp(A_log)")
    if trainable:
        tr.save(dt32b, "Mamba-2 dt in fp32 (A * dt)")
    x_c = _chunk_copy(tr, x_dt, b * sp * inner)
    a_c = _chunk_copy(tr, a_dt, b * sp * heads)
    b_c = _chunk_copy(tr, B, b * sp * heads * n)
    c_c = _chunk_copy(tr, C, b * sp * heads * n)
    cumsum = tr.new(b * sp * heads, 4, g)  # A_cumsum = torch.cumsum(A.permute(0, 3, 1, 2), dim=-1)
    tr.use(a_c)
    rows = b * heads * chunks  # one l x l segment sum per batch, head and chunk
    L = tr.new(rows * l * l, 4, g)  # torch.exp(segment_sum(A))
    tr.use(_segment_sum(tr, a_c, rows, l, g))
    if g:
        tr.save(L, "Mamba-2 L = exp(segment sum of A) (b x heads x chunks x l x l)")
    # G = einsum("bclhn,bcshn->bclsh", C, B): bmm of C (b c h, l, n) and B^T (b c h, n, s), permuted copies
    c1, b1 = _bmm_operand(tr, b * sp * heads * n, c_c), _bmm_operand(tr, b * sp * heads * n, b_c)
    if g:
        tr.save(c1, "Mamba-2 C (bmm copy, C B^T)")
        tr.save(b1, "Mamba-2 B (bmm copy, C B^T)")
    G = tr.new(rows * l * l, 4, g)
    tr.use(c1, b1)
    M = tr.new(rows * l * l, 4, g)  # G * L.permute(0, 2, 3, 4, 1)
    tr.use(G, L)
    if g:
        tr.save(G, "Mamba-2 G = C B^T (G * L)")
    # backward_working_set's moment, G * L's backward: what is saved so far stays; autograd has by then run every node
    # made after this one and freed what they saved, and holds the gradients of the nodes before it that are due:
    # x * dt chunked (b x padded s x inner), chunked B and C (b x padded s x heads x state each), A_cumsum (b x heads x
    # padded s) and, at D's skip term, the output's (b x padded s x inner), all fp32, beside G * L's gradient and the
    # two it makes (l x l each)
    tr.__dict__["scan_backward"] = (frozenset(tr.saved), 3 * rows * l * l * 4 + 4 * b * sp * (
        2 * inner + 2 * heads * n + heads))
    # Y_diag = einsum("bclsh,bcshp->bclhp", M, hidden_states)
    # x * dt keeps the transposed convolution output's layout (b, heads, head_dim, positions): with one chunk its
    # batch and head dimensions merge, and bmm reads it as it is (both einsums keep x_c itself); with more, a copy each
    one_chunk = chunks == 1
    m1 = _bmm_operand(tr, rows * l * l, M)
    x1 = _operand(tr, x_c, b * sp * inner, one_chunk)
    if g:
        tr.save(m1, "Mamba-2 G * L (bmm copy, Y_diag)")
        tr.save(x1, "Mamba-2 x * dt (chunked, or its bmm copy for Y_diag)")
    y_diag = tr.new(b * sp * inner, 4, g)
    tr.use(m1, x1)
    shifted = tr.tmp(b * sp * heads, 4, cumsum)  # A_cumsum[:, :, :, -1:] - A_cumsum
    decay = tr.new(b * sp * heads, 4, g)  # torch.exp
    tr.use(shifted)
    b_decay = tr.new(b * sp * heads * n, 4, g)  # B * decay_states.permute(0, -2, -1, 1)[..., None]
    tr.use(b_c, decay)
    if g:
        tr.save(decay, "Mamba-2 decay states exp(A_cumsum[-1] - A_cumsum)")
        tr.save(b_c, "Mamba-2 chunked B in fp32 (B * decay)")
    # states = einsum("bclhn,bclhp->bchpn", B_decay, hidden_states)
    x2 = _operand(tr, x_c, b * sp * inner, one_chunk, shared=x1)
    bd = _bmm_operand(tr, b * sp * heads * n, b_decay)
    if g:
        tr.save(x2, "Mamba-2 x * dt (bmm copy, chunk states)")
        tr.save(bd, "Mamba-2 B * decay (bmm copy, chunk states)")
    state = b * heads * dims.head_dim * n  # one chunk's states, every batch and head
    states = tr.new(chunks * state, 4, g)
    tr.use(x2, bd)
    previous = tr.new(state, 4)  # torch.zeros_like(states[:, :1])
    stacked = tr.new((chunks + 1) * state, 4, g)  # torch.cat([previous_states, states], dim=1)
    tr.use(previous, states)
    edge = tr.new(b * heads * (chunks + 1), 4, g)  # F.pad(A_cumsum[:, :, :, -1], (1, 0))
    tr.use(cumsum)
    chunk_decay = tr.new(b * heads * (chunks + 1) ** 2, 4, g)  # torch.exp(segment_sum(.))
    tr.use(_segment_sum(tr, edge, b * heads, chunks + 1, g))
    if g:  # the bmm reads decay_chunk through a transposed view: exp's own output, no copy
        tr.save(chunk_decay, "Mamba-2 chunk decay exp(segment sum) (b x heads x (chunks + 1)^2)")
    # new_states = einsum("bzch,bzhpn->bchpn", decay_chunk, states)
    s1 = _bmm_operand(tr, (chunks + 1) * state, stacked)
    if g:
        tr.save(s1, "Mamba-2 chunk states with the zero initial state (bmm copy)")
    new_states = tr.new((chunks + 1) * state, 4, g)
    tr.use(chunk_decay, s1)
    out_decay = tr.new(b * sp * heads, 4, g)  # state_decay_out = torch.exp(A_cumsum)
    tr.use(cumsum)
    if g:
        tr.save(out_decay, "Mamba-2 state decay exp(A_cumsum)")
    # C_times_states = einsum("bclhn,bchpn->bclhp", C, states[:, :-1])
    # states = new_states[:, :-1], a view of the bmm output (b, heads, chunks + 1, ...): with one chunk its batch and
    # head dimensions merge and bmm reads it as it is (keeping all chunks + 1 states); with more, a copy of the chunks
    c2 = _bmm_operand(tr, b * sp * heads * n, c_c)
    s2 = _operand(tr, new_states, chunks * state, one_chunk)
    if g:
        tr.save(c2, "Mamba-2 C (bmm copy, C x states)")
        tr.save(s2, "Mamba-2 chunk start states (or their bmm copy, C x states)")
    c_states = tr.new(b * sp * inner, 4, g)
    tr.use(c2, s2)
    y_off = tr.new(b * sp * inner, 4, g)  # C_times_states * state_decay_out.permute(0, 2, 3, 1)[..., None]
    tr.use(c_states, out_decay)
    if g:
        tr.save(c_states, "Mamba-2 C x states (Y_off)")
    total = tr.tmp(b * sp * inner, 4, y_diag, y_off)  # Y_diag + Y_off
    total = tr.tmp(b * sp * inner, 4, total)  # .contiguous(): the sum keeps the einsums' permuted layout
    out = tr.new(b * sp * inner, 4, g or d_residual.grad)  # output + D_residual
    tr.use(total, d_residual)
    return out


def gated_norm(tr: Trace, y: Tensor, gate: Tensor, trainable: bool, groups: int) -> Tensor:
    """GraniteMoeHybridRMSNormGated(y, gate) (Nemotron-H's and Falcon-H1's alike) on the fp32 scan output y: y *
    silu(gate.float()) keeps y and the SiLU output (SiLU keeps gate in fp32: a copy of a 16-bit in_proj view, else
    the whole in_proj output), pow keeps the product, rsqrt its t x groups output, weight * normed (fp32: y's dtype)
    keeps normed when the weight trains. Returns the fp32 output."""
    numel, grad = y.numel, y.grad or gate.grad
    gate32 = to_fp32(tr, gate)
    act = tr.new(numel, 4, gate.grad)  # F.silu
    tr.use(gate32)
    if gate.grad:
        tr.save(gate32, "Mamba-2 gate in fp32 (SiLU input)")
    prod = tr.new(numel, 4, grad)  # hidden_states * silu(gate)
    tr.use(y, act)
    if act.grad:
        tr.save(y, "Mamba-2 scan output (gated by SiLU)")
    if y.grad:
        tr.save(act, "Mamba-2 gate SiLU output")
    square = tr.tmp(numel, 4, prod)  # .pow(2)
    rsqrt = tr.new(tr.t * groups, 4, grad)  # torch.rsqrt(mean + eps)
    tr.use(square)
    normed = tr.new(numel, 4, grad)  # hidden_states_group * rsqrt
    tr.use(prod, rsqrt)
    if grad:
        tr.save(prod, "Mamba-2 gated norm input (gated scan output)")
        tr.save(rsqrt, "Mamba-2 gated norm rsqrt")
    if trainable:
        tr.save(normed, "Mamba-2 gated norm normalized input (fp32)")
    out = tr.new(numel, 4, grad or trainable)  # self.weight * hidden_states.to(input_dtype), fp32
    tr.use(normed)
    return out


def _cache_states(tr: Trace, dims: Mamba2Mixer):
    """The training DynamicCache's states of one Mamba-2 block (LinearAttentionLayer, cache_utils.py): the conv state
    (b x conv_dim x conv_kernel in the model's dtype, update_conv_state copies the input's last positions into it)
    and the fp32 recurrent state (b x heads x head_dim x state, update_recurrent_state copies the scan's final state
    into it), held by the cache to the forward's end and saved by nothing (the scan's input and output are the ones
    saved either way)."""
    for numel, elem in ((tr.b * dims.conv_dim * dims.conv_kernel, tr.e),
                        (tr.b * dims.heads * dims.head_dim * dims.state_size, 4)):
        tr.cache_held(tr.new(numel, elem))


def norm_then_gate(tr: Trace, y: Tensor, gate: Tensor, trainable: bool, groups: int) -> Tensor:
    """FalconH1RMSNormGated(y, gate) with norm_before_gate: pow keeps y (fp32), rsqrt its t x groups output, weight *
    normed keeps normed where the weight trains, then * silu(gate.float()) keeps that fp32 product and the SiLU output
    (SiLU keeps gate in fp32: a copy of a 16-bit in_proj view, else the in_proj output). Returns the fp32 output."""
    numel, grad = y.numel, y.grad
    square = tr.tmp(numel, 4, y)
    rsqrt = tr.new(tr.t * groups, 4, grad)
    tr.use(square)
    normed = tr.new(numel, 4, grad)
    tr.use(y, rsqrt)
    if grad:
        tr.save(y, "Mamba-2 gated norm input (scan output)")
        tr.save(rsqrt, "Mamba-2 gated norm rsqrt")
    if trainable:
        tr.save(normed, "Mamba-2 gated norm normalized input (fp32)")
    weighted = tr.new(numel, 4, grad or trainable)
    tr.use(normed)
    return silu_gate(tr, weighted, gate)


def silu_gate(tr: Trace, y: Tensor, gate: Tensor, upcast: bool = True) -> Tensor:
    """y * silu(gate), y fp32: with the gate cast to fp32 first (upcast: Falcon-H1's gated norm) or not (its mixer
    without one: the product is fp32 all the same). SiLU keeps its input; the product keeps both factors."""
    gate_in = to_fp32(tr, gate) if upcast else gate
    act = tr.new(y.numel, gate_in.elem, gate.grad)
    tr.use(gate_in)
    if gate.grad:
        tr.save(gate_in, "Mamba-2 gate (SiLU input)")
    out = tr.new(y.numel, 4, y.grad or gate.grad)
    tr.use(y, act)
    if act.grad:
        tr.save(y, "Mamba-2 gated output's factor (y)")
    if y.grad:
        tr.save(act, "Mamba-2 gate SiLU output")
    return out


def mixer(tr: Trace, dims: Mamba2Mixer, x: Tensor, trainable: bool, lora, hidden_size: int,
          cache: bool = False, mup: bool = False) -> Tensor:
    """GraniteMoeHybridMambaLayer.forward on the normalized input x (t x h) down transformers 5.24's PyTorch path,
    without a cache or a padding mask: in_proj (x, then zxbcdt: the gate z, x B C, dt, views of one t x (2 inner +
    2 groups state + heads) output); the depthwise conv1d over the x B C view transposed, which keeps that view's
    whole storage (even with the weight frozen), with conv_kernel - 1 positions of padding on each side (its output b x
    conv_dim x (s + conv_kernel - 1), cut to s, a view that SiLU keeps whole); SiLU's contiguous output, whose x, B
    and C views enter chunk_scan; the gated RMSNorm; its fp32 output cast to the model's dtype for out_proj (a copy
    in 16 bits). lora(module) -> (rank, bytes) where LoRA adapts in_proj or out_proj. cache: the training DynamicCache
    (config use_cache), which saves the same tensors and holds the block's states (_cache_states)."""
    t, b, s, e = tr.t, tr.b, tr.s, tr.e
    inner, conv = dims.inner, dims.conv_dim
    width = inner + conv + dims.heads
    if mup:  # Falcon-H1: hidden_states * ssm_in_multiplier, a new tensor in_proj reads
        scaled = tr.new(x.numel, x.elem, x.grad)
        tr.use(x)
        x = scaled
    proj = tr.linear(x, t * width, trainable, lora("in_proj"), "in_proj")
    if mup:  # projected_states * self.mup_vector (a buffer): a new tensor, which keeps nothing
        scaled = tr.new(t * width, e, proj.grad)
        tr.use(proj)
        proj = scaled

    def view(numel):
        return Tensor(numel, proj.elem, proj.grad, proj.storage)

    gate, xbc, dt = view(t * inner), view(t * conv), view(t * dims.heads)
    if cache:
        _cache_states(tr, dims)
    grad = xbc.grad or trainable
    # convolution_backward's one formula for input, weight and bias keeps the input even for a frozen weight
    if grad:
        tr.save(xbc, "Mamba-2 conv1d input (the in_proj output)")
    conv_out = tr.new(b * conv * (s + dims.conv_kernel - 1), e, grad)  # F.conv1d(..., padding=conv_kernel - 1)
    tr.use(xbc)
    if grad:
        tr.save(conv_out, "Mamba-2 conv1d output (SiLU input, uncut)")
    act = tr.new(t * conv, e, grad)  # ACT2FN["silu"] on [:, :, :seq_len]
    tr.use(conv_out)
    n = dims.n_groups * dims.state_size
    hs, B, C = (Tensor(numel, e, grad, act.storage) for numel in (t * inner, t * n, t * n))
    y = chunk_scan(tr, dims, hs, dt, B, C, trainable)
    y = Tensor(t * inner, 4, y.grad, y.storage)  # output[:, :seq_len].reshape(b, s, -1): a view
    if not dims.gated_norm:  # Falcon-H1 without mamba_rms_norm: scan_output * silu(gate)
        normed = silu_gate(tr, y, gate, upcast=False)
    elif dims.norm_before_gate:
        normed = norm_then_gate(tr, y, gate, trainable, dims.n_groups)
    else:
        normed = gated_norm(tr, y, gate, trainable, dims.n_groups)
    if e != 4:
        normed = tr.tmp(t * inner, e, normed)  # scan_output.to(dtype)
        normed.grad = y.grad or trainable
    return tr.linear(normed, t * hidden_size, trainable, lora("out_proj"), "out_proj")


def attention(tr: Trace, m, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """The hybrids' attention block mixer (GraniteMoeHybridAttention, NemotronHAttention): LLaMA's q, k, v, the
    DynamicCache, the kernel and o_proj (_decoder.qkv), with q and k rotated only in a block of kind ROTARY (Granite
    4.0's "rope"; Nemotron-H has no positions); the softmax scale (attention_multiplier, head_dim^-0.5) is no memory."""
    q, k, v = _decoder.qkv(tr, m, x, trainable, p)
    if m.block_kind == ROTARY:
        q, k = tr.rotary(q, p.tables), tr.rotary(k, p.tables)
    if p.cache:
        k, v = kv_cache(tr, k, v)
    ctx = tr.attention(q, k, v, heads=m.n_heads, head_dim=m.head_dim, kind=p.kind, dropout=p.dropout,
                       softmax_fp32=True, name="attention", kv_contiguous=p.cache)
    return tr.linear(ctx, tr.t * m.hidden_size, trainable, p.lora_of("o_proj"), "o_proj")


def trace_refusal(shape) -> str:
    """What the trace refuses in a model with Mamba-2 blocks: a training forward transformers 5.24 cannot run (with
    config use_cache and no attention block, the model's forward asks its DynamicCache for get_seq_length(), which
    raises ValueError when every cache layer is a linear-attention one: cache_utils.py, DynamicCache.get_seq_length),
    and rotary attention blocks (Granite 4.0's position_embedding_type "rope") before a last Mamba-2 block."""
    # (asked of the whole model, whose block_layouts name its Mamba-2 blocks, and of each layout alone, which has none)
    if not shape.block_layouts:
        return ""
    kinds = {i: layout.block_kind for layout, blocks in shape.layouts() for i in blocks}
    if shape.use_cache and all(kind == LINEAR for kind in kinds.values()):
        return ("traces no model whose every block is a Mamba-2 block with use_cache true: transformers 5.24's "
                "forward raises ValueError there (DynamicCache.get_seq_length finds no attention layer); set "
                "use_cache false")
    if ROTARY in kinds.values() and kinds[shape.n_layers - 1] != ROTARY:
        # hf_activations counts the tables shared by every block from the last block's layout
        return ("traces position_embedding_type 'rope' only where the last block is an attention block: the rotary "
                "cos and sin tables the attention blocks keep are not counted behind a last Mamba-2 block")
    return ""


# what a block holds before its Mamba-2 mixer's chunk scan (its gradients made later): the block's input norm (Granite's
# input_layernorm, Nemotron-H's norm) and the mixer's tensors up to the scan (dt_bias, A_log, D, conv1d, in_proj)
_NORMS_BEFORE_SCAN = ("input_layernorm.", "norm.")
_BEFORE_SCAN = (".in_proj.", ".conv1d.", ".dt_bias", ".A_log", ".D")


def backward_working_set(shape, method, recipe, b, s) -> int:
    """The most a Mamba-2 block (a layout shape) holds in its backward beyond its saved tensors, for peak.py: the moment
    G * L's backward (mamba2_chunk_scan) makes the l x l gradients of G and L while G * L's own is alive (measured on
    the CPU: the step's peak is there once the chunk is long). Replays the block (its record's trace_block) to find what
    the nodes made after G * L saved, which autograd has freed by then; adds the gradients due (chunk_scan's
    scan_backward), the gate's (t x inner, the model's dtype, waiting at in_proj's split), the one arriving at the
    block (t x h), and the block's parameter gradients made by then: everything but the input norm's and the mixer's
    up to the scan (full training), or its adapters (LoRA: none of peft's targets sits before the scan). 0 for a block
    of another kind (its trace runs no chunk scan)."""
    if shape.linear_attention is None or shape.block_kind not in (LINEAR, ""):
        return 0
    e = recipe.weight_bits // 8
    tr = Trace(e=e, device="cpu", b=b, s=s)
    rank = getattr(method, "rank", None)
    lora = None if rank is None else (rank, method.adapter_bits(recipe) // 8)
    adapted = shape.lora_adapters(method.targets, present_only=True) if lora else ()
    modules = frozenset(a.module for a in adapted)
    x = tr.new(b * s * shape.hidden_size, e, True, existing=True)
    tables = (tr.new(s, e, shared=True, existing=True), tr.new(s, e, shared=True, existing=True))
    step = Pass(kind="flash", dropout=False, tables=tables, cache=shape.use_cache, lora_modules=modules, lora=lora)
    shape.architecture.trace_block(tr, shape, x, lora is None, step)
    if "scan_backward" not in tr.__dict__:  # a block without the mixer (Granite's attention blocks)
        return 0
    before, due = tr.__dict__["scan_backward"]
    freed = sum((nbytes for key, (_, _, nbytes) in tr.saved.items() if key not in before), 0)
    t, inner = b * s, shape.linear_attention.inner
    if lora is None:
        made = sum(p.numel for p in shape.tensors("layer") if not (p.name.startswith(_NORMS_BEFORE_SCAN) or any(
            part in p.name for part in _BEFORE_SCAN)))
        gradients = made * recipe.grad_bits // 8
    else:
        gradients = sum(k * rank * (d_in + d_out) for _, d_in, d_out, k in
                        shape.lora_adapters(method.targets, present_only=True)) * method.adapter_bits(recipe) // 8
    return due + t * inner * e + t * shape.hidden_size * e + gradients - freed
