"""Precision recipes and optimizers: what a training run keeps per parameter, in bits.

Published estimates of full-finetuning memory range from 8 to 20 bytes per parameter with Adam
because they count different recipes. Each recipe here says in one line what it keeps.
"""

from __future__ import annotations


from . import validate
from .values import frozen


@frozen
class Recipe:
    """How a training run stores each part, in bits per element.

    weight_bits: the model's weights; grad_bits: one gradient per trainable weight;
    master_bits: an extra fp32 copy of trainable weights (0 = none); state_bits: each optimizer
    state; accum_bits: an extra gradient-accumulation buffer (0 = none); activation_bits: tensors
    saved for the backward pass. states_follow_params: PyTorch optimizers keep states in each
    parameter's own dtype, so an fp32 adapter in a 16-bit model gets fp32 states.
    """

    name: str
    weight_bits: int
    grad_bits: int
    master_bits: int
    state_bits: int
    accum_bits: int
    activation_bits: int
    states_follow_params: bool
    description: str
    source: str


RECIPES: dict[str, Recipe] = {
    "fp32": Recipe(name="fp32", weight_bits=32, grad_bits=32, master_bits=0, state_bits=32,
                   accum_bits=0, activation_bits=32, states_follow_params=True,
                   description="Everything in fp32: 4 B weights, 4 B gradients, 4 B per optimizer state.",
                   source="PyTorch defaults"),
    "bf16": Recipe(name="bf16", weight_bits=16, grad_bits=16, master_bits=0, state_bits=16,
                   accum_bits=0, activation_bits=16, states_follow_params=True,
                   description="Pure bf16: weights, gradients and optimizer states all 2 B (the article's recipe).",
                   source="the article; LLaMA-Factory pure_bf16"),
    "fp16": Recipe(name="fp16", weight_bits=16, grad_bits=16, master_bits=0, state_bits=16,
                   accum_bits=0, activation_bits=16, states_follow_params=True,
                   description="Pure fp16: like pure bf16 in bytes, but needs loss scaling against underflow.",
                   source="the article (16-bit)"),
    "amp": Recipe(name="amp", weight_bits=32, grad_bits=32, master_bits=0, state_bits=32,
                  accum_bits=0, activation_bits=16, states_follow_params=True,
                  description="PyTorch AMP, as transformers' Trainer runs it (bf16=True on an fp32 model): "
                  "fp32 weights, gradients and states; 16-bit activations under autocast; no master copy (the "
                  "fp32 weights are the master).",
                  source="torch.autocast documentation"),
    "mixed": Recipe(name="mixed", weight_bits=16, grad_bits=16, master_bits=32, state_bits=32,
                    accum_bits=0, activation_bits=16, states_follow_params=False,
                    description="Mixed precision with master weights (DeepSpeed, Megatron): 16-bit weights and "
                    "gradients, an fp32 master copy (built before the first step) and fp32 optimizer states.",
                    source="Micikevicius et al. 2018; Rajbhandari et al. 2020 (ZeRO), section 3.1"),
    "mixed_fp32_grads": Recipe(name="mixed_fp32_grads", weight_bits=16, grad_bits=16, master_bits=32, state_bits=32,
                               accum_bits=32, activation_bits=16, states_follow_params=False,
                               description="Mixed precision with master weights plus an fp32 gradient-accumulation buffer.",
                               source="nanotron; Hugging Face Ultra-Scale Playbook (2025)"),
}
PRECISIONS = tuple(RECIPES)


EIGHT_BIT_BLOCK = 256
"""bitsandbytes' block of 8-bit optimizer states: one fp32 absmax per 256 values since v0.44 (PR #1365,
2024); Dettmers et al. 2022 and earlier versions used 2,048."""
EIGHT_BIT_MIN_SIZE = 4096
"""bitsandbytes' min_8bit_size: a tensor with fewer elements keeps its optimizer states in fp32."""


@frozen
class Optimizer:
    """What an optimizer keeps per trainable parameter.

    states: full-size state tensors per parameter (Adam: exp_avg and exp_avg_sq); state_bits:
    None = the recipe's state_bits, else fixed (8-bit Adam); step_bytes_per_tensor: PyTorch's
    Adam/AdamW keep a 4-byte fp32 `step` tensor per parameter tensor; factored: Adafactor keeps
    row and column statistics instead of a full second moment; block_size/block_constant_bits:
    quantization constants of 8-bit states; min_8bit_size: tensors with fewer elements keep
    fp32 states (bitsandbytes' rule; 0 = no such rule). label: the name a reader sees ("8-bit Adam").
    temporaries: what the update allocates besides the states (see TEMPORARIES; peak.py and parallel.py read it
    through update_temporaries); temporaries_measured: False where the rule is assumed from a like optimizer.
    """

    name: str
    states: int
    state_bits: int | None
    step_bytes_per_tensor: int
    factored: bool
    block_size: int
    block_constant_bits: int
    description: str
    source: str
    min_8bit_size: int = 0
    label: str = ""
    temporaries: str = "none"
    temporaries_measured: bool = True

    def __post_init__(self):
        validate.choice("temporaries", self.temporaries, TEMPORARIES)


