"""Activation memory: the tensors the forward pass keeps for the backward pass (textbook model).

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
section 4.1: one GPT block at 16 bits with 1-byte dropout masks keeps s*b*h*(34 + 5*a*s/h) bytes.
Written here with the element size e and the mask size m as free variables:

    attention  sbh*(5e + m) + a*s^2*b*(e + dropout*(e + m))   (eager: scores, softmax, dropout)
    mlp        sbh*(9e + m)                                   (input, 4h pre- and post-GeLU, mask)
    norms      sbh*2e
    per block  sbh*(16e + 2m) + a*s^2*b*(e + dropout*(e + m))

which gives 34*sbh + 5*a*s^2*b at e=2, m=1. Fused attention (SDPA, FlashAttention) keeps no s x s
tensor, only a 4*a*s*b fp32 log-sum-exp. Full recomputation (gradient checkpointing) keeps each
block's input, e*sbh, plus one block's full set while it is recomputed. Outside the blocks: the
embedding dropout mask (m*sbh, only when the embeddings train), the final norm's and the head's
inputs (2*e*sbh) and the fp32 logits of the loss, 4*s*b*V (Korthikanti et al., section 4.1).

The textbook model uses h and a alone (a GPT block with a 4h MLP), for every family; the
"transformers" model in hf_activations.py follows what each PyTorch implementation keeps.
"""

from __future__ import annotations


from . import validate
from .arrays import any_true
from .architectures._deltanet import LINEAR
from .architectures._shortconv import CONV
from .models import ModelShape
from .values import frozen

ATTENTION_KINDS = ("eager", "sdpa")


@frozen
class ActivationEstimate:
    """Activation bytes: per stored block, how many blocks store, outside the blocks, and the loss.

    The "transformers" model (hf_activations.py) fills three more fields, which the textbook model
    leaves at their defaults: first_layer, the bytes of the first storing block when they differ
    from per_layer (its input needs no gradient, or it holds the tables every block shares);
    frozen_per_layer x frozen_layers_storing, blocks that train nothing but still store what the
    input gradient needs (frozen blocks behind trainable embeddings); terms, one (where, what,
    bytes) row per kind of saved tensor.
    """

    per_layer: object
    layers_storing: object
    recompute_peak: object
    outside_layers: object
    loss: object
    model: str = "textbook"
    first_layer: object = None
    frozen_per_layer: object = 0
    frozen_layers_storing: object = 0
    terms: tuple = ()
    # a model whose blocks differ (ModelShape.block_layouts): what the blocks of the other layouts save beyond the
    # last block's layout, which per_layer and first_layer describe (negative where they save less)
    other_layouts: object = 0

    def __post_init__(self):
        # Checked when built: whole, non-negative bytes and block counts (ints, or int64 arrays in a sweep).
        for name in ("per_layer", "layers_storing", "recompute_peak", "outside_layers", "loss", "frozen_per_layer",
                     "frozen_layers_storing"):
            object.__setattr__(self, name, validate.nbytes(name, getattr(self, name)))
        if self.first_layer is not None:
            object.__setattr__(self, "first_layer", validate.nbytes("first_layer", self.first_layer))
        object.__setattr__(self, "model", validate.choice("model", self.model, ("textbook", "transformers")))
        if any_true(self.layers < 0):
            raise ValueError(f"other_layouts ({self.other_layouts}) leaves the blocks' saved bytes negative")
        if not isinstance(self.terms, tuple):
            raise TypeError(f"terms must be a tuple of (where, what, bytes) rows; got {validate.describe(self.terms)}")

    @property
    def layers(self):
        """Bytes every storing block keeps together (the first one counted at first_layer when given)."""
        blocks = self.per_layer * self.layers_storing
        if self.first_layer is not None:
            blocks = blocks + (self.first_layer - self.per_layer) * (self.layers_storing > 0)
        return blocks + self.frozen_per_layer * self.frozen_layers_storing + self.other_layouts

    @property
    def saved_by_forward(self):
        """Bytes saved for backward by the end of the forward pass: total less the recompute peak."""
        return self.layers + self.outside_layers + self.loss

    @property
    def total(self):
        """All activation bytes kept at the end of the forward pass (plus the recompute peak)."""
        return self.layers + self.recompute_peak + self.outside_layers + self.loss


