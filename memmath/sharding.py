"""What one rank stores when an engine shards a run, tensor by tensor, as the engine does it.

training_memory(..., sharding=...) picks one:

- "even" (the default): the ZeRO paper's division (Rajbhandari et al. 2020, section 5): each
  sharded part divided by the number of GPUs, rounded up.
- "fsdp2": PyTorch FSDP2's fully_shard (zero_stage=3), as torch/distributed/fsdp/_fully_shard/
  _fsdp_param.py stores it: every tensor is cut along its first dimension into torch.chunk pieces
  of ceil(d0 / n) rows; rank r keeps piece r in a buffer padded to ceil(d0 / n) rows (so every
  rank holds the same padded weights), its gradient is a view into the padded reduce-scatter
  output, and the optimizer's states are made like the unpadded local piece (a rank past the
  last row keeps empty states); every tensor keeps its 4-byte step on every rank.
- "zero_redundancy": torch.distributed.optim.ZeroRedundancyOptimizer (zero_stage=1): whole
  tensors are assigned to ranks, largest first (a stable sort), each to the rank with the fewest
  elements so far (the lowest such rank); every rank keeps every weight and gradient and the
  states of its own tensors.

Measured: validation/sharded.py runs both over gloo with 2 and 4 processes on one CPU.
"""

from __future__ import annotations

import heapq

from .models import ModelShape

SHARDINGS = ("even", "fsdp2", "zero_redundancy")


def torch_tensors(shape: ModelShape) -> list[tuple]:
    """The shapes of model.parameters() in PyTorch's order, each tied tensor once."""
    groups = torch_groups(shape)
    # Gemma 4 and 3n register their per-layer input embedding (and 3n its AltUp projections) after the final norm
    late = tuple(getattr(shape.architecture, "late_embeddings", ()))
    early = [t for t in groups["embeddings"] if not t[0].startswith(late)]
    after_norm = [t for t in groups["embeddings"] if t[0].startswith(late)]
    return groups["vision"] + early + groups["blocks"] + groups["final_norm"] + after_norm + groups["head"]


def torch_groups(shape: ModelShape) -> dict:
    """torch_tensors by place: "vision", "embeddings", "blocks" (every block's in turn), "final_norm", "head"; and
    "per_block", each block's (name, dims) list."""
    record = shape.architecture

    def group(name, of=shape):
        out = []
        for t in of.tensors(name):
            dims = tuple(int(d) for d in t.shape)
            if record is not None and record.is_conv1d(t.name):  # GPT-2's Conv1D stores its weight (in, out)
                dims = dims[::-1]
            out.append((t.name, dims))
        return out

    def block(layout):
        layer = group("layer", layout)
        if record is not None and record.norms_last:  # LlamaDecoderLayer registers self_attn, mlp, then the norms
            norms = [t for t in layer if "layernorm" in t[0]]
            layer = [t for t in layer if "layernorm" not in t[0]] + norms
        return layer

    layouts = {id(layout): block(layout) for layout, _ in shape.layouts()}
    per_block = [None] * int(shape.n_layers)
    for layout, blocks in shape.layouts():
        for i in blocks:
            per_block[i] = layouts[id(layout)]
    # A vision-language model's ...ForConditionalGeneration registers its vision tower and projector before the
    # language model (group "vision", in that order; empty for a text model).
    return {"vision": group("vision"), "embeddings": group("embeddings"),
            "blocks": [t for tensors in per_block for t in tensors], "per_block": per_block,
            "final_norm": group("final_norm"), "head": group("head")}


def _rest(dims):
    result = 1
    for d in dims[1:]:
        result *= d
    return result


def fsdp2_elements(dims, n_ranks, rank) -> tuple[int, int]:
    """(padded elements every rank stores, unpadded elements of `rank`'s piece) of one tensor."""
    rows = -(-dims[0] // n_ranks)
    mine = max(0, min(rows, dims[0] - rank * rows))
    return rows * _rest(dims), mine * _rest(dims)


def zero_redundancy_assignment(sizes, n_ranks) -> list[int]:
    """The rank ZeroRedundancyOptimizer gives each tensor (sizes in elements, in parameters() order).

    Largest first (a stable sort), each to the rank with the fewest elements so far, the lowest such
    rank on a tie, as torch does it; in O(tensors x log tensors) whatever the number of ranks. The
    ranks given a tensor so far sit in a heap of (elements, rank); every other rank holds none, and
    the lowest of those is `fresh` (they are taken in order), so the least loaded rank is the smaller
    of the heap's top and (0, fresh), compared as tuples: fewest elements, then lowest rank.
    """
    order = sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True)  # stable, largest first
    owner, used, fresh = [0] * len(sizes), [], 0
    for i in order:
        if fresh < n_ranks and (not used or (0, fresh) < used[0]):
            load, rank = 0, fresh
            fresh += 1
        else:
            load, rank = heapq.heappop(used)
        owner[i] = rank
        heapq.heappush(used, (load + sizes[i], rank))
    return owner


def sharded_parts(shape: ModelShape, *, sharding, n_gpus, rank, weight_bits, grad_bits, state_bits, states,
                  step_bytes) -> dict:
    """Weights, gradients and optimizer states of `rank` for full finetuning (every tensor trains)."""
    tensors = torch_tensors(shape)
    weights = gradients = state_bytes = 0
    if sharding == "fsdp2":
        for _, dims in tensors:
            padded, mine = fsdp2_elements(dims, n_gpus, rank)
            weights += padded * weight_bits // 8
            gradients += padded * grad_bits // 8
            state_bytes += states * mine * state_bits // 8 + step_bytes
    else:
        sizes = [_rest(dims) * dims[0] for _, dims in tensors]
        owner = zero_redundancy_assignment(sizes, n_gpus)
        weights = sum(sizes) * weight_bits // 8
        gradients = sum(sizes) * grad_bits // 8
        state_bytes = sum(states * n * state_bits // 8 + step_bytes for n, r in zip(sizes, owner) if r == rank)
    return {"weights": weights, "gradients": gradients, "optimizer_states": state_bytes}