# What an optimizer's update allocates besides its states:
#   "none"      updates in place (SGD; with momentum its buffer starts as a clone of the gradient, a state)
#   "adam"      PyTorch's Adam: on CUDA the foreach implementation (the default there) holds temporaries as large
#               as every updated tensor together (assumed, not measured); on the CPU the single-tensor one builds
#               denom = sqrt(v)/c + eps as two temporaries of one tensor while the previous tensor's is still
#               referenced: the largest 2 x B[i] + B[i-1] over the tensors in parameters() order (measured)
#   "bitsandbytes"  bitsandbytes' 8-bit update, one tensor at a time (peak.py's _bnb_transient)
TEMPORARIES = ("none", "adam", "bitsandbytes")


def update_temporaries(sizes, device: str) -> int:
    """Bytes of an "adam" update's temporaries at their highest, for the updated tensors' bytes in parameters()
    order (see TEMPORARIES): their sum on CUDA (foreach), else the largest 2 x B[i] + B[i-1]."""
    if device == "cuda":
        return sum(sizes)
    best = previous = 0
    for size in sizes:
        best, previous = max(best, 2 * size + previous), size
    return best


OPTIMIZERS: dict[str, Optimizer] = {
    "sgd": Optimizer(name="sgd", states=0, state_bits=None, step_bytes_per_tensor=0,
                     factored=False, block_size=0, block_constant_bits=0,
                     description="Plain SGD: no state at all.", source="torch.optim.SGD",
                     label="SGD", temporaries="none"),
    "sgd_momentum": Optimizer(name="sgd_momentum", states=1, state_bits=None, step_bytes_per_tensor=0,
                              factored=False, block_size=0, block_constant_bits=0,
                              description="SGD with momentum: one momentum buffer per parameter.", source="torch.optim.SGD(momentum>0)",
                              label="SGD with momentum", temporaries="none"),
    "adam": Optimizer(name="adam", states=2, state_bits=None, step_bytes_per_tensor=4,
                      factored=False, block_size=0, block_constant_bits=0,
                      description="Adam: first and second moments (exp_avg, exp_avg_sq) plus a 4-byte step per tensor.",
                      source="Kingma & Ba 2015; torch.optim.Adam",
                      label="Adam", temporaries="adam"),
    "adamw": Optimizer(name="adamw", states=2, state_bits=None, step_bytes_per_tensor=4,
                       factored=False, block_size=0, block_constant_bits=0,
                       description="AdamW: Adam's two moments with decoupled weight decay, plus a 4-byte step per tensor.",
                       source="Loshchilov & Hutter 2019; torch.optim.AdamW",
                       label="AdamW", temporaries="adam"),
    # Reddi et al. 2018 (AMSGrad): a third state, the running maximum of exp_avg_sq (max_exp_avg_sq).
    "adam_amsgrad": Optimizer(name="adam_amsgrad", states=3, state_bits=None, step_bytes_per_tensor=4,
                              factored=False, block_size=0, block_constant_bits=0,
                              description="Adam with amsgrad: exp_avg, exp_avg_sq and their running maximum, plus a 4-byte step per tensor.",
                              source="Reddi et al. 2018; torch.optim.Adam(amsgrad=True)",
                              label="Adam (amsgrad)", temporaries="adam"),
    "adamw_amsgrad": Optimizer(name="adamw_amsgrad", states=3, state_bits=None, step_bytes_per_tensor=4,
                               factored=False, block_size=0, block_constant_bits=0,
                               description="AdamW with amsgrad: three moments (the third the running maximum of the second), plus a 4-byte step per tensor.",
                               source="Reddi et al. 2018; torch.optim.AdamW(amsgrad=True)",
                               label="AdamW (amsgrad)", temporaries="adam"),
    # Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization": 2 x 1 B states, one fp32
    # absmax per block of 2,048 values.
    # bitsandbytes (Optimizer2State.init_state): a tensor with fewer than min_8bit_size = 4,096 elements
    # keeps both states in fp32; the others get uint8 states and fp32 absmax1/absmax2 of ceil(n / 256)
    # each (2,048 before v0.44); `step` is a Python int, no tensor.
    "adam8bit": Optimizer(name="adam8bit", states=2, state_bits=8, step_bytes_per_tensor=0,
                          factored=False, block_size=EIGHT_BIT_BLOCK, block_constant_bits=32,
                          description="8-bit Adam: both moments in 1 B each, one fp32 constant per block of 256 values "
                          "(bitsandbytes >= 0.44; tensors under 4,096 elements keep fp32 moments).",
                          source="Dettmers et al. 2022 (bitsandbytes)", min_8bit_size=EIGHT_BIT_MIN_SIZE,
                          label="8-bit Adam", temporaries="bitsandbytes"),
    # Shazeer & Stern 2018: the second moment of an r x c matrix kept as r + c statistics; no first moment.
    # torch.optim.Adafactor (measured, torch 2.13) keeps row_var and col_var in the parameter's dtype
    # (the full size for vectors) plus a 4-byte fp32 `step` tensor per parameter tensor, as Adam does.
    "adafactor": Optimizer(name="adafactor", states=0, state_bits=None, step_bytes_per_tensor=4,
                           factored=True, block_size=0, block_constant_bits=0,
                           description="Adafactor: factored second moments (rows + columns per matrix), no momentum, "
                           "plus a 4-byte step per tensor.",
                           source="Shazeer & Stern 2018; torch.optim.Adafactor",
                           label="Adafactor", temporaries="adam", temporaries_measured=False),
}
OPTIMIZER_NAMES = tuple(OPTIMIZERS)


