"""The symbolic forward pass that the exact activation model replays: tensors as sizes and flags.

A Trace allocates Tensors (element count, bytes per element, requires-grad) on Storages and saves
them for backward as autograd would; hf_activations drives it through each transformers block (the
records' trace steps, memmath/architectures/).

Its dtypes follow one of two rules. Without autocast every activation is in the model's dtype (e bytes), an op
upcasting only where transformers does (fp32 softmax, RMSNorm, the loss). Under torch.autocast (Trace(autocast=2):
fp32 weights, the forward in bfloat16; torch/csrc/autograd/autocast_mode / aten/src/ATen/autocast_mode.cpp,
measured on the CPU by validation/amp.py, refusals in memmath/amp_trace.py):

- a matmul (nn.Linear, GPT-2's Conv1D addmm, SDPA) runs in bf16: each call casts its fp32 input to
  a new bf16 copy, kept for backward when the weight trains, and the weight to a bf16 copy, kept
  when the input needs a gradient (autocast caches a trainable weight's copy for the region; each
  weight is read once per forward, so one copy per weight); its output is bf16;
- SDPA casts fp32 q, k, v (LLaMA's, after the fp32 rotary tables) to bf16 copies, which it keeps;
- elementwise ops follow their inputs (GELU, SiLU, tanh on the bf16 matmul outputs stay bf16; a
  residual sum with the fp32 stream is fp32), norms run on the fp32 residual stream in fp32, and
  the loss (log-softmax, cross-entropy) in fp32.
"""

from __future__ import annotations

from . import validate
from .arrays import any_true, is_ndarray, larger, np, pick


class Storage:
    """A block of memory: its bytes and what the peak needs of it. Compared by identity (an alias shares it)."""

    def __init__(self, nbytes, shared=False, existing=False, batch=False, born=0, last=0, kept=False):
        self.nbytes = nbytes
        self.shared = shared  # a table every block reuses (rotary cos/sin, GPT-2's eager mask): counted outside
        self.existing = existing  # already alive before the forward pass (buffers) or kept elsewhere: not counted
        self.batch = batch  # part of the input batch (token ids, labels): saved, but not allocated by the step
        self.born = born  # liveness, for the peak: the step that allocates it,
        self.last = last  # the last step that reads it,
        self.kept = kept  # and whether backward keeps it (saved) past the forward pass


class Tensor:
    """A tensor of the trace: its elements, bytes per element, requires-grad flag and the Storage it views (a
    record may attach more: Gemma 4's per-layer inputs)."""

    def __init__(self, numel, elem, grad, storage=None):
        self.numel, self.elem, self.grad, self.storage = numel, elem, grad, storage


UNQUANTIZED = ("lm_head", "classifier")  # linears transformers' bitsandbytes integration leaves in 16/32 bits
MATH_REFUSAL = "models AMP with SDPA without dropout or eager attention (not SDPA's math kernel, with dropout)"


