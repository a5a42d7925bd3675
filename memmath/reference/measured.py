"""What PyTorch really allocated: the recorded measurements, and the memmath call that predicts each.

validation/measure.py ran two training steps per case on the CPU (torch, transformers and peft;
versions in `measured_metadata()["versions"]`) and recorded the bytes in memmath/data/measured_cpu.json.
This module reads that file without torch:

    >>> import memmath
    >>> cases = memmath.reference.load_measured()             # one row per case
    >>> row = cases.iloc[0]
    >>> m = memmath.reference.predict_case(row)               # the matching training_memory(...) call
    >>> int(m.weights) == int(row.param_bytes)
    True
    >>> predicted_saved_per_layer(row) == list(row.saved_per_layer)   # block by block
    True

Columns, per case:
  case_id              a readable key: shape/precision/optimizer/method/attention/dropout/checkpointing/b,s
  shape                gpt2, llama-mha, llama-gqa, llama-gqa-tied, bert (sizes in family, n_layers, hidden_size,
                       n_heads, n_kv_heads, intermediate_size, vocab_size, max_positions, tied_embeddings, ...)
  precision            fp32 or bf16 (the whole model in that dtype, no autocast)
  group                the report's group: "transformers" (issue 4's grid), "8-bit Adam", ...
  held_out             recorded after the prediction code it tests was written (reported apart)
  optimizer            adamw, sgd_momentum, adam_amsgrad (torch.optim, memmath's names), adam8bit and
                       adamw8bit (bitsandbytes' Adam8bit and AdamW8bit, both memmath's "adam8bit")
  method               full, freeze (frozen_layers: the first k blocks and the embeddings), lora
                       (lora_rank, lora_targets "qv" or "all", adapter_format fp32 or bf16)
  attention            eager or sdpa; dropout True (p=0.1 everywhere the family has dropout) or False
  checkpointing        transformers' gradient checkpointing (non-reentrant, every block)
  batch_size, seq_len
  param_bytes          parameters, each storage once (a tied head is the embedding)
  grad_bytes           gradients after optimizer.step()
  optimizer_state_bytes  every tensor in optimizer.state (moments, momentum buffers, step counters)
  saved_bytes          saved for backward during the forward pass, each storage once, parameters
                       and buffers left out (= saved_per_layer summed + saved_outside_layers)
  saved_per_layer      a list, one entry per block (the block that saved a storage first)
  peak_step1_bytes     highest allocation during the first step: what was alive before it (parameters,
                       buffers, the batch: resident_before_bytes) + the profiler's highest net
                       allocation; peak_step1_forward_bytes, _backward_, _optimizer_step_ per phase
  peak_step2_bytes     the same for the second step (optimizer states alive from the start), per phase too
  peak_bytes           = peak_step2_bytes: the steady-state peak, what peak_memory() predicts by default
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
from functools import lru_cache
from importlib import resources

from ..methods import Freeze, Full, LoRA
from ..models import ModelShape, bert_model, gpt2_model, llama_model

if TYPE_CHECKING:
    import pandas as pd


DATA_FILE = "measured_cpu.json"


@lru_cache(maxsize=4)
def _document(name: str = DATA_FILE) -> dict:
    text = resources.files("memmath.reference").joinpath("data", name).read_text(encoding="utf-8")
    return json.loads(text)


def measured_metadata(name: str = DATA_FILE) -> dict:
    """Everything in the data file but the cases: device, thread count, versions, shapes, dropout p."""
    return {key: value for key, value in _document(name).items() if key != "cases"}


def load_measured(name: str = DATA_FILE) -> pd.DataFrame:
    """The recorded cases as a DataFrame: configuration columns, then measured bytes (see the module doc)."""
    import pandas as pd  # only here: `import memmath` stays numpy-only
    rows = []
    for record in _document(name)["cases"]:
        config = dict(record["config"])
        model = config.pop("model")
        measured = dict(record["measured"])
        detail = measured.pop("optimizer_state_detail", {})
        rows.append({**config, **model, **measured, "optimizer_state_detail": detail})
    return pd.DataFrame(rows)


def load_measured_adapters(name: str = DATA_FILE) -> pd.DataFrame:
    """The Houlsby adapter cases (validation/houlsby.py), with load_measured's columns. memmath
    predicts their parameters, gradients and states (predict_case(row, activations="textbook"));
    its transformers activation model refuses adapters, so their saved bytes and peaks are recorded
    but not predicted."""
    import pandas as pd  # only here: `import memmath` stays numpy-only
    rows = []
    for record in _document(name).get("adapter_cases", []):
        config = dict(record["config"])
        model = config.pop("model")
        rows.append({**config, **model, **record["measured"]})
    return pd.DataFrame(rows)


def load_measured_sharded(name: str = DATA_FILE) -> pd.DataFrame:
    """The sharded cases (validation/sharded.py): configuration columns (engine: fsdp2,
    fsdp2-noreshard or zero1; world_size), then per-rank lists (param_bytes_per_rank, ...)."""
    import pandas as pd  # only here: `import memmath` stays numpy-only
    rows = []
    for record in _document(name).get("sharded_cases", []):
        config = dict(record["config"])
        model = config.pop("model")
        rows.append({**config, **model, **record["measured"]})
    return pd.DataFrame(rows)


def predict_sharded_case(row, rank: int):
    """memmath.training_memory(...) of one rank of a sharded case: sharding="fsdp2" with zero_stage=3
    (FSDP2, resharded after forward or not: the same storage between steps) or "zero_redundancy"
    with zero_stage=1."""
    from ..training import training_memory

    arguments = case_arguments(row)
    engine = str(row["engine"])
    sharding, stage = ("zero_redundancy", 1) if engine == "zero1" else ("fsdp2", 3)
    return training_memory(case_model(row), n_gpus=int(row["world_size"]), zero_stage=stage, sharding=sharding,
                           rank=rank, **arguments)


def case_model(row) -> ModelShape:
    """The ModelShape of a recorded case (the same sizes the measurement built in transformers)."""
    family = row["family"]
    common = dict(n_layers=int(row["n_layers"]), hidden_size=int(row["hidden_size"]), n_heads=int(row["n_heads"]),
                  intermediate_size=int(row["intermediate_size"]), vocab_size=int(row["vocab_size"]),
                  name=str(row["shape"]))
    if family == "gpt2":
        return gpt2_model(max_positions=int(row["max_positions"]), tied_embeddings=bool(row["tied_embeddings"]),
                          **common)
    if family == "llama":
        return llama_model(n_kv_heads=int(row["n_kv_heads"]), tied_embeddings=bool(row["tied_embeddings"]), **common)
    if family == "bert":
        return bert_model(max_positions=int(row["max_positions"]), type_vocab_size=int(row["type_vocab_size"]),
                          num_labels=int(row["num_labels"]), **common)
    raise ValueError(f"family must be gpt2, llama or bert; got {family!r}")


def case_method(row):
    """Full(), Freeze(frozen_layers=k) or LoRA(rank, targets, adapter_format) for a recorded case."""
    method = row["method"]
    if method == "full":
        return Full()
    if method == "freeze":
        # validation/measure.py freezes the embeddings and the first k blocks; the final norm and an
        # untied head train (Freeze's defaults); BERT's pooler and classifier train.
        return Freeze(frozen_layers=int(row["frozen_layers"]))
    if method == "lora":
        # "all": every linear matrix in the blocks (GPT-2 and BERT have no gate; peft's lists in measure.py).
        targets = ("q", "v") if row["lora_targets"] == "qv" else "all"
        return LoRA(rank=int(row["lora_rank"]), targets=targets, adapter_format=str(row["adapter_format"]))
    if method == "houlsby":
        # validation/houlsby.py: two adapters per block in the model's dtype; only they train.
        from ..methods import Adapters

        return Adapters(bottleneck=int(row["bottleneck"]))
    raise ValueError(f"method must be full, freeze, lora or houlsby; got {method!r}")


def case_arguments(row, activations: str = "transformers") -> dict:
    """The keyword arguments of memmath.training_memory that describe a recorded case."""
    # bitsandbytes' Adam8bit and AdamW8bit keep the same states: memmath's "adam8bit" for both.
    optimizer = {"adamw8bit": "adam8bit"}.get(str(row["optimizer"]), str(row["optimizer"]))
    return dict(precision=str(row["precision"]), optimizer=optimizer, method=case_method(row),
                batch_size=int(row["batch_size"]), seq_len=int(row["seq_len"]),
                checkpointing=bool(row["checkpointing"]), attention=str(row["attention"]),
                dropout=bool(row["dropout"]), activations=activations, device="cpu")


def predict_case(row, activations: str = "transformers"):
    """memmath.training_memory(...) for a recorded case: the prediction to hold against its measurement."""
    from ..training import training_memory

    return training_memory(case_model(row), **case_arguments(row, activations))


def predict_peak_case(row, step: str = "steady"):
    """memmath.peak_memory(..., step=step) for a recorded case. The measured counterpart is
    row.peak_step2_bytes (= row.peak_bytes) for "steady" and row.peak_step1_bytes for "first"."""
    from ..peak import peak_memory

    arguments = case_arguments(row)
    del arguments["activations"]
    return peak_memory(case_model(row), step=step, **arguments)


def predicted_saved_per_layer(row) -> list[int]:
    """Bytes memmath predicts each block saves for backward, block by block, as the measurement books them.

    The counterpart of `row.saved_per_layer` (a list, input side first), from the same
    activations="transformers" estimate as predict_case: blocks before the first one that stores
    keep 0 (frozen blocks whose input needs no gradient), then the first storing block (which may
    keep less when its input needs no gradient), then one `per_layer` each. The measurement files a
    storage under the first block that saves it, so the tables every block shares (LLaMA's rotary
    cos/sin, GPT-2's checkpointed attention mask), which the estimate counts outside the blocks,
    are added to the first storing block here.
    """
    from ..hf_activations import activation_parts
    from ..recipes import get_recipe

    arguments = case_arguments(row)
    parts = activation_parts(case_model(row), recipe=get_recipe(arguments["precision"]), method=arguments["method"],
                             seq_len=arguments["seq_len"], batch_size=arguments["batch_size"],
                             dropout=arguments["dropout"], attention=arguments["attention"],
                             checkpointing=arguments["checkpointing"], device=arguments["device"])
    estimate = parts["estimate"]
    n_layers = int(row["n_layers"])
    storing, frozen_storing = int(estimate.layers_storing), int(estimate.frozen_layers_storing)
    blocks = [0] * (n_layers - storing - frozen_storing) + [int(estimate.frozen_per_layer)] * frozen_storing
    trained = [int(estimate.per_layer)] * storing
    if trained and estimate.first_layer is not None:
        trained[0] = int(estimate.first_layer)
    blocks += trained
    first = next((i for i, n in enumerate(blocks) if n), None)
    if first is not None:
        blocks[first] += int(parts["tables"])
    return blocks
