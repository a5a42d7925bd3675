"""Apertus (transformers 5.24 configuration_apertus.py, modeling_apertus.py): LLaMA's attention with RMSNorm over each
head of q and k, and an MLP without a gate, down_proj(xielu(up_proj(x))). xIELU (Huang et al. 2024,
arXiv:2411.13010; activations.py XIELUActivation) learns two scalars per block, alpha_p and alpha_n, each of shape
(1,) and in config.dtype; its beta and eps are buffers. The block's two norms are named attention_layernorm and
feedforward_layernorm.

A prefill keeps the rotary decoder's working set but for the MLP phase: xIELU in PyTorch (_xielu_python, what runs
without the optional CUDA kernel) holds the x > 0 mask and up to four temporaries beside up_proj's output.

The trace replays xIELU op by op (xielu below): measured on the CPU (tests/test_families_kin.py steps tiny Apertus
models, full and LoRA, SDPA and eager, fp32 and bf16, with and without the training DynamicCache: the saved bytes
equal the trace's to the byte, the peak within 0.1%). It is the Python xIELU's; with the optional CUDA kernel
(nickjbrowning/XIELU) installed transformers runs that instead on a GPU, which is not measured."""

from functools import partial

from ..trace import Tensor, Trace
from . import _decoder
from ._parts import ParamTensor, linear, norm
from ._steps import Pass, houlsby
from .record import ATTENTION_BIAS, QK_NORM, Architecture, decoder_fields

# ApertusConfig.base_model_tp_plan (configuration_apertus.py), its replicated q_norm and k_norm left out
TP_PLAN = {"layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.k_proj": "colwise",
           "layers.*.self_attn.v_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise",
           "layers.*.mlp.up_proj": "colwise", "layers.*.mlp.down_proj": "rowwise"}


def mlp_tensors(m) -> list:
    """ApertusMLP: up_proj and down_proj without biases, then xIELU's alpha_p and alpha_n."""
    h, inner = m.hidden_size, m.intermediate_size
    return (linear("mlp.up_proj", "mlp", h, inner, False) + linear("mlp.down_proj", "mlp", inner, h, False)
            + [ParamTensor("mlp.act_fn.alpha_p", "mlp", (1,)), ParamTensor("mlp.act_fn.alpha_n", "mlp", (1,))])


def tensors(m, group: str) -> list:
    """ApertusForCausalLM's tensors: the rotary decoder's outside the blocks; in a block, attention with its q/k
    norms, the MLP and the two norms, in parameters() order."""
    if group != "layer":
        return _decoder.tensors(m, group)
    h = m.hidden_size
    return (_decoder.attention_tensors(m) + mlp_tensors(m)
            + norm("attention_layernorm", h, False) + norm("feedforward_layernorm", h, False))


def lora_modules(m):
    """peft's target names in an Apertus block: LLaMA's attention, up_proj and down_proj."""
    table = _decoder.lora_table(m)
    table["gate"] = "ApertusMLP has no gate: up_proj and down_proj around xIELU"
    return table


def prefill_base(shape, s, b, e, eager):
    """The rotary decoder's prefill with Apertus' MLP phase: the residual, its normed copy and a third h-wide tensor
    as in LLaMA's, and at xIELU's fullest, per element of the I-wide up_proj output, that output, the bool x > 0
    mask, the positive branch alpha_p * x * x + beta * x and, while the negative branch adds its last term,
    (expm1(min(x, eps)) - x) * alpha_n, beta * x and their sum: 5 e + 1 bytes (measured with validation/
    inference_working_set.py's LiveBytes: tests/test_families_kin.py)."""
    outside, attn, _ = _decoder.rotary_prefill(shape, s, b, e, eager)
    return outside, attn, s * b * (3 * e * shape.hidden_size + (5 * e + 1) * shape.intermediate_size)