def _layer_arguments(seq_len, batch_size, hidden_size, n_heads, element_bytes, mask_bytes, dropout, attention):
    """The arguments of korthikanti_per_layer / korthikanti_terms, checked (ValueError names the field)."""
    seq_len = validate.count("seq_len", seq_len, high=validate.MAX_SEQ)
    batch_size = validate.count("batch_size", batch_size, high=validate.MAX_BATCH)
    validate.check_sweep_size(seq_len=seq_len, batch_size=batch_size)
    return (seq_len, batch_size,
            validate.count("hidden_size", hidden_size, scalar=True),
            validate.count("n_heads", n_heads, scalar=True),
            validate.count("element_bytes", element_bytes, high=8, scalar=True),
            validate.count("mask_bytes", mask_bytes, low=0, high=8, scalar=True),
            validate.flag("dropout", dropout),
            validate.choice("attention", attention, ATTENTION_KINDS))


def korthikanti_per_layer(*, seq_len, batch_size, hidden_size, n_heads, element_bytes=2, mask_bytes=1,
                          dropout=True, attention="eager"):
    """Bytes one transformer block keeps for backward (Korthikanti et al. 2022, generalised in e and m).

    Returns s*b*h*(16e + 2m) + a*s^2*b*(e + e + m) bytes with eager attention (e: element bytes, m:
    dropout-mask bytes, 0 without dropout, which also drops the e + m of the dropped scores), or
    s*b*h*(16e + 2m) + 4*a*s*b with fused attention ("sdpa"). At element_bytes=2, mask_bytes=1,
    dropout, eager attention: s*b*h*(34 + 5*a*s/h). seq_len and batch_size may be arrays.
    """
    s, b, h, a, e, mask_bytes, dropout, attention = _layer_arguments(
        seq_len, batch_size, hidden_size, n_heads, element_bytes, mask_bytes, dropout, attention)
    if validate.is_array(s, b):
        validate.check_sweep("activations per layer", korthikanti_per_layer(
            seq_len=validate.largest(s), batch_size=validate.largest(b), hidden_size=h, n_heads=a,
            element_bytes=e, mask_bytes=mask_bytes, dropout=dropout, attention=attention))
    m = mask_bytes if dropout else 0
    per_layer = s * b * h * (16 * e + 2 * m)
    if attention == "eager":
        # QK^T scores' softmax output (e) plus, with dropout, its mask (m) and dropped output (e).
        per_layer = per_layer + a * s * s * b * (e + ((e + m) if dropout else 0))
    else:
        per_layer = per_layer + 4 * a * s * b  # fused kernels keep only an fp32 log-sum-exp per row
    return per_layer


def textbook_activations(shape: ModelShape, *, seq_len, batch_size, activation_bits: int, dropout: bool,
                         attention: str, checkpointing: bool, layers_storing, embeddings_trainable: bool,
                         mask_bytes: int = 1) -> ActivationEstimate:
    """Korthikanti et al.'s activation model for this shape and what the method trains (see the module doc).

    A sweep (numpy arrays) whose largest point would pass 2**59 bytes raises ValueError instead of
    wrapping around silently in int64 (scalars are exact Python ints at any size).
    """
    if validate.is_array(seq_len, batch_size, layers_storing):
        # Every term grows with s, b and the storing layers: the largest point bounds the sweep,
        # evaluated exactly with Python ints.
        top = textbook_activations(
            shape, seq_len=validate.largest(seq_len), batch_size=validate.largest(batch_size),
            activation_bits=activation_bits, dropout=dropout, attention=attention, checkpointing=checkpointing,
            layers_storing=validate.largest(layers_storing), embeddings_trainable=embeddings_trainable,
            mask_bytes=mask_bytes)
        validate.check_sweep("activations (from seq_len and batch_size)", top.total)
    e = activation_bits // 8
    m = mask_bytes if dropout else 0
    s, b, h = seq_len, batch_size, shape.hidden_size
    full_layer = korthikanti_per_layer(seq_len=s, batch_size=b, hidden_size=h, n_heads=shape.n_heads,
                                       element_bytes=e, mask_bytes=mask_bytes, dropout=dropout, attention=attention)
    if checkpointing:
        per_layer = e * s * b * h  # only the block's input survives the forward pass
        recompute = full_layer * (layers_storing > 0)  # one block rebuilt at a time during backward
    else:
        per_layer, recompute = full_layer, 0
    record = shape.architecture  # None for the uniform family: counted as a causal LM
    if record is not None and not record.causal:
        outside = e * b * h  # the pooler's input (first token); BERT has no final norm
        loss = 4 * b * shape.num_labels
    else:
        outside = 2 * e * s * b * h  # final norm input and head input
        loss = 4 * s * b * (shape.vocab_size or 0)  # fp32 logits for cross-entropy
    if embeddings_trainable:
        outside = outside + m * s * b * h  # embedding dropout mask
    # A linear-attention block (Qwen3-Next's gated DeltaNet) or a short-convolution block (LFM2's) runs no attention
    # kernel: the storing ones keep neither eager's s x s scores nor a fused kernel's log-sum-exp
    # (korthikanti_per_layer's attention term)
    a = shape.n_heads
    kernel = a * s * s * b * (e + ((e + m) if dropout else 0)) if attention == "eager" else 4 * a * s * b
    linear = 0 if checkpointing else sum((count for layout, count in shape.last_blocks(layers_storing)
                                          if layout.block_kind in (LINEAR, CONV)), 0)
    return ActivationEstimate(per_layer, layers_storing, recompute, outside, loss, other_layouts=-linear * kernel)


