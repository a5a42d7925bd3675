"""Preference training with a frozen reference model (DPO; Rafailov et al. 2023, "Direct Preference Optimization").

Each prompt gives two sequences, the chosen and the rejected answer, so a step's batch of b prompts runs 2b
sequences through the policy. The policy trains with an existing method (Full(), Freeze(...), LoRA(...),
QLoRA(...), Adapters(...)); the loss compares its log-probabilities of the two sequences with a reference's:

    loss = -logsigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r)))

where pi_c is the policy's summed log-probability of the chosen sequence's tokens (log_softmax over the
vocabulary, gathered at the labels, summed per sequence) and ref_c the reference's. The reference comes from:

  "copy"          a frozen copy of the model in the policy's weight format (no gradients, no optimizer states):
                  its weights are counted in the `weights` part (a Note says so; a quantized base's constants in
                  `quantization_constants`), and its forward runs under torch.no_grad before the policy's
  "adapters_off"  the policy itself with its adapters disabled (LoRA/QLoRA: peft's `with model.disable_adapter():`,
                  as TRL does): no extra weights, the same no-grad forward
  "precomputed"   the reference log-probabilities computed beforehand: 2 x b fp32 values in the batch

What it changes in memory, per step (memmath/training.py and memmath/peak.py read these):

  weights        + the reference copy ("copy"), ceil(N x weight_bits / 8) (a quantized base: its quantized bytes)
  activations    the policy's method at batch 2b; the loss saves its fp32 log-softmax output (4 t V, t = 2b s
                 tokens), the gather's index (the labels: a batch tensor, 8 t) and logsigmoid's input and buffer
                 (b fp32 each on the CPU; the CUDA kernel keeps an empty buffer): SFT's shifted labels and total
                 weight are not made (the loss variant of hf_activations' trace, replaced here)
  peak           the reference forward is a moment of the forward phase ("reference forward", under no_grad: a
                 block at its fullest without saving, or the logits with their fp32 copy and log-softmax output),
                 before the policy's forward; the reference log-probabilities (2b fp32) stay for the step

Measured on the CPU by validation/preference.py (memmath_lessons/reference/data/measured_preference.json), recorded after
this module was written.
"""

from __future__ import annotations

from dataclasses import field, fields, replace

from .arrays import is_ndarray

from . import validate
from .flags import option
from .hf_activations import activation_parts
from .loss import applies, dpo_log_probs, reference_log_probs_live
from .methods import (LoRA, Method, Plan, QLoRA, _group_weight_bytes, bnb_code_map_bytes, int8_weight_bytes,
                      load_dtype, quantized_matrices, quantized_weight_bytes)
from .models import ModelShape
from .notes import Note
from .values import frozen

REFERENCES = ("copy", "adapters_off", "precomputed")
REFERENCE_FIELD = "reference"  # the FieldError's field (the command line's --reference)
INT64, FP32 = 8, 4


def _default_base():
    return LoRA()  # LoRA's own defaults (rank 8, q and v), as the command line's --method dpo builds it


