"""The causal LM loss as a run setting: how much of the logits a step builds, keeps and differentiates at once.

With t tokens (batch x sequence), a vocabulary of V words, width h and e bytes per element of the model:

- "transformers": transformers' ForCausalLMLoss (loss_utils.py) on the model's materialized logits: the head
  writes e*t*V, `logits.float()` copies them to fp32 (4*t*V, a 16-bit model), cross_entropy keeps its fp32
  log-softmax output (4*t*V) for backward, and backward holds two fp32 gradients over the vocabulary (8*t*V)
  beside it: about 12 B per logit element at backward's peak (hf_activations traces it exactly; this module
  leaves those numbers as the trace has them).
- "chunked": TRL 1.15+'s tiled log-probabilities (its DPO and SFT trainers): the head runs inside the tiled
  function, tile by tile over TILE_TOKENS tokens x TILE_VOCAB columns, with an online log-sum-exp; the logits are
  never whole. What backward keeps is the per-token fp32 log-sum-exp and the selected log-probability (4*t
  each); a tile's logits in the model dtype and their fp32 copy are alive at once in forward, and in backward the
  tile recomputed with its fp32 gradient.
- "fused": Liger's fused linear cross-entropy (LigerFusedLinearCrossEntropyLoss): the forward pass works through
  chunks of tokens, chunk = next power of two of ceil(t / ceil(V / h)), computes each chunk's logits and their
  gradient in place and accumulates the gradient of the hidden states (e*t*h, kept for backward) and, when the
  head trains, of the head's weight (e*V*h); backward only scales what was kept. Apple's cut cross-entropy keeps
  less still (it never writes a chunk of logits to memory), so for it this is an upper bound.

The chunked and fused models are read from the implementations' published algorithms, not measured here: the
exact, measured model is transformers' default.
"""

from __future__ import annotations

from dataclasses import replace

from .arrays import is_ndarray, np

from . import validate
from .values import frozen

LOSSES = ("transformers", "chunked", "fused")
TILE_TOKENS = 4096  # TRL 1.15's tiled log-probabilities: tokens per tile
TILE_VOCAB = 32768  # and vocabulary columns per tile
FP32 = 4
INT64 = 8


@frozen
class LossBytes:
    """One loss implementation's bytes at a step (ints, or int64 arrays in a sweep).

    saved: what the loss keeps for backward (the trace's "loss" region); forward_live: what is alive at the loss
    in forward besides the saved tensors before it (the logits or one tile, their fp32 copy, and `saved`);
    backward_live: what backward adds at the loss on top of every saved tensor.
    """

    saved: object
    forward_live: object
    backward_live: object


def _next_power_of_two(n: int) -> int:
    return 1 << (max(int(n), 1) - 1).bit_length()


def _smaller(x, y):
    return np.minimum(x, y) if is_ndarray(x) or is_ndarray(y) else min(x, y)


def loss_bytes(loss: str, *, tokens, vocab: int, hidden: int, element_bytes: int, head_trains: bool) -> LossBytes:
    """The bytes of one causal LM loss over `tokens` tokens (see the module docstring for each implementation).

    transformers: saved 4tV (fp32 log-softmax) + 8t (shifted labels) + 4 (total weight); forward e*t*V + 4tV (the
    copy, a 16-bit model) + 4tV; backward 8tV.
    """
    t, V, h, e = tokens, vocab, hidden, element_bytes
    labels = INT64 * t + FP32  # the shifted labels (int64) and the loss's total weight (fp32), as transformers keeps
    copy = FP32 if e != FP32 else 0  # logits.float(): a second copy unless the model is fp32 already
    if loss == "transformers":
        saved = FP32 * t * V + labels
        return LossBytes(saved, e * t * V + copy * t * V + saved, 2 * FP32 * t * V)
    if loss == "chunked":
        rows, cols = _smaller(t, TILE_TOKENS), min(V, TILE_VOCAB)
        saved = 2 * FP32 * t + labels  # log-sum-exp and the selected log-probability per token
        tile = (e + copy) * rows * cols  # one tile's logits and their fp32 copy
        return LossBytes(saved, tile + saved, tile + FP32 * rows * cols)  # backward: the tile again and its gradient
    if loss == "fused":
        chunk = _chunk_tokens(t, V, h)
        saved = e * t * h + (e * V * h if head_trains else 0) + labels  # the gradients the forward pass computed
        return LossBytes(saved, (e + FP32) * chunk * V + saved, 0)
    raise ValueError(f"loss must be one of {', '.join(LOSSES)}; got {loss!r}")