def xielu(tr: Trace, x: Tensor, trainable: bool, name: str) -> Tensor:
    """XIELUActivation._xielu_python on up_proj's output x, op by op as autograd saves (torch 2.13's
    derivatives.yaml): torch.where(x > 0, alpha_p * x * x + beta * x, (expm1(min(x, eps)) - x) * alpha_n + beta * x)
    keeps the bool x > 0; alpha_p * x keeps x when alpha_p trains and softplus(alpha_p) (one value) for x's
    gradient; (alpha_p * x) * x keeps both factors; min(x, eps) keeps x; expm1 its output; (. - x) * alpha_n its
    left factor when alpha_n trains and beta + softplus(alpha_n) (one value) for the other; beta and eps are
    buffers."""
    n, e, grad = x.numel, tr._src(x), x.grad or trainable
    mask = tr.tmp(n, 1, x)  # x > 0
    alpha_p, alpha_n = tr.new(1, e, trainable), tr.new(1, e, trainable)  # softplus(alpha_p), beta + softplus(.)
    scaled = tr.new(n, e, grad)  # alpha_p * x
    tr.use(alpha_p, x)
    square = tr.tmp(n, e, scaled, x)  # (alpha_p * x) * x
    positive = tr.tmp(n, e, square, tr.tmp(n, e, x))  # + beta * x
    low = tr.tmp(n, e, x)  # min(x, eps)
    expm1 = tr.new(n, e, x.grad)
    tr.use(low)
    less_x = tr.new(n, e, x.grad)  # expm1 - x
    tr.use(expm1, x)
    negative = tr.tmp(n, e, tr.tmp(n, e, less_x, alpha_n), tr.tmp(n, e, x))  # * alpha_n + beta * x
    out = tr.new(n, e, grad)  # torch.where
    tr.use(mask, positive, negative)
    if x.grad:
        tr.save(alpha_p, f"{name} softplus(alpha_p)")
        tr.save(scaled, f"{name} alpha_p * x")
        tr.save(x, f"{name} input")
        tr.save(expm1, f"{name} expm1 output")
        tr.save(alpha_n, f"{name} beta + softplus(alpha_n)")
    if trainable:
        tr.save(x, f"{name} input")
        tr.save(less_x, f"{name} expm1(min(x, eps)) - x")
    if grad:
        tr.save(mask, f"{name} x > 0 (bool)")
    return out


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """ApertusDecoderLayer: LLaMA's attention with q/k norms over each head (the rotary decoder's step), then
    down_proj(xielu(up_proj(.))) on the normed residual."""
    t = tr.t
    r1 = tr.add(x, _decoder.attention(tr, shape, tr.rms_norm(x, trainable, "attention_layernorm"), trainable, p))
    up = tr.linear(tr.rms_norm(r1, trainable, "feedforward_layernorm"), t * shape.intermediate_size, trainable,
                   p.lora_of("up_proj"), "up_proj")
    act = xielu(tr, up, trainable, "xIELU")
    out = tr.linear(act, t * shape.hidden_size, trainable, p.lora_of("down_proj"), "down_proj")
    return tr.add(r1, houlsby(tr, out, p, "MLP"))


def read_options(config, get):
    return {"qk_norm": "head", "gated_mlp": False}


ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="apertus", family="llama", title="Apertus", source="configuration_apertus.py, modeling_apertus.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, **QK_NORM,
                           "hidden_act": "the MLP activation: xIELU and its two learned scalars per block"}),
    activations=("xielu",), read_options=read_options, tensors=tensors, lora_modules=lora_modules,
    module_order=("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"), tp_plan=TP_PLAN,
    prefill_phases=partial(_decoder.prefill_phases, base=prefill_base), trace_block=block,
    traced_activations=("xielu",),
    # xIELU's backward (torch.where's two branch gradients and the ops on each) holds more I-wide gradients than
    # SwiGLU's two: fitted to checkpointed CPU steps (tests/test_families_kin.py), where four puts full
    # finetuning's peak 0.9-2.2% low (two: 0.9-3.4%), LLaMA of the same widths measuring 0.5-2.7% low
    mlp_backward_widths=4,
)