@frozen
class ActivationTerm:
    """One tensor a transformer block keeps for backward: where it is, what it is, and its bytes.

    unit: the size it is counted in ('s*b*h', 'a*s*s*b' or 'a*s*b'); coefficient: bytes per unit
    (e.g. 2 for a 16-bit s x b x h tensor); bytes = coefficient x unit.
    """

    block: str  # "attention", "mlp" or "norms"
    tensor: str  # what is stored, in words
    unit: str
    coefficient: int
    bytes: object

    def __post_init__(self):
        for name in ("block", "tensor", "unit"):
            validate.text_field(name, getattr(self, name))
        object.__setattr__(self, "coefficient", validate.count("coefficient", self.coefficient, low=0, high=2**20,
                                                               scalar=True))
        object.__setattr__(self, "bytes", validate.nbytes("bytes", self.bytes))


def korthikanti_terms(*, seq_len, batch_size, hidden_size, n_heads, element_bytes=2, mask_bytes=1,
                      dropout=True, attention="eager") -> tuple[ActivationTerm, ...]:
    """The tensors behind korthikanti_per_layer, one ActivationTerm each; their bytes sum to it.

    Korthikanti et al. 2022, section 4.1 (at e=2, m=1): attention keeps 11*sbh + 5*a*s^2*b (QKV
    input 2, Q and K 4, V 2, projection input 2, dropout mask 1; softmax output 2, its dropout
    mask 1 and dropped output 2 per a*s^2*b), the MLP 19*sbh (input 2, GeLU input 8, GeLU output
    8, dropout mask 1), the two LayerNorms 4*sbh: 34*sbh + 5*a*s^2*b. With fused attention the
    s x s terms become one fp32 log-sum-exp per row and head (4*a*s*b); without dropout the masks
    (and the dropped copy of the attention probabilities) are not kept.
    """
    s, b, h, a, e, mask_bytes, dropout, attention = _layer_arguments(
        seq_len, batch_size, hidden_size, n_heads, element_bytes, mask_bytes, dropout, attention)
    if validate.is_array(s, b):  # the terms sum to korthikanti_per_layer, which checks the sweep
        korthikanti_per_layer(seq_len=s, batch_size=b, hidden_size=h, n_heads=a, element_bytes=e,
                              mask_bytes=mask_bytes, dropout=dropout, attention=attention)
    m = mask_bytes if dropout else 0
    sbh, assb, asb = s * b * h, a * s * s * b, a * s * b
    rows = [
        ("attention", "input of the Q, K, V projection", "s*b*h", e),
        ("attention", "Q and K (for the scores QK^T)", "s*b*h", 2 * e),
        ("attention", "V (for the weighted sum)", "s*b*h", e),
        ("attention", "input of the output projection", "s*b*h", e),
        ("attention", "dropout mask after the projection", "s*b*h", m),
    ]
    if attention == "eager":
        rows.append(("attention", "softmax output (s x s per head)", "a*s*s*b", e))
        if dropout:
            rows += [("attention", "dropout mask on the softmax (s x s)", "a*s*s*b", m),
                     ("attention", "dropped softmax output (s x s)", "a*s*s*b", e)]
    else:
        rows.append(("attention", "fp32 log-sum-exp per row (fused kernel)", "a*s*b", 4))
    rows += [
        ("mlp", "input of the first linear layer", "s*b*h", e),
        ("mlp", "GeLU input (4h wide)", "s*b*h", 4 * e),
        ("mlp", "GeLU output, input of the second linear (4h wide)", "s*b*h", 4 * e),
        ("mlp", "dropout mask after the MLP", "s*b*h", m),
        ("norms", "inputs of the two LayerNorms", "s*b*h", 2 * e),
    ]
    units = {"s*b*h": sbh, "a*s*s*b": assb, "a*s*b": asb}
    return tuple(ActivationTerm(block, tensor, unit, coef, coef * units[unit])
                 for block, tensor, unit, coef in rows if coef)
