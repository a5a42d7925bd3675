"""The exact activation model under PyTorch AMP: fp32 weights, the forward pass in torch.autocast(bfloat16).

hf_activations replays a transformers forward pass storage by storage; this trace is the same pass
with autocast's dtype rules (torch/csrc/autograd/autocast_mode / aten/src/ATen/autocast_mode.cpp,
measured on the CPU by validation/amp.py):

- a matmul (nn.Linear, GPT-2's Conv1D addmm, SDPA) runs in bf16: each call casts its fp32 input to
  a new bf16 copy, kept for backward when the weight trains, and the weight to a bf16 copy, kept
  when the input needs a gradient (autocast caches a trainable weight's copy for the region; each
  weight is read once per forward, so one copy per weight); its output is bf16;
- SDPA casts fp32 q, k, v (LLaMA's, after the fp32 rotary tables) to bf16 copies, which it keeps;
- elementwise ops follow their inputs (GELU, SiLU, tanh on the bf16 matmul outputs stay bf16; a
  residual sum with the fp32 stream is fp32), norms run on the fp32 residual stream in fp32, and
  the loss (log-softmax, cross-entropy) in fp32.

Modelled for SDPA without dropout (the fused kernel) and eager attention, Full/Freeze/LoRA; SDPA with
dropout (the CPU's math kernel), Houlsby adapters and quantized bases under AMP are refused by name.
"""

from __future__ import annotations

from . import validate
from .architectures import ARCHITECTURES, known
from .arrays import np, pick
from .methods import Adapters, QLoRA
from .trace import Trace

AUTOCAST_BYTES = 2  # bf16, the dtype torch.autocast("cpu") and transformers' Trainer(bf16=True) use


def amp_refusal(method, kind=None, shape=None) -> str | None:
    """Why the AMP trace does not model this run (None when it does)."""
    # The model types the AMP cases measured (validation/amp.py): each record's amp_measured.
    if shape is not None and not (known(shape) and shape.architecture.amp_measured):
        measured = ", ".join(sorted(t for t, record in ARCHITECTURES.items() if record.amp_measured))
        return f"models AMP for the model types measured under autocast ({measured}); got {shape.arch!r}"
    if isinstance(method, (Adapters, QLoRA)):
        return f"models AMP for Full(), Freeze(...) and LoRA(...); got {type(method).__name__}"
    if kind == "math":
        return MATH_REFUSAL
    return None


