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

from dataclasses import dataclass

from . import _validate
from .models import ModelShape

ATTENTION_KINDS = ("eager", "sdpa")


@dataclass(frozen=True)
class ActivationEstimate:
    """Activation bytes: per stored block, how many blocks store, outside the blocks, and the loss."""

    per_layer: object
    layers_storing: object
    recompute_peak: object
    outside_layers: object
    loss: object
    model: str = "textbook"

    @property
    def total(self):
        """All activation bytes kept at the end of the forward pass (plus the recompute peak)."""
        return self.per_layer * self.layers_storing + self.recompute_peak + self.outside_layers + self.loss


def korthikanti_per_layer(*, seq_len, batch_size, hidden_size, n_heads, element_bytes=2, mask_bytes=1,
                          dropout=True, attention="eager"):
    """Bytes one transformer block keeps for backward (Korthikanti et al. 2022, generalised in e and m).

    Returns s*b*h*(16e + 2m) + a*s^2*b*(e + e + m) bytes with eager attention (e: element bytes, m:
    dropout-mask bytes, 0 without dropout, which also drops the e + m of the dropped scores), or
    s*b*h*(16e + 2m) + 4*a*s*b with fused attention ("sdpa"). At element_bytes=2, mask_bytes=1,
    dropout, eager attention: s*b*h*(34 + 5*a*s/h). seq_len and batch_size may be arrays.
    """
    s = _validate.count("seq_len", seq_len, high=_validate.MAX_SEQ)
    b = _validate.count("batch_size", batch_size, high=_validate.MAX_BATCH)
    h = _validate.count("hidden_size", hidden_size, scalar=True)
    a = _validate.count("n_heads", n_heads, scalar=True)
    e = _validate.count("element_bytes", element_bytes, high=8, scalar=True)
    mask_bytes = _validate.count("mask_bytes", mask_bytes, low=0, high=8, scalar=True)
    dropout = _validate.flag("dropout", dropout)
    attention = _validate.choice("attention", attention, ATTENTION_KINDS)
    if _validate.is_array(s, b):
        _validate.check_sweep("activations per layer", korthikanti_per_layer(
            seq_len=_validate.largest(s), batch_size=_validate.largest(b), hidden_size=h, n_heads=a,
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
    """Korthikanti et al.'s activation model for this shape and what the method trains (see the module doc)."""
    if _validate.is_array(seq_len, batch_size, layers_storing):
        # Every term grows with s, b and the storing layers: the largest point bounds the sweep.
        top = textbook_activations(
            shape, seq_len=_validate.largest(seq_len), batch_size=_validate.largest(batch_size),
            activation_bits=activation_bits, dropout=dropout, attention=attention, checkpointing=checkpointing,
            layers_storing=_validate.largest(layers_storing), embeddings_trainable=embeddings_trainable,
            mask_bytes=mask_bytes)
        _validate.check_sweep("activations", top.total)
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
    if shape.family == "bert":
        outside = e * b * h  # the pooler's input (first token); BERT has no final norm
        loss = 4 * b * shape.num_labels
    else:
        outside = 2 * e * s * b * h  # final norm input and head input
        loss = 4 * s * b * (shape.vocab_size or 0)  # fp32 logits for cross-entropy
    if embeddings_trainable:
        outside = outside + m * s * b * h  # embedding dropout mask
    return ActivationEstimate(per_layer, layers_storing, recompute, outside, loss)