@frozen
class DPO(Method):
    """Preference training (DPO): `base` trains the policy on chosen and rejected sequences (the batch doubles);
    `reference` is "copy", "adapters_off" (LoRA/QLoRA only) or "precomputed"; left out, what TRL's DPOTrainer does
    without a ref_model: the adapters disabled for a LoRA/QLoRA policy, else a frozen copy (stored resolved). beta:
    the loss's temperature (it changes no byte). See the module docstring."""

    base: Method = field(default_factory=_default_base, metadata=option(
        "--dpo-base", "dpo: the policy's method, {choices} (default lora), with its own options (--rank, --targets, "
        "...); chosen and rejected sequences double --batch", "NAME", choices=("full", "freeze", "adapters", "lora",
                                                                              "qlora"), dest="dpo_base"))
    reference: str | None = field(default=None, metadata=option(
        "--reference", "dpo: the reference log-probs from a frozen copy of the model (copy), the policy with its "
        "adapters disabled (adapters_off: lora/qlora), or precomputed; default as TRL: adapters_off for lora/qlora, "
        "else copy", "KIND", choices=REFERENCES))
    beta: float = field(default=0.1, metadata=option(
        "--beta", "dpo: the loss's beta (default 0.1; no byte depends on it)", "B", kind="number"))

    def __post_init__(self):
        if not isinstance(self.base, Method) or type(self.base) is Method or isinstance(self.base, DPO):
            raise validate.FieldTypeError("method", "DPO's base must be Full(), Freeze(...), Adapters(...), LoRA(...) or "
                                          f"QLoRA(...); got {validate.describe(self.base)}")
        if any(is_ndarray(getattr(self.base, f.name)) for f in fields(self.base)):
            raise validate.FieldError("method", "DPO's base must be one method, not a sweep of ranks or layers: "
                                      "sweep batch_size or seq_len, or make one DPO(...) per setting")
        if self.reference is None:
            object.__setattr__(self, "reference", "adapters_off" if isinstance(self.base, LoRA) else "copy")
        object.__setattr__(self, "reference", validate.choice(REFERENCE_FIELD, self.reference, REFERENCES))
        if self.reference == "adapters_off" and not isinstance(self.base, LoRA):
            raise validate.FieldError(REFERENCE_FIELD, "reference 'adapters_off' runs the policy with its adapters "
                                      "disabled (peft's disable_adapter), so it needs base=LoRA(...) or QLoRA(...); "
                                      f"got {type(self.base).__name__}: use reference 'copy' or 'precomputed'")
        object.__setattr__(self, "beta", validate.real("beta", self.beta, low=1e-6, high=1e6))

    # ---- the Method interface -------------------------------------------------------------------------------
    def plan(self, shape: ModelShape, recipe) -> Plan:
        """The base method's plan; with reference "copy" the copy's weights added, and Notes saying the reference."""
        plan = self.base.plan(shape, recipe)
        weights, constants = reference_copy_bytes(self, shape, recipe)
        return replace(plan, weight_bytes=plan.weight_bytes + weights,
                       quantization_constant_bytes=plan.quantization_constant_bytes + constants,
                       notes=plan.notes + reference_notes(self, shape, recipe))

    def describe(self) -> str:
        reference = {"copy": "a frozen reference copy of the model",
                     "adapters_off": "the policy with its adapters disabled as the reference",
                     "precomputed": "precomputed reference log-probabilities"}[self.reference]
        return (f"DPO preference training (beta {self.beta:g}) with {reference}, chosen and rejected sequences "
                f"doubling the batch; the policy: {self.base.describe()}")

    def head_trains(self, shape: ModelShape) -> bool:
        return self.base.head_trains(shape)

    @property
    def vision(self):  # a vision-language model's setting is the base's
        return getattr(self.base, "vision", "frozen")

    def layers_trained(self, shape: ModelShape):
        return self.base.layers_trained(shape) if hasattr(self.base, "layers_trained") else shape.n_layers


def reference_copy_bytes(method: DPO, shape: ModelShape, recipe) -> tuple:
    """(weight bytes, quantization-constant bytes) of the frozen reference copy: (0, 0) unless reference "copy".

    The copy is the base model in the policy's weight format, without adapters: ceil(N x weight_bits / 8), or for
    QLoRA the quantized base (its linear weights in 4 or 8 bits and their constants, as the policy's base)."""
    if method.reference != "copy":
        return 0, 0
    base = method.base
    if isinstance(base, QLoRA):
        if base.quant_type == "int8":
            return int8_weight_bytes(shape, recipe.weight_bits, load_dtype(recipe))
        weights, constants = quantized_weight_bytes(shape, "nf4", recipe.weight_bits, block=base.quant_block,
                                                    double_quant=base.double_quant, dtype=load_dtype(recipe))
        if base.layout == "bitsandbytes":  # each quantized matrix's QuantState code maps, as the policy's base keeps
            constants = constants + quantized_matrices(shape) * bnb_code_map_bytes(base.double_quant)
        return weights, constants
    return _group_weight_bytes(shape, recipe), 0