def get_recipe(name) -> Recipe:
    """The Recipe for a precision name: fp32, bf16, fp16, amp, mixed, mixed_fp32_grads."""
    if isinstance(name, Recipe):
        return name
    return RECIPES[validate.choice("precision", name, PRECISIONS)]


def get_optimizer(name) -> Optimizer:
    """The Optimizer for a name: sgd, sgd_momentum, adam, adamw, adam_amsgrad, adamw_amsgrad, adam8bit, adafactor."""
    if isinstance(name, Optimizer):
        return name
    return OPTIMIZERS[validate.choice("optimizer", name, OPTIMIZER_NAMES)]


def bytes_per_parameter(precision="bf16", optimizer="adamw") -> dict[str, float]:
    """Bytes each trainable parameter costs in full finetuning, part by part, and their sum (floats).

    weights = weight_bits / 8, gradients = grad_bits / 8, gradient_accumulation = accum_bits / 8,
    master_weights = master_bits / 8, optimizer_states = states x state_bits / 8.

    Leaves out what is per tensor (Adam's step counters) or per block (8-bit constants) and
    activations. Pure bf16 + AdamW: 2 + 2 + 0 + 4 = 8 B; mixed + AdamW: 2 + 2 + 4 + 8 = 16 B.
    """
    recipe, opt = get_recipe(precision), get_optimizer(optimizer)
    state_bits = opt.state_bits if opt.state_bits is not None else recipe.state_bits
    parts = {
        "weights": recipe.weight_bits / 8,
        "gradients": recipe.grad_bits / 8,
        "gradient_accumulation": recipe.accum_bits / 8,
        "master_weights": recipe.master_bits / 8,
        "optimizer_states": opt.states * state_bits / 8,
    }
    parts["total"] = sum(parts.values())
    return parts


_PER_PARAMETER_WORDS = {"weights": "weights", "gradients": "gradients", "gradient_accumulation": "accumulation buffer",
                        "master_weights": "master copy", "optimizer_states": "optimizer states"}


def describe(precision="bf16", optimizer="adamw", *, unfactored: bool = False, per_parameter: bool = True) -> str:
    """The recipe's line followed by what one trainable parameter costs with this optimizer, part by part.

    'Mixed precision with master weights plus an fp32 gradient-accumulation buffer. Per trainable parameter: 2 B
    weights + 2 B gradients + 4 B accumulation buffer + 4 B master copy + 0 B optimizer states = 12 B.' (with SGD).
    The sum is bytes_per_parameter's, plus 8-bit Adam's fp32 constants per block of values; Adafactor's
    factored statistics depend on the matrix shapes and are named, not summed, unless `unfactored`
    (a bare parameter count: one full second moment). Per-tensor step counters are left out (a few bytes).
    per_parameter=False: the recipe's line alone (for adapters stored in another dtype than the recipe's).
    """
    recipe, opt = get_recipe(precision), get_optimizer(optimizer)
    if not per_parameter:
        return recipe.description
    parts = bytes_per_parameter(recipe, opt)
    total = parts.pop("total")
    if opt.block_size:  # 8-bit states: one fp32 constant per block of block_size values, per state
        parts["optimizer_states"] += opt.states * opt.block_constant_bits / 8 / opt.block_size
    if opt.factored and unfactored:  # no matrix shapes: Adafactor keeps a full second moment
        parts["optimizer_states"] += recipe.state_bits / 8
    total = sum(parts.values())
    terms = " + ".join(f"{round(b, 2):g} B {_PER_PARAMETER_WORDS[p]}" for p, b in parts.items()
                       if b or p == "optimizer_states")
    factored = " plus Adafactor's row and column statistics per matrix" if opt.factored and not unfactored else ""
    return f"{recipe.description} Per trainable parameter: {terms} = {round(total, 2):g} B{factored}."
