"""training_memory: the bytes one GPU holds in a training step, whatever the run's layout.

One GPU or data parallelism (ZeRO, FSDP2, ZeroRedundancyOptimizer): memmath/training.py's arithmetic. A model
split by tensor, pipeline, context or expert parallelism: one rank's parts (memmath/parallel.py), which start
from the whole model's. The article's example: 7B parameters in pure 16-bit with Adam keep 2 + 2 + 4 = 8 bytes
per parameter, 56 GB before activations.
"""

from __future__ import annotations

from .parallel import rank_memory
from .run import as_run
from .training import TrainingMemory


def training_memory(model, **settings) -> TrainingMemory:
    """Bytes per GPU for one training step, as a TrainingMemory breakdown: `Run(model, **settings)`'s.

    model: a Run, or a ModelShape, a preset name or a plain parameter count with Run's keyword
    settings (precision, optimizer, method, batch_size, seq_len, checkpointing, attention, dropout,
    activations, device, n_gpus, zero_stage, sharding, rank; see memmath.run for each default and
    its reason). The result's `run` is the run it answers, every default resolved.

    n_gpus with zero_stage 1/2/3 (FSDP full sharding = 3) divides optimizer states and master
    weights / + gradients / + weights by n_gpus (Rajbhandari et al. 2020, ZeRO, section 5).
    batch_size is the micro-batch each GPU processes (data parallelism does not shard activations).
    batch_size and seq_len may be numpy arrays; results broadcast. sharding "fsdp2" (PyTorch's
    fully_shard, zero_stage=3: every tensor cut along its first dimension, padded) or
    "zero_redundancy" (torch's ZeroRedundancyOptimizer, zero_stage=1: whole tensors' states per
    rank) give what GPU `rank` stores, tensor by tensor, for Full() in pure fp32/16-bit with
    torch's optimizers (memmath/sharding.py; measured over gloo by validation/sharded.py).

    Per trainable set of Nt parameters (bits from the recipe, or the adapters' own format):
    gradients ceil(Nt x grad_bits / 8), master weights ceil(Nt x 32 / 8) when the recipe keeps an
    fp32 copy of 16-bit weights, optimizer states ceil(states x Nt x state_bits / 8) (+ 4 B per
    tensor for Adam/AdamW/Adafactor's step, + 4 B per 256 values for 8-bit Adam's constants;
    Adafactor: rows + columns per matrix). Weights are the method's stored bytes. Every part is an
    int (an int64 array in a sweep); TrainingMemory.total is their sum.
    """
    return rank_memory(as_run(model, **settings))