def _chunk_tokens(t, V: int, h: int):
    """Liger's chunk size: next_power_of_2(ceil(t / ceil(V / h))) tokens (fused_linear_cross_entropy.py), at most
    the t tokens there are (the last chunk is a slice)."""
    factor = -(-V // h)
    if is_ndarray(t):
        chunks = [min(_next_power_of_two(-(-int(x) // factor)), int(x)) for x in np.ravel(t)]
        return np.array(chunks, dtype=np.int64).reshape(np.shape(t))
    return min(_next_power_of_two(-(-t // factor)), t)


def _tokens_and_vocab(run):
    shape = run.model
    return run.batch_size * run.seq_len, shape.vocab_size, shape.hidden_size


def applies(run) -> bool:
    """Whether the run's loss setting changes anything: a causal LM with a loss other than transformers' own."""
    return run.loss != "transformers" and run.model.family != "bert" and bool(run.model.vocab_size)


def with_loss(parts, run, head_trains: bool):
    """The exact model's ActivationParts with the loss region and the forward peak at the loss of run.loss instead
    of transformers' default (unchanged for "transformers"; the difference of loss_bytes when the logits need a
    gradient, parts.loss > 0)."""
    if parts is None or not applies(run):
        return parts
    t, vocab, h = _tokens_and_vocab(run)
    sizes = dict(tokens=t, vocab=vocab, hidden=h, element_bytes=parts.element_bytes, head_trains=head_trains)
    new, old = loss_bytes(run.loss, **sizes), loss_bytes("transformers", **sizes)
    grad = parts.loss > 0
    saved = parts.loss + (new.saved - old.saved) * grad
    label = {"chunked": "tiled log-probabilities (TRL): per-token log-sum-exp and log-probability (fp32), labels",
             "fused": "fused linear cross-entropy (Liger): the hidden states' and head's gradients, labels"}[run.loss]
    terms = tuple(term for term in parts.estimate.terms if term[0] != "loss") + (("loss", label, saved),)
    estimate = replace(parts.estimate, loss=saved, terms=terms)
    return replace(parts, estimate=estimate, loss=saved,
                   head_live=parts.head_live + (new.forward_live - old.forward_live) * grad)


def backward_at_loss(run, tokens, vocab, element_bytes, hidden=None, head_trains=False):
    """What backward adds at the loss on top of the saved tensors: 8*t*V fp32 gradients for transformers' loss."""
    if not applies(run):
        return 2 * FP32 * tokens * vocab
    return loss_bytes(run.loss, tokens=tokens, vocab=vocab, hidden=hidden or run.model.hidden_size,
                      element_bytes=element_bytes, head_trains=head_trains).backward_live


def _dpo_sizes(run, t, element_bytes=None):
    shape = run.model
    e = element_bytes if element_bytes is not None else run.recipe.activation_bits // 8
    return dict(tokens=t, vocab=shape.vocab_size, hidden=shape.hidden_size, element_bytes=e)


def dpo_log_probs(run, t):
    """What DPO's policy log-probabilities keep for backward under run.loss ("chunked" or "fused"), over the t = 2bs
    chosen and rejected tokens: the loss's saved tensors with the labels as DPO's gather index (int64, no total
    weight)."""
    saved = loss_bytes(run.loss, head_trains=run.method.head_trains(run.model), **_dpo_sizes(run, t)).saved
    return saved - FP32


def reference_log_probs_live(run, t, element_bytes):
    """Bytes alive at the reference model's log-probabilities (no grad) under run.loss: one tile's or chunk's logits
    and their fp32 copy, and the per-token results (fp32 log-sum-exp and log-probability)."""
    new = loss_bytes(run.loss, head_trains=False, **_dpo_sizes(run, t, element_bytes))
    return new.forward_live - new.saved + 2 * FP32 * t


def check_loss(values: dict) -> None:
    """A run's loss other than transformers' own is modelled on the exact activation model of one GPU's whole model:
    refused by name with the textbook model or split models, whose loss terms assume materialized logits."""
    loss = values["loss"]
    if loss == "transformers" or values["seq_len"] is None:  # no sequence, no activations: nothing to model
        return
    if values["activations"] != "transformers":
        raise validate.FieldError("loss", f"loss={loss!r} is modelled with the exact activation model "
                                  "(activations='transformers'); the textbook model assumes materialized logits")
    split = [name for name in ("tp", "pp", "cp", "ep") if values[name] > 1]
    if split:
        raise validate.FieldError("loss", f"loss={loss!r} is modelled for a whole model on each GPU; with "
                                  f"{', '.join(split)} > 1 the loss is the vocabulary-parallel one: use "
                                  "loss='transformers'")