class AmpTrace(Trace):
    """Trace with autocast's dtypes: e is the weights' 4 bytes, matmuls compute in bf16.

    causal_mask: the model adds its fp32 causal mask to the attention scores (GPT-2 and the LLaMA
    family; BERT without padding adds none), which promotes the bf16 scores to fp32 before softmax.
    """

    def __init__(self, *args, causal_mask: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.causal_mask = causal_mask

    def _cast(self, x):
        """autocast's bf16 copy of x (x itself when already bf16)."""
        if x.elem == AUTOCAST_BYTES:
            return x
        copy = self.new(x.numel, AUTOCAST_BYTES, x.grad)
        self.use(x)
        return copy

    def _matmul(self, x, out_numel, trainable, name):
        xc = self._cast(x)
        if trainable:
            self.save(xc, f"{name} input (bf16 cast)")
        if x.grad:  # the weight's bf16 copy, for the input's gradient
            rows = self.b if name.startswith(_PER_SEQUENCE) else self.t  # BERT's pooler reads one token a sequence
            self.save(self.new((x.numel // rows) * (out_numel // rows), AUTOCAST_BYTES), f"{name} weight (bf16 cast)")
        out = self.new(out_numel, AUTOCAST_BYTES, x.grad or trainable)
        self.use(xc)
        return out

    def linear(self, x, out_numel, trainable, lora, name):
        out = self._matmul(x, out_numel, trainable, name)
        if lora is not None:
            rank, adapter_elem = lora  # autocast runs the adapters' matmuls in bf16 too
            # peft first casts x to the adapters' dtype (a bf16 SDPA output becomes an fp32 copy), which
            # autocast then casts back: a bf16 copy of its own, kept for A's gradient.
            xa = x if x.elem == adapter_elem else self.new(x.numel, adapter_elem, x.grad)
            self.use(x)
            a_out = self._matmul(xa, self.t * rank, True, f"{name} LoRA A")
            b_out = self._matmul(a_out, out_numel, True, f"{name} LoRA B")
            scaled = self.tmp(out_numel, AUTOCAST_BYTES, b_out)  # * scaling
            total = self.new(out_numel, AUTOCAST_BYTES, True)  # result + lora, both bf16
            self.use(out, scaled)
            out = total
        return out

    def layer_norm(self, x, trainable, name):
        out = self.new(x.numel, x.elem, x.grad or trainable)
        mean, rstd = self.new(self.t, x.elem), self.new(self.t, x.elem)  # the CPU keeps stats in the input dtype
        self.use(x, mean, rstd)
        if out.grad:
            self.save(x, f"{name} input")
            self.save(mean, f"{name} mean")
            self.save(rstd, f"{name} rstd")
        return out

    def rms_norm(self, x, trainable, name, rows=None, weight_fp32=False, plus_one=None):
        """LlamaRMSNorm on a bf16 input too (Qwen3's q/k norms, OLMo 2's norms of the sublayers' outputs): the
        fp32 copy and rsqrt kept, hidden.to(input dtype) kept for the weight, times the fp32 weight: fp32
        out (OLMo 2: (weight * normed).to(input dtype), its fp32 normed kept). GemmaRMSNorm (plus_one) is
        not measured under autocast: amp_refusal refuses the Gemma model types before a trace starts."""
        if plus_one is not None:
            raise validate.FieldError("activations", "activations='transformers' models AMP without GemmaRMSNorm (use activations='textbook')")
        x32 = x if x.elem == 4 else self.tmp(x.numel, 4, x)
        square = self.tmp(x.numel, 4, x32)
        rsqrt = self.tmp(self.t if rows is None else rows, 4, square)
        y = self.new(x.numel, 4, x.grad)
        self.use(x32, rsqrt)
        if x.grad:
            self.save(x32, f"{name} input in fp32")
            self.save(rsqrt, f"{name} rsqrt")
        normed = y if x.elem == 4 or weight_fp32 else self.tmp(x.numel, x.elem, y)
        normed.grad = x.grad
        if trainable:
            self.save(normed, f"{name} normalized input")
        out = self.new(x.numel, x.elem if weight_fp32 else 4, x.grad or trainable)
        self.use(normed)
        return out

    def add(self, x, y):
        out = self.new(x.numel, max(x.elem, y.elem), x.grad or y.grad)
        self.use(x, y)
        return out

    def gelu(self, x, name):
        if x.grad:
            self.save(x, f"{name} input")
        out = self.new(x.numel, x.elem, x.grad)
        self.use(x)
        return out

    def gelu_new(self, x, name):
        elem = x.elem
        half = self.new(x.numel, elem, x.grad)
        inner = self.tmp(x.numel, elem, x)
        for _ in range(3):
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

    def silu_times(self, gate, up, name):
        act = self.new(gate.numel, gate.elem, gate.grad)
        self.use(gate)
        if gate.grad:
            self.save(gate, f"{name} gate output (SiLU input)")
            self.save(up, f"{name} up output")
        if up.grad:
            self.save(act, f"{name} SiLU output")
        out = self.new(gate.numel, max(gate.elem, up.elem), act.grad or up.grad)
        self.use(act, up)
        return out

    def tanh(self, x, name):
        out = self.new(x.numel, x.elem, x.grad)
        self.use(x)
        if x.grad:
            self.save(out, f"{name} tanh output")
        return out

    def rotary(self, x, tables):
        """bf16 q times the fp32 cos/sin tables: the rotated q is fp32 (type promotion)."""
        if x.grad:
            self.save(tables[0], "rotary cos table")
            self.save(tables[1], "rotary sin table")
        elem = max(x.elem, tables[0].elem)
        times_cos = self.tmp(x.numel, elem, x, tables[0])
        rotated = self.tmp(x.numel, x.elem, x)
        times_sin = self.tmp(x.numel, elem, rotated, tables[1])
        out = self.new(x.numel, elem, x.grad)
        self.use(times_cos, times_sin)
        return out

    def attention(self, q, k, v, *, heads, head_dim, kind, dropout, softmax_fp32, name, v_view=False, q_view=False,
                  kv_contiguous=False):  # kv_contiguous: Trace.attention's; autocast's bf16 copies are counted
        if kind == "eager":
            return self._eager_attention(q, k, v, heads=heads, head_dim=head_dim, dropout=dropout,
                                         softmax_fp32=softmax_fp32, name=name, v_view=v_view, q_view=q_view)
        if kind != "flash":
            raise validate.FieldError("activations", f"activations='transformers' {MATH_REFUSAL} (use activations='textbook')")
        n = self.t * heads * head_dim
        grad = q.grad or k.grad or v.grad
        q, k, v = self._cast(q), self._cast(k), self._cast(v)
        out = self.new(n, AUTOCAST_BYTES, grad)
        lse = self.new(self.b * heads * self.s, 4)
        self.use(q, k, v, lse)
        if grad:
            self.save(q, f"{name} q (SDPA input, bf16)")
            self.save(k, f"{name} k (SDPA input, bf16)")
            self.save(v, f"{name} v (SDPA input, bf16)")
            self.save(lse, f"{name} log-sum-exp (fp32)")
            self.save(out, f"{name} SDPA output")
        return out


    def _eager_attention(self, q, k, v, *, heads, head_dim, dropout, softmax_fp32, name, v_view=False, q_view=False):
        """Eager attention under autocast: both matmuls in bf16 (q and k^T, then the probabilities and v,
        as bf16 copies the bmm keeps). The fp32 causal mask makes GPT-2's and LLaMA's softmax fp32;
        LLaMA's .to(q.dtype) keeps it fp32 (its q is fp32 after the fp32 rotary tables), so its dropout
        mask is fp32 and the probabilities get a bf16 copy for the second matmul; GPT-2 casts them to
        the value's bf16; BERT's softmax runs on the bf16 scores. v_view, q_view: Trace.attention's, for an
        operand already in bf16 (autocast makes no copy of it), assumed (not measured under autocast)."""
        n, scores, c = self.t * heads * head_dim, self.b * heads * self.s * self.s, AUTOCAST_BYTES
        at_b1 = np.asarray(self.b) == 1 if isinstance(self.b, np.ndarray) else self.b == 1
        qc, kc = self.new(n, c, q.grad), self.new(n, c, k.grad)
        if q_view and q.elem == c:
            qc.storage.nbytes = pick(at_b1, q.storage.nbytes, qc.storage.nbytes)
        self.use(q, k)
        if k.grad:
            self.save(qc, f"{name} q bf16 copy (QK^T)")
        if q.grad:
            self.save(kc, f"{name} k^T bf16 copy (QK^T)")
        grad = q.grad or k.grad
        raw = self.tmp(scores, c, qc, kc)  # q @ k^T
        raw = self.tmp(scores, 4 if self.causal_mask else c, raw)  # * scaling, + the fp32 causal mask
        # LLaMA: softmax(dtype=fp32).to(query.dtype), its query fp32; GPT-2: softmax(...).type(value.dtype)
        elem = 4 if softmax_fp32 and q.elem == 4 else c
        probs = self.new(scores, 4 if (softmax_fp32 or self.causal_mask) else c, grad)
        self.use(raw)
        if grad:
            self.save(probs, f"{name} softmax output" + (" (fp32)" if softmax_fp32 else ""))
        if probs.elem != elem:
            cast = self.new(scores, elem, grad)
            self.use(probs)
            probs = cast
        probs = self.dropout(probs, dropout, f"{name} attention")
        pc = self._cast(probs)  # autocast's bf16 copy for probs @ v
        vc = self.new(n, c, v.grad)
        if v_view and v.elem == c:
            vc.storage.nbytes = pick(at_b1, v.storage.nbytes, vc.storage.nbytes)
        self.use(v)
        if v.grad:
            self.save(pc, f"{name} attention probabilities (PV, bf16)")
        if pc.grad:
            self.save(vc, f"{name} v bf16 copy (PV)")
        out = self.tmp(n, c, pc, vc)  # probs @ v
        ctx = self.new(n, c, pc.grad or v.grad)  # heads merged: transpose + contiguous copies
        self.use(out)
        return ctx


_PER_SEQUENCE = ("pooler dense", "classifier")  # hf_activations' names of BERT's head matmuls (b rows, not b x s)


MATH_REFUSAL = "models AMP with SDPA without dropout or eager attention (not SDPA's math kernel, with dropout)"