class Trace:
    """A symbolic forward pass: tensors are sizes and requires-grad flags; ops save like autograd.

    It also follows when each storage is allocated and last read (Python drops a temporary after
    its last use), so peak_live() gives the most bytes alive at once: peak.py uses it.
    """

    def __init__(self, *, e: int, device: str, b, s, saving: bool = True, int8_base: bool = False,
                 lora_dropout: bool = False, autocast: int | None = None, causal_mask: bool = False):
        self.e, self.device, self.b, self.s, self.t = e, device, b, s, b * s
        # torch.autocast's compute dtype in bytes (2: bfloat16), None without autocast: matmuls then compute in e
        self.autocast = autocast
        self.compute = autocast or e
        # Under autocast the model adds its fp32 causal mask to the attention scores (GPT-2 and the LLaMA family;
        # BERT without padding adds none), which promotes the bf16 scores to fp32 before softmax; without autocast
        # the mask is in the model's dtype.
        self.score_mask_elem = (4 if causal_mask else 0) if autocast else e
        self.int8_base = int8_base  # QLoRA(quant_type="int8"): bitsandbytes' 8-bit matmul keeps its input
        self.lora_dropout = lora_dropout  # LoRA(dropout=p > 0): peft's nn.Dropout on each adapter's input
        self.saving = saving  # False: a checkpointed block's forward, which saves nothing
        self.region = "outside"
        self.saved: dict[int, tuple] = {}
        self.batch_bytes = 0
        self.clock = 0
        self._alive: list[Storage] = []
        # This block's SDPA call gets a mask tensor (transformers materializes a sliding-window mask once the
        # sequence reaches the window): hf_activations sets it before each block; eager attention ignores it.
        self.sdpa_mask = False

    # ---- bookkeeping ----
    def new(self, numel, elem=None, grad=False, *, shared=False, existing=False, batch=False) -> Tensor:
        elem = self.e if elem is None else elem
        storage = Storage(numel * elem, shared, existing, batch, born=self.clock, last=self.clock)
        self.clock += 1
        self._alive.append(storage)
        return Tensor(numel, elem, grad, storage)

    def use(self, *tensors):
        """The tensors are read by the op that allocated last: they live at least until then."""
        for x in tensors:
            if x is not None:
                x.storage.last = max(x.storage.last, self.clock - 1)

    def save(self, x: Tensor, what: str):
        storage = x.storage
        if not self.saving or storage.existing or id(storage) in self.saved:
            return
        storage.kept = True
        self.saved[id(storage)] = ("outside" if storage.shared else self.region, what, storage.nbytes)
        if storage.batch:
            self.batch_bytes = self.batch_bytes + storage.nbytes

    def bytes_in(self, region):
        return sum((nbytes for where, _, nbytes in self.saved.values() if where == region), 0)

    def cache_held(self, x: Tensor) -> Tensor:
        """x as transformers' training cache holds it (a DynamicCache layer's copy or state): alive to the end of the
        forward pass, saved or not; hf_activations counts it in the blocks that store nothing too."""
        x.storage.kept = True
        self.__dict__.setdefault("kv_copies", []).append(x.storage)
        return x

    def backward_moment(self, work):
        """A moment of this block's backward, at the op traced last: what the block saved up to it (backward has
        freed what later ops saved) plus `work`, what that op's backward holds besides; the widest is kept
        (peak.py prices it for a recomputed block: ActivationParts.recompute_backward_live)."""
        moment = self.bytes_in(self.region) + work
        self.__dict__["backward_live"] = larger(self.__dict__.get("backward_live", 0), moment)

    def terms(self, region, label=None):
        rows: dict[str, object] = {}
        for where, what, nbytes in self.saved.values():
            if where == region:
                rows[what] = rows.get(what, 0) + nbytes
        return tuple((label or region, what, nbytes) for what, nbytes in rows.items())

    def peak_live(self):
        """Most bytes alive at once in this trace: saved storages stay, temporaries go after their last use."""
        storages = [st for st in self._alive if not (st.existing or st.batch)]
        best = 0
        for step in sorted({st.born for st in storages}):
            live = sum((st.nbytes for st in storages if st.born <= step and (st.kept or st.last >= step)), 0)
            best = np.maximum(best, live) if is_ndarray(live) or is_ndarray(best) else max(best, live)
        return best

    @property
    def mask_elem(self):
        # CPU dropout multiplies by a mask of the input's dtype; CUDA's fused dropout keeps 1-byte bools.
        return None if self.device == "cpu" else 1

    def tmp(self, numel, elem=None, *reads):
        """A temporary that the next op reads and drops (allocated now, read by `reads` too)."""
        out = self.new(numel, elem)
        self.use(*reads)
        return out

    # ---- the dtype rule ----
    def _src(self, x) -> int:
        """The dtype an elementwise op on x computes in: the model's without autocast, x's own under it."""
        return x.elem if self.autocast else self.e

    def _promoted(self, *xs) -> int:
        """A binary op's result dtype: the model's without autocast, type promotion of its inputs under it."""
        return max(x.elem for x in xs) if self.autocast else self.e

    def _cast(self, x):
        """autocast's copy of x in its compute dtype for a matmul (x itself without autocast or already so)."""
        if not self.autocast or x.elem == self.autocast:
            return x
        copy = self.new(x.numel, self.autocast, x.grad)
        self.use(x)
        return copy

    def _matmul(self, x, out_numel, trainable, name, label, rows=None):
        """x @ W's input: saves (the matmul's copy of) x for a trainable W; under autocast also
        the weight's bf16 copy when x needs a gradient (rows: the rows x has, t unless given)."""
        xm = self._cast(x)
        if trainable:
            self.save(xm, label)
        if self.autocast and x.grad:  # the weight's copy in the compute dtype, for the input's gradient
            rows = self.t if rows is None else rows
            self.save(self.new((x.numel // rows) * (out_numel // rows), self.autocast), f"{name} weight (bf16 cast)")
        return xm

    # ---- ops ----
    def linear(self, x, out_numel, trainable, lora, name, rows=None):
        """x @ W (+ LoRA's B(A(x)) * scale): saves x only for a trainable W. rows: the rows x has (t unless given:
        BERT's pooler and classifier read one token a sequence)."""
        cast = " (bf16 cast)" if self.autocast else ""
        xm = self._matmul(x, out_numel, trainable, name, f"{name} input{cast}", rows)
        if self.int8_base and x.grad and name not in UNQUANTIZED:
            # bitsandbytes 0.50 MatMul8bitFp (CPU) and MatMul8bitLt keep the input as ctx.A / ctx.tensors
            # until backward (autograd/_functions.py), outside saved_tensors (validation/quantized.py)
            self.save(x, f"{name} input (kept by bitsandbytes' 8-bit matmul)")
        grad = x.grad or trainable or lora is not None
        out = self.new(out_numel, self.compute, grad)
        self.use(xm)
        if lora is not None:
            rank, adapter_elem = lora
            # peft casts x to the adapter dtype: a new copy per adapted module when the dtypes differ (under
            # autocast a bf16 SDPA output becomes an fp32 copy, which autocast casts back for A: a copy of its own).
            xa = x if adapter_elem == x.elem else self.new(x.numel, adapter_elem, x.grad)
            self.use(x)
            copy = cast or ("" if xa is x else f" ({adapter_elem}-byte copy)")
            if self.lora_dropout:
                # lora_A(dropout(x)): the dropout keeps its mask (when x needs a gradient; CPU: input * a mask of
                # x's dtype, CUDA's native_dropout: a bool mask) and A keeps the dropped copy, not x (peft 0.21).
                xa = self.dropout(xa, True, f"{name} LoRA")
                copy = " (dropped out)"
            xa = self._matmul(xa, self.t * rank, True, f"{name} LoRA A", f"{name} LoRA A input{copy}")
            a_out = self.new(self.t * rank, self.autocast or adapter_elem, True)
            self.use(xa)
            self._matmul(a_out, out_numel, True, f"{name} LoRA B", f"{name} LoRA B input" + (cast or " (rank-wide)"))
            b_out = self.tmp(out_numel, a_out.elem, a_out)
            scaled = self.tmp(out_numel, b_out.elem, b_out)  # * scaling
            base = out  # peft's `result`, alive until `result = result + lora` returns
            if scaled.elem != base.elem:  # result + lora in mixed dtypes: the CPU first copies result up
                out = self.tmp(out_numel, scaled.elem, out)
            total = self.new(out_numel, max(scaled.elem, base.elem), True)  # result + lora
            self.use(out, scaled, base)
            if total.elem != base.elem:  # result.to(torch_result_dtype)
                out = self.new(out_numel, base.elem, True)
                self.use(total)
            else:
                out = total
        return out

    def layer_norm(self, x, trainable, name):
        """torch.nn.LayerNorm saves input, mean and rstd whenever it is differentiated at all."""
        src = self._src(x)
        out = self.new(x.numel, src, x.grad or trainable)
        # the CPU keeps the stats in the input dtype (the autocast trace follows the CPU, where it was measured)
        stat = src if self.device == "cpu" or self.autocast else 4
        mean, rstd = self.new(self.t, stat), self.new(self.t, stat)
        self.use(x, mean, rstd)
        if out.grad:
            self.save(x, f"{name} input")
            self.save(mean, f"{name} mean")
            self.save(rstd, f"{name} rstd")
        return out

    def rms_norm(self, x, trainable, name, rows=None, weight_fp32=False, plus_one=None):
        """LlamaRMSNorm: x.to(fp32) * rsqrt(mean(x^2) + eps), back to the input dtype, times the weight.

        rows: how many vectors it normalizes (t for the residual; t x heads for Qwen3's q/k norms).
        weight_fp32: Olmo2RMSNorm's (weight * x_normed).to(dtype), whose product keeps the fp32 normed x.
        plus_one: the width of GemmaRMSNorm's weight (Gemma, Gemma 2, Gemma 3): normed * (1.0 +
        weight.float()), in fp32, then type_as(x); the product keeps the fp32 normed x (when the weight
        trains) and the fresh fp32 (1 + weight) vector (when x needs a gradient).
        Under autocast (on a bf16 input too: Qwen3's q/k norms, OLMo 2's norms of the sublayers' outputs) the
        normed x times the fp32 weight is fp32 (OLMo 2: cast to the input's dtype); GemmaRMSNorm is not measured
        under autocast (amp_refusal refuses the Gemma model types before a trace starts).
        """
        if plus_one is not None and self.autocast:
            raise validate.FieldError("activations", "activations='transformers' models AMP without GemmaRMSNorm "
                                      "(use activations='textbook')")
        src = self._src(x)
        x32 = x if src == 4 else self.tmp(x.numel, 4, x)
        square = self.tmp(x.numel, 4, x32)
        rsqrt = self.tmp(self.t if rows is None else rows, 4, square)
        y = self.new(x.numel, 4, x.grad)
        self.use(x32, rsqrt)
        if x.grad:
            self.save(x32, f"{name} input in fp32")
            self.save(rsqrt, f"{name} rsqrt")
        if x.grad:  # its fp32 backward: x * rsqrt's, mean's and pow(2)'s gradients, five of x's size at once
            self.backward_moment(5 * x.numel * 4)  # (CPU profiles of Qwen3's q/k norms and Gemma 2's sandwich norms)
        normed = y if src == 4 or weight_fp32 or plus_one else self.tmp(x.numel, src, y)
        normed.grad = x.grad
        if trainable:
            self.save(normed, f"{name} normalized input" + (" (fp32)" if plus_one and self.e != 4 else ""))
        if plus_one:
            one_plus = self.new(plus_one, 4, trainable)  # 1.0 + weight.float(): a new fp32 vector per call
            if x.grad:
                self.save(one_plus, f"{name} 1 + weight (fp32)")
            prod = self.new(x.numel, 4, x.grad or trainable)
            self.use(normed, one_plus)
            if self.e == 4:
                return prod
            out = self.new(x.numel, self.e, prod.grad)  # type_as(x)
            self.use(prod)
            return out
        out = self.new(x.numel, src if weight_fp32 else max(normed.elem, self.e), x.grad or trainable)  # * weight
        self.use(normed)
        return out

    def dropout(self, x, on, name):
        """p > 0: saves the mask when x needs a gradient; p = 0 returns x itself."""
        if not on:
            return x
        mask = self.new(x.numel, self.mask_elem or x.elem)
        if x.grad:
            self.save(mask, f"{name} dropout mask")
        out = self.new(x.numel, x.elem, x.grad)
        self.use(x, mask)
        return out

    def add(self, x, y):
        out = self.new(x.numel, self._promoted(x, y), x.grad or y.grad)
        self.use(x, y)
        return out

    def embedding(self, ids, out_numel, trainable, name):
        if trainable:
            self.save(ids, f"{name} indices (int64)")
        out = self.new(out_numel, self.e, trainable)
        self.use(ids)
        return out

    def gelu_new(self, x, name):
        """GPT-2's 0.5*x*(1 + tanh(c*(x + 0.044715*x^3))) in plain ops: x, tanh, 1 + tanh and 0.5*x saved."""
        elem = self._src(x)
        half = self.new(x.numel, elem, x.grad)  # 0.5 * x, evaluated first
        inner = self.tmp(x.numel, elem, x)  # x ** 3
        for _ in range(3):  # 0.044715 * ., x + ., c * .
            inner = self.tmp(x.numel, elem, inner, x)
        tanh = self.new(x.numel, elem, x.grad)
        self.use(inner)
        one_plus = self.new(x.numel, elem, x.grad)
        self.use(tanh)
        out = self.new(x.numel, elem, x.grad)
        self.use(half, one_plus)
        if x.grad:
            self.save(x, f"{name} input (pow)")
            self.save(tanh, f"{name} tanh output")
            self.save(one_plus, f"{name} 1 + tanh")
            self.save(half, f"{name} 0.5 * x")
        return out

    def gelu(self, x, name):
        if x.grad:
            self.save(x, f"{name} input")
        out = self.new(x.numel, self._src(x), x.grad)
        self.use(x)
        return out

    def silu_times(self, gate, up, name, act_name="SiLU"):
        """LLaMA's silu(gate) * up: silu keeps gate; the product keeps each factor the other needs.
        Gemma's gelu_pytorch_tanh (one F.gelu) keeps its input just as SiLU does: the same three tensors."""
        act = self.new(gate.numel, self._src(gate), gate.grad)
        self.use(gate)
        if gate.grad:
            self.save(gate, f"{name} gate output ({act_name} input)")
            self.save(up, f"{name} up output")
        if up.grad:
            self.save(act, f"{name} {act_name} output")
        out = self.new(gate.numel, self._promoted(gate, up), act.grad or up.grad)
        self.use(act, up)
        return out

    def tanh(self, x, name):
        out = self.new(x.numel, self._src(x), x.grad)
        self.use(x)
        if x.grad:
            self.save(out, f"{name} tanh output")
        return out

    def rotary(self, x, tables):
        """q*cos + rotate_half(q)*sin keeps only the cos and sin tables (shared by every block). Under autocast
        bf16 q times the fp32 tables is fp32 (type promotion)."""
        if x.grad:
            self.save(tables[0], "rotary cos table")
            self.save(tables[1], "rotary sin table")
        elem = self._promoted(x, tables[0])
        times_cos = self.tmp(x.numel, elem, x, tables[0])
        rotated = self.tmp(x.numel, self._src(x), x)  # rotate_half: cat of the two halves, one negated
        times_sin = self.tmp(x.numel, elem, rotated, tables[1])
        out = self.new(x.numel, elem, x.grad)
        self.use(times_cos, times_sin)
        return out

    def _sdpa_mask_inputs(self, k, v, n, one_kv):
        """(k, v, mask) as SDPA gets them when this block's call carries a mask (self.sdpa_mask), else (k, v, None).

        With a mask transformers stops sharing key/value heads: sdpa_attention_forward (integrations/
        sdpa_attention.py) sets enable_gqa only when use_gqa_in_sdpa(), which is false once a mask is given on the
        CPU and CUDA, so repeat_kv copies k and v to every query head (expand + reshape: new a-head tensors, which
        SDPA keeps). torch's SDPA then turns the boolean (b, 1, s, s) mask, an expanded view of one (1, 1, s, s)
        tensor, into an additive one in the query's dtype: convert_boolean_attn_mask's at::where(mask, 0, -inf)
        allocates the whole b x s x s tensor in every call, one per block, and the CPU flash kernel saves it for
        backward (ScaledDotProductFlashAttentionForCpuBackward0 holds attn_mask_). The math kernel only adds it."""
        if not self.sdpa_mask:
            return k, v, None
        # num_key_value_groups > 1: repeat_kv copies, but with one key/value head (multi-query attention, Gemma 3
        # 1B) its expand(b, 1, a, s, d).reshape(b, a, s, d) merges a size-1 dim with the stride-0 one: a view of k
        # itself, at every b (measured: Gemma 3 with one key/value head kept no a-head copy past the window).
        if any_true(k.numel != n) and not one_kv:
            k, v = (self._copy(x, n) for x in (k, v))
        return k, v, self.new(self.b * self.s * self.s, self.e)

    def _kv_operand(self, x, n, elem, kind, one_kv):
        """What eager's matmul keeps of k (for QK^T) or v (for PV): a contiguous a-head copy, the repeat_kv copy or
        torch.matmul's reshape of the (b, a, ...) operand into (b * a, ...). With one key/value head repeat_kv is a
        stride-0 view, and matmul's reshape merges b with that stride-0 dim as a view only at b = 1: there it keeps
        x itself (found measuring Gemma 3 with one key/value head at b = 1: 2 x t x (a - 1) x d x e per block less
        than a-head copies); at b > 1, a copy."""
        if kind != "eager" or not one_kv or x.elem != elem or self.autocast:  # autocast copies its operands
            return self.new(n, elem, x.grad)
        if not is_ndarray(self.b):
            return x if self.b == 1 else self.new(n, elem, x.grad)
        copy = self.new(n, elem, x.grad)
        copy.storage.nbytes = pick(np.asarray(self.b) == 1, x.storage.nbytes, copy.storage.nbytes)
        return copy

    def _copy(self, x, numel):
        out = self.new(numel, x.elem, x.grad)
        self.use(x)
        return out

    def attention(self, q, k, v, *, heads, head_dim, kind, dropout, softmax_fp32, name, softcap=None,
                  v_view=False, q_view=False, kv_contiguous=False):
        """v_view (GPT-NeoX, Phi-3 without the cache): v is a view into the fused qkv output. Eager probs @ v
        reshapes it to (b*a, s, d): a copy for b > 1, but at b = 1 a view, so the whole qkv storage is saved
        (found when the first held-out GPT-NeoX eager case, b = 1, measured 2 x t x h x e more per block).
        q_view (GPT-2 with the cache): q @ k^T keeps q's whole storage at b = 1 the same way.
        kv_contiguous (the cache's k and v, contiguous (b, heads, s, d) copies): eager's k^T and v reshape
        as views, so the matmuls keep the cache's tensors themselves, where no GQA repeat copies them.
        Under autocast both matmuls (or SDPA) run in bf16 on bf16 copies of their operands, which they keep; the
        fp32 causal mask makes GPT-2's and LLaMA's eager softmax fp32; LLaMA's .to(q.dtype) keeps it fp32 (its q
        is fp32 after the fp32 rotary tables), so its dropout mask is fp32 and the probabilities get a bf16 copy
        for the second matmul; GPT-2 casts them to bf16; BERT's softmax runs on the bf16 scores. v_view and
        q_view hold there for an operand already in bf16, assumed (not measured under autocast)."""
        n = self.t * heads * head_dim
        scores = self.b * heads * self.s * self.s
        if self.autocast and kind == "math":
            raise validate.FieldError("activations", f"activations='transformers' {MATH_REFUSAL} "
                                      "(use activations='textbook')")
        given = (k, v)  # the attention module's own k and v, alive until it returns
        one_kv = heads > 1 and any_true(k.numel * heads == n)  # one key/value head for every query head
        mask = None
        if kind != "eager":
            k, v, mask = self._sdpa_mask_inputs(k, v, n, one_kv)
        bf16 = ", bf16" if self.autocast else ""
        if kind == "flash":
            grad = q.grad or k.grad or v.grad
            repeated = (k is not given[0], v is not given[1])
            q, k, v = self._cast(q), self._cast(k), self._cast(v)
            out = self.new(n, self.compute, grad)
            lse = self.new(self.b * heads * self.s, 4)
            # (under autocast the casts read the module's k and v: measured so, validation/amp.py)
            self.use(q, k, v, lse, mask, *(() if self.autocast else given))
            if grad:
                self.save(q, f"{name} q (SDPA input{bf16})")
                self.save(k, f"{name} k (SDPA input{bf16})" + (" repeated to every query head" if repeated[0] else ""))
                self.save(v, f"{name} v (SDPA input{bf16})" + (" repeated to every query head" if repeated[1] else ""))
                self.save(lse, f"{name} log-sum-exp (fp32)")
                self.save(out, f"{name} SDPA output")
                if mask is not None:
                    self.save(mask, f"{name} mask in the query's dtype (SDPA input, b x s x s)")
                # its backward: the output's gradient and the gradients of q, k and v it returns, together
                self.backward_moment(n * self.compute + (q.numel + k.numel + v.numel) * self.compute)
            return out  # the output projection reads it through a view
        elem = 4 if kind == "math" else self.compute  # the CPU math kernel upcasts 16-bit inputs to fp32
        what = "bf16 " if self.autocast else "fp32 " if kind == "math" and self.e != 4 else ""
        contiguous = kv_contiguous and not self.autocast  # autocast copies its operands whatever their layout
        held = ()
        if kind == "math":  # q, k, v upcast (and scaled): locals of the math kernel until it returns
            held = tuple(self.new(n, elem, x.grad) for x in (q, k, v))
            self.use(q, k, v)
            q, k, v = held
            held += tuple(x for x in (mask,) + given if x is not None)  # read until the kernel returns
        qc = self.new(n, elem, q.grad)
        kc = k if contiguous and k.numel == n and k.elem == elem else self._kv_operand(k, n, elem, kind, one_kv)
        if q_view and kind == "eager" and q.elem == elem:
            qc.storage.nbytes = pick(np.asarray(self.b) == 1 if isinstance(self.b, np.ndarray) else self.b == 1,
                                      q.storage.nbytes, qc.storage.nbytes)
        self.use(q, k)
        if k.grad:
            self.save(qc, f"{name} q {what}copy (QK^T)")
        if q.grad:
            self.save(kc, f"{name} k^T {what}copy (QK^T)")
        grad = q.grad or k.grad
        raw = self.tmp(scores, elem, qc, kc)  # q @ k^T
        raw = self.tmp(scores, max(elem, self.score_mask_elem), raw, mask)  # * scaling (and + mask)
        if softcap:  # Gemma 2/3's eager attention: scores / cap, tanh (which keeps its output), * cap
            raw = self.tmp(scores, elem, raw)
            capped = self.new(scores, elem, grad)
            self.use(raw)
            if grad:
                self.save(capped, f"{name} softcapping tanh output")
            raw = self.tmp(scores, elem, capped)
        fp32_softmax = kind == "eager" and softmax_fp32  # softmax(dtype=float32)
        probs = self.new(scores, 4 if fp32_softmax else raw.elem, grad)
        self.use(raw)
        if grad:
            self.save(probs, f"{name} softmax output" + (" (fp32)" if fp32_softmax else ""))
        # LLaMA: .to(query.dtype); GPT-2: .type(value.dtype), under autocast bf16; BERT: as it is
        target = q.elem if fp32_softmax else (self.autocast or probs.elem)
        if probs.elem != target:
            cast = self.new(scores, target, grad)
            self.use(probs)
            probs = cast
        probs = self.dropout(probs, dropout, f"{name} attention")
        pc = self._cast(probs)  # autocast's bf16 copy for probs @ v
        vc = v if contiguous and v.numel == n and v.elem == elem else self._kv_operand(v, n, elem, kind, one_kv)
        if v_view and kind == "eager" and vc is not v and v.elem == elem:
            vc.storage.nbytes = pick(np.asarray(self.b) == 1 if isinstance(self.b, np.ndarray) else self.b == 1,
                                      v.storage.nbytes, vc.storage.nbytes)
        self.use(v)
        if v.grad:
            self.save(pc, f"{name} attention probabilities (PV{bf16})")
        if pc.grad:
            self.save(vc, f"{name} v {what}copy (PV)")
        out = self.tmp(n, elem, pc, vc)  # probs @ v
        if elem != self.compute:
            out = self.tmp(n, self.e, out)  # back to the model dtype
        ctx = self.new(n, self.compute, pc.grad or v.grad)  # heads merged: transpose + contiguous copies
        self.use(out, *held)
        return ctx