def reference_notes(method: DPO, shape: ModelShape, recipe) -> tuple:
    if method.reference == "copy":
        weights, constants = reference_copy_bytes(method, shape, recipe)
        extra = f" and quantization constants include its {constants:,} B" if constants else ""
        return (Note("dpo_reference_copy", f"weights include the frozen reference copy ({weights:,} B, the base model "
                     f"in the policy's weight format: no gradients, no optimizer states){extra}"),)
    if method.reference == "adapters_off":
        return (Note("dpo_reference_adapters_off", "the reference is the policy with its adapters disabled (peft's "
                     "disable_adapter): no extra weights, one more forward under no_grad"),)
    return (Note("dpo_reference_precomputed", "the reference log-probabilities are precomputed: 2 x batch fp32 "
                 "values in the batch, no reference forward"),)


def rewrapper(method):
    """(the policy's method, a function wrapping another policy method as this run's DPO) for the planner: a DPO
    method's base and DPO(new base, the same reference and beta); any other method and the identity."""
    if not isinstance(method, DPO):
        return method, lambda new: new
    return method.base, lambda new: replace(method, base=new)


# ---- what training.py and peak.py read --------------------------------------------------------------------
def policy_run(run):
    """The run of the policy alone: the base method over chosen and rejected sequences (batch 2b)."""
    return run.replace(method=run.method.base, batch_size=2 * run.batch_size)


def dpo_loss_bytes(run, grad) -> object:
    """Bytes the DPO loss saves for backward (the trace's loss region), when the logits need a gradient (grad):
    the fp32 log-softmax output (4 t V), the gather's index (the labels, a batch tensor: 8 t) and logsigmoid's
    input and CPU buffer (b fp32 each; on CUDA the buffer is empty). t = 2 b s."""
    b, s, vocab = run.batch_size, run.seq_len, run.model.vocab_size
    t = 2 * b * s
    logsigmoid = FP32 * b * (2 if run.device == "cpu" else 1)
    if applies(run):  # the policy's log-probabilities as run.loss computes them (memmath/loss.py)
        return (dpo_log_probs(run, t) + logsigmoid) * grad
    return (FP32 * t * vocab + INT64 * t + logsigmoid) * grad


def batch_extra(run) -> int:
    """Bytes alive through the step besides ids and labels: the reference log-probabilities, 2b fp32 (precomputed:
    in the batch; otherwise made by the reference forward and held to the loss, the previous step's until then)."""
    return FP32 * 2 * run.batch_size


def reference_resident(run, parts) -> int:
    """Buffers of the reference copy (LLaMA's rotary inv_freq, as peak.py counts the policy's); 0 otherwise."""
    if run.method.reference != "copy" or run.model.family != "llama":
        return 0
    return run.model.head_dim * parts.element_bytes


def reference_moments(run, parts) -> list:
    """(label, bytes over what is alive before the step, saved, gradients) of the reference forward, under
    torch.no_grad before the policy's forward: nothing is saved, so its transients alone: the last block at its
    fullest with the decoder's inputs_embeds held (the policy's checkpointed-forward liveness: a block run without
    saving), and the logits (e t V), their fp32 copy (4 t V for a 16-bit model) and the fp32 log-softmax output."""
    if run.method.reference == "precomputed":
        return []
    policy = policy_run(run)
    e, t, h, vocab = parts.element_bytes, 2 * run.batch_size * run.seq_len, run.model.hidden_size, run.model.vocab_size
    unsaved = activation_parts(run.model, recipe=run.recipe, method=run.method.base, seq_len=run.seq_len,
                               batch_size=policy.batch_size, dropout=False, attention=run.attention,
                               checkpointing=True, device=run.device)
    block = unsaved.block_live + e * t * h
    head = e * t * vocab + (FP32 * t * vocab if e != FP32 else 0) + FP32 * t * vocab
    if applies(run):  # the reference log-probabilities as run.loss computes them: one tile or chunk at a time
        head = reference_log_probs_live(run, t, e)
    return [("reference forward (no grad): the last block at its fullest, nothing saved", block),
            ("reference forward (no grad): the logits, their fp32 copy and the log-softmax output", head)]
