"""A training step's memory over time: peak_memory's moments in the order they happen, stacked by what holds them.

The Ultra-Scale Playbook draws a step's allocated memory as it rises through the forward pass, falls through
the backward pass and steps up again at the optimizer. memmath's peak model (memmath/peak.py) already
estimates the bytes at each moment that can be the highest; a timeline is those moments in time order, each
split into weights, inputs and buffers, optimizer states, gradients, saved activations and working memory
(the temporaries alive only at that moment), with the resting points before and after the step. Its highest
point is the step's peak, the same number the planner's verdict reads: peak_memory's, or for a rank of
DistributedDataParallel, FSDP2 or ZeroRedundancyOptimizer the sharded peak (memmath/sharded_peak.py: the engine's
buckets, shards and gathered blocks at each moment), as memmath/decision.py chooses it.
"""

from __future__ import annotations


from . import validate
from .memory import training_memory
from .peak import peak_memory, why_no_peak
from .run import as_run
from .sharded_peak import is_ddp, sharded_peak, why_no_sharded_peak
from .values import frozen

CATEGORIES = ("weights", "inputs and buffers", "optimizer states", "gradients", "saved activations",
              "working memory")


@frozen
class TimelinePoint:
    """One moment of the step: where it is (phase, label) and its bytes by category."""

    phase: str  # "before", one of peak.PHASES, or "after"
    label: str
    parts: dict

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def short(self) -> str:
        """A name short enough for an axis: "forward, at the loss", "optimizer step", "before the step"."""
        if self.phase in ("before", "after"):
            return f"{self.phase} the step"
        return _SHORT[_when(self.phase, self.label)]


@frozen
class Timeline:
    points: tuple
    step: str

    @property
    def peak(self) -> TimelinePoint:
        return max(self.points, key=lambda p: p.total)

    def frame(self):
        """One row per point and category (for a stacked chart): order, phase, moment, category, bytes."""
        import pandas as pd  # only here: `import memmath` stays numpy-only

        return pd.DataFrame([{"order": i, "when": p.short, "phase": p.phase, "moment": p.label, "category": c,
                              "rank": CATEGORIES.index(c), "bytes": p.parts[c]}
                             for i, p in enumerate(self.points) for c in CATEGORIES])


# The moments of peak.py in the order a step reaches them: backward runs from the loss to the embeddings, and
# with checkpointing each block is recomputed just before its backward (so the last block's recomputation
# comes before the first block's backward).
# Each moment peak.py prices, by the start of "phase:label", in the order a step reaches them (the more specific start
# first where two share one), and its name on an axis.
_ORDER = ("forward:reference forward", "forward:in a block before the first that stores", "forward:in the last block",
          "forward:at the loss", "backward:at the loss", "backward:entering the last", "backward:recomputing the last",
          "backward:in the last block's recomputed", "backward:recomputing the first",
          "backward:in the first block's recomputed", "backward:in the first", "backward:at the embeddings",
          "optimizer_step:")
_SHORT = ("reference forward (DPO)", "forward, a block storing nothing", "forward, last block", "forward, at the loss",
          "backward, at the loss", "backward, last block", "recomputing the last block", "last block's recomputed backward",
          "recomputing the first block", "first block's recomputed backward", "backward, first block",
          "backward, embeddings", "optimizer step")


def _when(phase: str, label: str) -> int:
    key = f"{phase}:{label}"
    return next((i for i, start in enumerate(_ORDER) if key.startswith(start)), len(_ORDER))


def _uses_sharded_peak(run) -> bool:
    """Whether the verdict reads the sharded peak for this run (memmath/decision.py's rule): a DistributedDataParallel
    rank, or a sharded one that peak_memory does not model, where sharded_peak models it."""
    return ((bool(why_no_peak(run)) and run.sharded) or is_ddp(run)) and not why_no_sharded_peak(run)


def step_timeline(model, *, step="steady", **settings) -> Timeline:
    """The step's memory at each modelled moment, in time order (a Run, or a model with Run's settings).

    A rank of DistributedDataParallel, FSDP2 or ZeroRedundancyOptimizer is drawn from the sharded peak, as its verdict
    is judged. Raises the same ValueError as peak_memory (or sharded_peak) where no peak is modelled; a sweep
    (arrays) is refused.
    """
    run = as_run(model, **settings)
    if run.is_sweep:
        raise validate.FieldError("seq_len", "step_timeline draws one run: give seq_len, batch_size and the method's "
                                  "sizes as single values, not arrays")
    sharded = _uses_sharded_peak(run)
    peak = sharded_peak(run, step=step) if sharded else peak_memory(run, step=step)
    resting = dict.fromkeys(CATEGORIES, 0)
    resting["weights"] = peak.breakdown[0]["weights"]
    resting["inputs and buffers"] = peak.breakdown[0]["inputs and buffers"]  # DDP's buckets as a copy included
    if sharded:  # between steps a rank holds its own weights (FSDP2: its shards; no block gathered)
        own = training_memory(run)
        resting["weights"] = int(own.weights) + int(own.quantization_constants)
        if is_ddp(run) and run.gradient_as_bucket_view:  # the buckets are the gradients, alive from the wrapping on
            resting["gradients"] = peak.breakdown[0]["gradients"]
    before = dict(resting)
    first_moment = peak.breakdown[0]
    if step == "steady":  # the states made by the previous step's optimizer are alive before this one
        before["optimizer states"] = first_moment["optimizer states"]
    after = dict(resting)
    last = peak.breakdown[-1]
    after["optimizer states"] = last["optimizer states"]  # zero_grad(set_to_none=True) frees the gradients
    points = [TimelinePoint("before", "before the step: weights, the batch (and the states of the previous step)",
                            before)]
    moments = sorted(zip(peak.moments, peak.breakdown), key=lambda m: _when(m[0][0], m[0][1]))
    points += [TimelinePoint(phase, label, dict(parts)) for (phase, label, _), parts in moments]
    points.append(TimelinePoint("after", "after the step: the gradients freed, the states kept", after))
    return Timeline(points=tuple(points), step=step)
