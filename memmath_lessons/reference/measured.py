"""What PyTorch really allocated: the recorded measurements, and the memmath call that predicts each.

validation/measure.py ran two training steps per case on the CPU (torch, transformers and peft;
versions in `measured_metadata()["versions"]`) and recorded the bytes in memmath/data/measured_cpu.json.
This module reads that file without torch:

    >>> import memmath
    >>> cases = memmath_lessons.reference.load_measured()             # one row per case
    >>> row = cases.iloc[0]
    >>> m = memmath_lessons.reference.predict_case(row)               # the matching training_memory(...) call
    >>> int(m.weights) == int(row.param_bytes)
    True
    >>> predicted_saved_per_layer(row) == list(row.saved_per_layer)   # block by block
    True

Columns, per case:
  case_id              a readable key: shape/precision/optimizer/method/attention/dropout/checkpointing/b,s
  shape                gpt2, llama-mha, llama-gqa, llama-gqa-tied, bert (sizes in family, n_layers, hidden_size,
                       n_heads, n_kv_heads, intermediate_size, vocab_size, max_positions, tied_embeddings, ...)
  precision            fp32 or bf16 (the whole model in that dtype, no autocast)
  group                the report's group: "transformers" (the first grid: GPT-2, LLaMA and BERT layouts), "8-bit Adam", ...
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
  held_out             True for a case measured only after the estimates were written (the case's own
                       "held_out" flag in the data file, else its shape is one of HELD_OUT_SHAPES)

Other groups have their own loaders, with these columns and their own: load_measured_adapters()
(Houlsby adapters), load_measured_sharded() (FSDP2 and ZeRO-1, per rank; predict_sharded_case and,
for ZeRO-1, predict_sharded_peak), load_measured_quantized() (QLoRA on bitsandbytes' 4-bit and
8-bit layers; predict_case builds QLoRA(..., layout="bitsandbytes")) and load_measured_amp()
(autocast). measured_qlora() tables recorded QLoRA runs beside memmath's prediction.
load_measured_moe_lora() reads its own file (measured_moe_lora.json): LoRA on the routers and routed
experts of mixtures of experts (validation/moe_lora.py); load_measured_sliding() its own
(measured_sliding.json): sliding-window models below, at and past the window (validation/sliding.py).
load_measured_grad_accum() reads measured_grad_accum.json: gradient accumulation over k micro-batches
(validation/grad_accum.py).
"""

from __future__ import annotations

from dataclasses import replace

from typing import TYPE_CHECKING

import json
from functools import lru_cache
from importlib import resources

from memmath import validate
from memmath.methods import Freeze, Full, LoRA
from memmath.models import ModelShape, bert_model, gpt2_model, llama_model

if TYPE_CHECKING:
    import pandas as pd


DATA_FILE = "measured_cpu.json"
# The wider shapes validation/measure.py (its HELD_OUT) measured only after the estimates were
# written: their cases test the model rather than having shaped it.
HELD_OUT_SHAPES = ("gpt2-wide", "llama-wide", "bert-wide")


def data_files() -> tuple[str, ...]:
    """The names of the data files shipped in memmath_lessons/reference/data (the only names read)."""
    folder = resources.files("memmath_lessons.reference").joinpath("data")
    return tuple(sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".json") and entry.is_file()))


def _document(name: str = DATA_FILE) -> dict:
    return _read_document(_shipped(name))


def _shipped(name) -> str:
    """name when it is a shipped file's own name: never a path, so nothing outside the data folder is read."""
    shipped = data_files()
    if not isinstance(name, str):
        raise TypeError(f"name must be the name of a shipped data file ({', '.join(shipped)}); "
                        f"got {validate.describe(name)}")
    if name not in shipped:
        raise ValueError(f"name must be one of the shipped data files: {', '.join(shipped)}; "
                         f"got {validate.describe(name)}")
    return name


@lru_cache(maxsize=4)
def _read_document(name: str) -> dict:
    text = resources.files("memmath_lessons.reference").joinpath("data", name).read_text(encoding="utf-8")
    return json.loads(text)


def measured_metadata(name: str = DATA_FILE) -> dict:
    """Everything in the data file but the cases: device, thread count, versions, shapes, dropout p."""
    return {key: value for key, value in _document(name).items() if key != "cases"}


# Recorded cases that memmath refuses by name (measured, held out, then found outside what it models),
# with the words of the refusal: load_measured leaves them out unless refused=True.
REFUSED_CASES: dict[str, str] = {
    # Empty: every recorded case is modelled. Qwen3-MoE with measure.py's "all" list (which peft 0.21 maps onto the
    # routed experts' 3-D parameters: 52,224 trainable, 10,752 of them in attention) is counted by
    # ModelShape.lora_adapters and hf_activations._wrapped_weight, written without running it again.
}


def load_measured(name: str = DATA_FILE, refused: bool = False) -> pd.DataFrame:
    """The recorded cases as a DataFrame: configuration columns, then measured bytes (see the module doc).

    Cases memmath refuses by name (REFUSED_CASES) are left out; refused=True keeps them too.
    """
    import pandas as pd  # only here: `import memmath` stays numpy-only
    refused = validate.flag("refused", refused)
    rows = []
    for record in _document(name)["cases"]:
        if not refused and record["config"]["case_id"] in REFUSED_CASES:
            continue
        config = dict(record["config"])
        model = config.pop("model")
        measured = dict(record["measured"])
        detail = measured.pop("optimizer_state_detail", {})
        held_out = bool(config.pop("held_out", config["shape"] in HELD_OUT_SHAPES))
        rows.append({**config, **model, **measured, "optimizer_state_detail": detail, "held_out": held_out})
    return pd.DataFrame(rows)


_ROW_HELP = "a row of load_measured() (a pandas Series or a dict with its columns)"


def _field(row, key):
    """row[key] for a recorded case; ValueError naming the column when it is missing."""
    if not hasattr(row, "__getitem__") or isinstance(row, (str, bytes)):
        raise TypeError(f"row must be {_ROW_HELP}; got {validate.describe(row)}")
    try:
        return row[key]
    except (KeyError, IndexError, TypeError):
        raise ValueError(f"row is missing the column {key!r} (row must be {_ROW_HELP})") from None


def _count(row, key, low=1, high=validate.MAX_DIM):
    return validate.count(f"row column {key!r}", _field(row, key), low=low, high=high, scalar=True)


def _flag(row, key):
    return validate.flag(f"row column {key!r}", _field(row, key))


def _text(row, key):
    value = _field(row, key)
    if not isinstance(value, str):
        raise TypeError(f"row column {key!r} must be a string; got {validate.describe(value)}")
    return value


MOE_LORA_FILE = "measured_moe_lora.json"


def load_measured_moe_lora(name: str = MOE_LORA_FILE) -> pd.DataFrame:
    """The LoRA cases on mixtures of experts (validation/moe_lora.py: Mixtral, Qwen2-MoE and Qwen3-MoE with peft
    0.21's adapters on the router and the routed experts, recorded after memmath's model of them was written,
    all held out), with load_measured's columns; lora_targets is "all-linear" (peft's string, memmath's "all")
    or memmath target names joined by "+". predict_case(row), predicted_saved_per_layer(row) and
    predict_peak_case(row) replay them."""
    return load_measured(name)


SLIDING_FILE = "measured_sliding.json"


def load_measured_sliding(name: str = SLIDING_FILE) -> pd.DataFrame:
    """The sliding-window cases (validation/sliding.py: Mistral, Phi-3, Gemma 2, Gemma 3 and Qwen2 with
    use_sliding_window, a 64-token window, sequences below, at and past it; SDPA and eager; recorded after memmath's
    model of the masks was written, all held out), with load_measured's columns. predict_case(row),
    predicted_saved_per_block(row) and predict_peak_case(row) replay them."""
    return load_measured(name)


def predicted_saved_per_block(row) -> list[int]:
    """predicted_saved_per_layer(row), with what blocks of the other layer type save more past the sliding window
    (their SDPA mask and repeated k and v, which the estimate counts with the shared tables: ActivationParts.
    block_extras) booked in the blocks that save it, as the measurement books it."""
    from memmath.hf_activations import activation_parts
    from memmath.recipes import get_recipe

    blocks = predicted_saved_per_layer(row)
    arguments = case_arguments(row)
    extras = activation_parts(case_model(row), recipe=get_recipe(arguments["precision"]), method=arguments["method"],
                              seq_len=arguments["seq_len"], batch_size=arguments["batch_size"],
                              dropout=arguments["dropout"], attention=arguments["attention"],
                              checkpointing=arguments["checkpointing"], device=arguments["device"],
                              padded=arguments["padded"], packed=arguments["packed"]).block_extras
    if extras and sum(extras):
        first = next(i for i, n in enumerate(blocks) if n)  # where predicted_saved_per_layer put the tables
        blocks[first] -= sum(extras)
        blocks = [n + int(extra) for n, extra in zip(blocks, extras)]
    return blocks


def load_measured_adapters(name: str = DATA_FILE) -> pd.DataFrame:
    """The Houlsby adapter cases (validation/houlsby.py), with load_measured's columns. predict_case(row)
    predicts their parameters, gradients, states and saved activations (the exact activation model
    traces the adapters), predict_peak_case(row) each step's peak."""
    return _case_frame(name, "adapter_cases")


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
    from memmath.memory import training_memory

    arguments = case_arguments(row)
    engine = str(row["engine"])
    sharding, stage = ("zero_redundancy", 1) if engine == "zero1" else ("fsdp2", 3)
    return training_memory(case_model(row), n_gpus=int(row["world_size"]), zero_stage=stage, sharding=sharding,
                           rank=rank, **arguments)


def predict_sharded_peak(row, rank: int, step: str = "steady") -> dict:
    """Predicted peak of one rank of a ZeRO-1 case (engine "zero1"), per phase and in all: a dict with
    forward, backward, optimizer_step and total bytes. The measured counterparts are the case's
    peak_step1_*_bytes_per_rank (step="first") and peak_step2_*_bytes_per_rank (step="steady").

    ZeroRedundancyOptimizer keeps every weight and gradient on every rank, so a rank's step is the
    single-GPU step (peak_memory) with the rank's own optimizer states in place of all of them, and
    the optimizer's temporaries of its own tensors: torch's single-tensor Adam on the CPU, 2 x a
    tensor + the previous one, over the rank's tensors in parameters() order (memmath/peak.py).
    FSDP2 ranks are refused: their all-gather and reduce-scatter buffers are not modelled (measured,
    their per-rank peaks also vary by up to 25% from run to run with the collectives' timing).
    """
    from memmath.peak import STEPS, optimizer_transient
    from memmath.recipes import get_optimizer, get_recipe
    from memmath.sharding import torch_tensors, zero_redundancy_assignment

    engine = _text(row, "engine")
    if engine != "zero1":
        raise ValueError(f"row column 'engine' must be zero1 for predict_sharded_peak (FSDP2's collective buffers "
                         f"are not modelled); got {validate.describe(engine)}")
    world = _count(row, "world_size", low=2, high=validate.MAX_GPUS)
    rank = validate.count("rank", rank, low=0, high=world - 1, scalar=True)
    step = validate.choice("step", step, STEPS)
    shape = case_model(row)
    arguments = case_arguments(row)
    single = predict_peak_case(row, step=step)
    everything = predict_case(row)
    mine = predict_sharded_case(row, rank)
    others = int(everything.optimizer_states) - int(mine.optimizer_states)  # the states other ranks keep
    recipe, opt = get_recipe(arguments["precision"]), get_optimizer(arguments["optimizer"])
    transient_all, _ = optimizer_transient(shape, arguments["method"], recipe, opt, "cpu")
    sizes = [n for n in (_numel(dims) for _, dims in torch_tensors(shape))]
    owner = zero_redundancy_assignment(sizes, world)
    transient_mine, previous = 0, 0
    for n, r in zip(sizes, owner):
        if r == rank and opt.name in ("adam", "adamw", "adam_amsgrad", "adamw_amsgrad"):
            size = validate.ceil_div(n * recipe.weight_bits, 8)
            transient_mine, previous = max(transient_mine, 2 * size + previous), size
    kept = others if step == "steady" else 0
    phases = {"forward": int(single.forward) - kept, "backward": int(single.backward) - kept,
              "optimizer_step": int(single.optimizer_step) - others - int(transient_all) + transient_mine}
    return {**phases, "total": max(phases.values())}


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def case_model(row) -> ModelShape:
    """The ModelShape of a recorded case (the same sizes the measurement built in transformers)."""
    family = _text(row, "family")
    common = dict(n_layers=_count(row, "n_layers", high=validate.MAX_LAYERS), hidden_size=_count(row, "hidden_size"),
                  n_heads=_count(row, "n_heads"), intermediate_size=_count(row, "intermediate_size"),
                  vocab_size=_count(row, "vocab_size", high=validate.MAX_VOCAB), name=_text(row, "shape"))
    if isinstance(row.get("arch"), str):  # shapes recorded as config fields: read as from_hf_config reads the config
        return replace(_case_from_config(row), name=_text(row, "shape"))
    # validation/measure.py builds every config with use_cache=False unless the shape's hf_config says otherwise.
    if family == "gpt2":
        return replace(gpt2_model(max_positions=_count(row, "max_positions", high=validate.MAX_SEQ),
                                  tied_embeddings=_flag(row, "tied_embeddings"), **common), use_cache=_use_cache(row))
    if family == "llama":
        return replace(llama_model(n_kv_heads=_count(row, "n_kv_heads"), tied_embeddings=_flag(row, "tied_embeddings"),
                                   **common), use_cache=_use_cache(row))
    if family == "bert":
        return bert_model(max_positions=_count(row, "max_positions", high=validate.MAX_SEQ),
                          type_vocab_size=_count(row, "type_vocab_size", low=0),
                          num_labels=_count(row, "num_labels", low=0), **common)
    raise ValueError(f"row column 'family' must be gpt2, llama or bert; got {validate.describe(family)}")


def _use_cache(row) -> bool:
    """The use_cache a recorded case ran with: validation/measure.py passes use_cache=False to every config
    unless the shape's hf_config sets it (the use_cache cases)."""
    more = row.get("hf_config")
    value = more.get("use_cache", False) if isinstance(more, dict) else False
    return validate.flag("row column 'hf_config' field 'use_cache'", value)


def _case_from_config(row) -> ModelShape:
    """The config.json validation/measure.py builds for a shape with a model_type (its _hf_config)."""
    from memmath.architectures import SUPPORTED_MODEL_TYPES
    from memmath.config_reader import from_hf_config

    n = lambda key: _count(row, key, high=validate.MAX_VOCAB if key == "vocab_size" else validate.MAX_DIM)  # noqa: E731
    arch = validate.choice("row column 'arch'", _text(row, "arch"), SUPPORTED_MODEL_TYPES)
    if _text(row, "family") == "bert":  # RoBERTa for sequence classification (RobertaConfig)
        labels = _count(row, "num_labels", low=0)
        return from_hf_config(dict(
            model_type=arch, num_hidden_layers=_count(row, "n_layers", high=validate.MAX_LAYERS),
            hidden_size=n("hidden_size"), num_attention_heads=n("n_heads"), intermediate_size=n("intermediate_size"),
            vocab_size=n("vocab_size"), max_position_embeddings=_count(row, "max_positions", high=validate.MAX_SEQ),
            type_vocab_size=_count(row, "type_vocab_size", low=0), num_labels=labels,
            architectures=["RobertaForSequenceClassification"] if labels else []))
    tied = _flag(row, "tied_embeddings")
    if _text(row, "family") == "gpt2":
        act = row.get("hidden_act")
        return from_hf_config(dict(model_type=arch, n_layer=_count(row, "n_layers", high=validate.MAX_LAYERS),
                                   n_embd=n("hidden_size"), n_head=n("n_heads"), n_inner=n("intermediate_size"),
                                   vocab_size=n("vocab_size"), n_positions=n("max_positions"), tie_word_embeddings=tied,
                                   use_cache=_use_cache(row), activation_function=_text(row, "hidden_act") if isinstance(act, str) and act
                                   else "gelu_new"))
    extra = {"use_cache": False}  # measure.py's default; a shape's hf_config may set it (below)
    for key in ("sliding_window", "head_dim"):  # columns only some shapes have (NaN in the others)
        value = row.get(key)
        if isinstance(value, (int, float)) and value == value:
            extra[key] = _count(row, key)
    more = row.get("hf_config")  # further config.json fields of a shape, passed as recorded (NaN where none)
    if isinstance(more, dict):
        extra.update(more)
    return from_hf_config(dict(model_type=arch, num_hidden_layers=_count(row, "n_layers", high=validate.MAX_LAYERS),
                               hidden_size=n("hidden_size"), num_attention_heads=n("n_heads"),
                               num_key_value_heads=n("n_kv_heads"), intermediate_size=n("intermediate_size"),
                               vocab_size=n("vocab_size"), tie_word_embeddings=tied, **extra))


# measure.py's "all" is a list of module names (its PEFT_TARGETS), not peft's "all-linear": on the mixtures of
# experts peft 0.21 resolves that list to these (utils/transformers_weight_conversion.py): Mixtral has no module
# of the MLP names; Qwen2-MoE's are its shared expert's (qwen2_moe is not converted); Qwen3-MoE's
# gate_proj/up_proj/down_proj are converted onto the routed experts (and "gate", its router, is not in the list).
_LIST_ALL = {"mixtral": ("q", "k", "v", "o"), "qwen2_moe": ("q", "k", "v", "o", "gate", "up", "down"),
             "qwen3_moe": ("q", "k", "v", "o", "experts")}


def _case_targets(row):
    """The LoRA targets of a recorded case: "qv"; "all", the module-name list of validation/measure.py;
    "all-linear", peft's target_modules="all-linear" (memmath's "all"); or memmath target names joined by "+"
    (validation/moe_lora.py)."""
    from memmath.models import LORA_TARGETS

    targets = _text(row, "lora_targets")
    if targets == "qv":
        return ("q", "v")
    if targets == "all":
        arch = row.get("arch")
        return _LIST_ALL.get(arch, "all") if isinstance(arch, str) else "all"
    if targets == "all-linear":
        return "all"
    names = tuple(targets.split("+"))
    for name in names:
        validate.choice("row column 'lora_targets'", name, ("qv", "all", "all-linear") + LORA_TARGETS)
    return names


def case_method(row):
    """Full(), Freeze(frozen_layers=k) or LoRA(rank, targets, adapter_format) for a recorded case; a preference case
    (validation/preference.py: a `reference` column) gets DPO(base=that method, reference=...)."""
    reference = row.get("reference") if hasattr(row, "get") else None
    if isinstance(reference, str):
        from memmath.preference import DPO

        base = {key: value for key, value in dict(row).items() if key != "reference"}
        return DPO(base=case_method(base), reference=reference, beta=float(row.get("beta", 0.1)))
    method = _text(row, "method")
    if method == "full":
        return Full()
    if method == "freeze":
        # validation/measure.py freezes the embeddings and the first k blocks; the final norm and an
        # untied head train (Freeze's defaults); BERT's pooler and classifier train.
        return Freeze(frozen_layers=_count(row, "frozen_layers", low=0, high=validate.MAX_LAYERS))
    if method == "lora":
        targets = _case_targets(row)
        if isinstance(row.get("quant_type"), str):  # validation/quantized.py: a bitsandbytes base under peft's LoRA
            from memmath.methods import QLoRA

            return QLoRA(rank=_count(row, "lora_rank", high=2**16), targets=targets,
                         adapter_format=_text(row, "adapter_format"), quant_type=_text(row, "quant_type"),
                         double_quant=_flag(row, "double_quant"), layout="bitsandbytes", dropout=_lora_dropout(row))
        return LoRA(rank=_count(row, "lora_rank", high=2**16), targets=targets,
                    adapter_format=_text(row, "adapter_format"), dropout=_lora_dropout(row))
    if method == "houlsby":
        # validation/houlsby.py: two adapters per block in the model's dtype; only they train.
        from memmath.methods import Adapters

        return Adapters(bottleneck=_count(row, "bottleneck"))
    raise ValueError(f"row column 'method' must be full, freeze, lora or houlsby; got {validate.describe(method)}")


def case_arguments(row, activations: str = "transformers") -> dict:
    """The keyword arguments of memmath.training_memory that describe a recorded case."""
    from memmath.activations import ATTENTION_KINDS
    from memmath.recipes import get_optimizer, get_recipe
    from memmath.run import ACTIVATION_MODELS

    # bitsandbytes' Adam8bit and AdamW8bit keep the same states: memmath's "adam8bit" for both.
    optimizer = _text(row, "optimizer")
    optimizer = {"adamw8bit": "adam8bit"}.get(optimizer, optimizer)
    # Checked here as training_memory checks them, since predicted_saved_per_layer skips it.
    return dict(precision=get_recipe(_text(row, "precision")).name,
                optimizer=get_optimizer(optimizer).name, method=case_method(row),
                batch_size=_count(row, "batch_size", high=validate.MAX_BATCH),
                seq_len=_count(row, "seq_len", high=validate.MAX_SEQ), checkpointing=_flag(row, "checkpointing"),
                attention=validate.choice("row column 'attention'", _text(row, "attention"), ATTENTION_KINDS),
                dropout=_flag(row, "dropout"), grad_accum_steps=_grad_accum_steps(row), padded=_padded(row),
                packed=_padded(row, "packed"),
                activations=validate.choice("activations", activations, ACTIVATION_MODELS), device="cpu")


def predict_case(row, activations: str = "transformers"):
    """memmath.training_memory(...) for a recorded case: the prediction to hold against its measurement."""
    from memmath.memory import training_memory

    return training_memory(case_model(row), **case_arguments(row, activations))


def predict_peak_case(row, step: str = "steady"):
    """memmath.peak_memory(..., step=step) for a recorded case. The measured counterpart is
    row.peak_step2_bytes (= row.peak_bytes) for "steady" and row.peak_step1_bytes for "first"."""
    from memmath.peak import peak_memory

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
    from memmath.hf_activations import activation_parts
    from memmath.recipes import get_recipe

    arguments = case_arguments(row)
    parts = activation_parts(case_model(row), recipe=get_recipe(arguments["precision"]), method=arguments["method"],
                             seq_len=arguments["seq_len"], batch_size=arguments["batch_size"],
                             dropout=arguments["dropout"], attention=arguments["attention"],
                             checkpointing=arguments["checkpointing"], device=arguments["device"],
                             padded=arguments["padded"], packed=arguments["packed"])
    estimate = parts.estimate
    n_layers = _count(row, "n_layers", high=validate.MAX_LAYERS)
    storing, frozen_storing = int(estimate.layers_storing), int(estimate.frozen_layers_storing)
    blocks = [0] * (n_layers - storing - frozen_storing) + [int(estimate.frozen_per_layer)] * frozen_storing
    trained = [int(estimate.per_layer)] * storing
    if trained and estimate.first_layer is not None:
        trained[0] = int(estimate.first_layer)
    blocks += trained
    first = next((i for i, n in enumerate(blocks) if n), None)
    if first is not None:
        from memmath.methods import Adapters

        # Houlsby adapters train after the projections only: the first block's q and k need no gradient
        # (its input comes from the frozen embedding), so the rotary tables are saved first by the second.
        # So with LoRA that adapts neither q nor k (a mixture of experts' router or experts alone): added after
        # validation/moe_lora.py's cases measured the tables in the second block (their totals were exact, the
        # first two blocks off by the tables' bytes), a booking of where the measurement files them only.
        shape = case_model(row)
        method = arguments["method"]
        no_qk = isinstance(method, LoRA) and not ({a.module for a in shape.lora_adapters(method.targets)} & {
            "q_proj", "k_proj", "qkv_proj", "query_key_value"})
        later = ((isinstance(method, Adapters) or no_qk) and _text(row, "family") == "llama"
                 and not arguments["checkpointing"] and first + 1 < len(blocks))
        blocks[first + later] += int(parts.tables)
        types = shape.layer_types or ()
        other = next((j for j in range(first, n_layers) if types[j] != types[first]), None) if types else None
        if shape.arch == "gemma3_text" and other is not None and not arguments["checkpointing"]:
            # Gemma 3: one cos/sin pair per layer type; the other type's pair is saved by its first block.
            pair = 2 * arguments["seq_len"] * (shape.rotary_dim or shape.head_dim) * parts.element_bytes
            blocks[first] -= pair
            blocks[other] += pair
    return blocks


def _case_frame(name: str, key: str):
    """One row per recorded case of the data file's list `key`: its config, model and measured columns."""
    import pandas as pd  # only here: `import memmath` stays numpy-only

    rows = []
    for record in _document(name).get(key, []):
        config = dict(record["config"])
        model = config.pop("model")
        measured = dict(record["measured"])
        detail = measured.pop("optimizer_state_detail", {})
        rows.append({**config, **model, **measured, "optimizer_state_detail": detail})
    return pd.DataFrame(rows)


def load_measured_quantized(name: str = DATA_FILE) -> pd.DataFrame:
    """The QLoRA cases (validation/quantized.py): bitsandbytes' 4-bit (quant_type nf4 or fp4,
    double_quant) or 8-bit (int8) base under peft's LoRA, with load_measured's columns and the
    quantization state's bytes (quantization_constant_bytes = quant_absmax_bytes +
    quant_nested_absmax_bytes + quant_offset_bytes + quant_code_bytes + quant_copies_bytes)."""
    return _case_frame(name, "quantized_cases")


def load_measured_amp(name: str = DATA_FILE) -> pd.DataFrame:
    """The AMP cases (validation/amp.py): fp32 weights, the forward under torch.autocast("cpu",
    dtype=torch.bfloat16); precision "amp", load_measured's columns, and the saved storages by kind
    (saved_weight_cast_bytes: autocast's bf16 weight copies kept for backward; saved_bf16_bytes,
    saved_fp32_bytes). predict_case(row) predicts them with the exact activation model's AMP trace
    (memmath/amp_trace.py)."""
    return _case_frame(name, "amp_cases")


QLORA_PARTS = (
    # (part, measured column, TrainingMemory attribute)
    ("weights (packed 4-bit or int8 base, the rest, adapters)", "param_bytes", "weights"),
    ("quantization constants (absmax, nested absmax, offset, code maps)", "quantization_constant_bytes",
     "quantization_constants"),
    ("gradients (adapters)", "grad_bytes", "gradients"),
    ("optimizer states (adapters)", "optimizer_state_bytes", "optimizer_states"),
)


def measured_qlora(quant_type: str | None = None, max_cases: int = 4, name: str = DATA_FILE) -> pd.DataFrame:
    """Recorded QLoRA runs next to memmath's prediction, part by part: a table for a lesson.

    One row per case and part (case_id, quant_type, double_quant, part, measured bytes, predicted
    bytes, equal, library versions), for the first max_cases recorded cases of quant_type ("nf4",
    "fp4", "int8"; None: any). The prediction is training_memory(..., method=QLoRA(...,
    layout="bitsandbytes")) for the recorded shape; the measurement is validation/quantized.py's
    (bitsandbytes' Linear4bit / Linear8bitLt with peft's LoRA on top, on the CPU).
    """
    import pandas as pd  # only here: `import memmath` stays numpy-only

    from memmath.methods import QUANT_TYPES

    if quant_type is not None:
        quant_type = validate.choice("quant_type", quant_type, QUANT_TYPES)
    max_cases = validate.count("max_cases", max_cases, high=10_000, scalar=True)
    cases = load_measured_quantized(_shipped(name))
    if quant_type is not None and len(cases):
        cases = cases[cases.quant_type == quant_type]
    meta = _document(name)
    versions = meta.get("versions_quantized_cases", meta["versions"])
    libraries = ", ".join(f"{k} {versions[k]}" for k in ("bitsandbytes", "peft", "transformers", "torch") if k in versions)
    rows = []
    for _, case in cases.head(max_cases).iterrows():
        m = predict_case(case)
        for label, column, attribute in QLORA_PARTS:
            measured, predicted = int(case[column]), int(getattr(m, attribute))
            rows.append({"case_id": case["case_id"], "quant_type": case["quant_type"],
                         "double_quant": bool(case["double_quant"]), "part": label, "measured": measured,
                         "predicted": predicted, "equal": measured == predicted, "libraries": libraries})
    return pd.DataFrame(rows, columns=["case_id", "quant_type", "double_quant", "part", "measured", "predicted",
                                       "equal", "libraries"])


TIMELINE_FILE = "measured_timeline.json"


def load_measured_timelines(name: str = TIMELINE_FILE) -> list[dict]:
    """Step 2's allocated bytes over time for a few small models (validation/timeline.py, held out from
    memmath.timeline): each a dict with `row` (the case's columns, for case_model and case_arguments),
    `series` ([time as a fraction of the step, bytes]), `phases` ({phase: [start, end]}) and the peak."""
    rows = []
    for record in _document(name)["cases"]:
        config = dict(record["case"])
        row = {**config, **config.pop("model")}
        rows.append({"row": row, "series": record["series"], "phases": record["phases"],
                     "peak_step2_bytes": record["peak_step2_bytes"]})
    return rows


LORA_DROPOUT_FILE = "measured_lora_dropout.json"


def _lora_dropout(row) -> float:
    """peft's lora_dropout of a recorded case: its lora_dropout column (validation/lora_dropout.py), 0.0 for the
    cases recorded before it (every other recorder builds LoraConfig(lora_dropout=0.0))."""
    from memmath.methods import lora_dropout

    value = row.get("lora_dropout") if hasattr(row, "get") else None
    if value is None or (isinstance(value, float) and value != value):  # absent, or NaN in a mixed frame
        return 0.0
    return lora_dropout(value)


def load_measured_lora_dropout(name: str = LORA_DROPOUT_FILE) -> pd.DataFrame:
    """The cases of validation/lora_dropout.py (measured_lora_dropout.json), every one recorded after the
    prediction code it tests (held out), with load_measured's columns and:

    lora_dropout   peft's lora_dropout (0.05, 0.1) of the LoRA and QLoRA cases (predict_case builds
                   LoRA(dropout=...) and, where quant_type is set, QLoRA(..., layout="bitsandbytes"))
    master         True for mixed precision with fp32 master weights (precision "mixed"): a bf16 model whose
                   optimizer steps fp32 copies of its 16-bit trainable tensors, built before the first step
    master_weight_bytes  the bytes of those copies (memmath's master_weights)
    group          "LoRA dropout", "QLoRA dropout" or "master weights"
    """
    return load_measured(name)


PADDING_FILE = "measured_padding.json"


def _padded(row, column: str = "padded") -> bool:
    """Whether a recorded case's batch is right-padded (column "padded") or packed with position ids ("packed"):
    validation/padding.py's columns, False for the cases recorded before it (no other recorder's batch has a mask)."""
    value = row.get(column) if hasattr(row, "get") else None
    if value is None or (isinstance(value, float) and value != value):  # absent, or NaN in a mixed frame
        return False
    if isinstance(value, str) or value not in (True, False):  # a bool, numpy's too (pandas reads the column so)
        raise validate.FieldError(column, f"row column {column!r} must be true or false; got {value!r}")
    return bool(value)


def load_measured_padding(name: str = PADDING_FILE) -> pd.DataFrame:
    """The cases of validation/padding.py (measured_padding.json): right-padded batches on LLaMA with grouped-query
    attention, SDPA and eager, every one recorded after the prediction code it tests (held out), with
    load_measured's columns and padded (True: predict_case builds Run(padded=True))."""
    return load_measured(name)


GRAD_ACCUM_FILE = "measured_grad_accum.json"


def _grad_accum_steps(row) -> int:
    """Micro-batches per optimizer step of a recorded case: its grad_accum_steps column (validation/grad_accum.py),
    1 for the cases recorded before it (every other recorder steps after each batch)."""
    from memmath.run import MAX_GRAD_ACCUM

    value = row.get("grad_accum_steps") if hasattr(row, "get") else None
    if value is None or (isinstance(value, float) and value != value):  # absent, or NaN in a mixed frame
        return 1
    return validate.count("row column 'grad_accum_steps'", value, high=MAX_GRAD_ACCUM, scalar=True)


def load_measured_grad_accum(name: str = GRAD_ACCUM_FILE) -> pd.DataFrame:
    """The cases of validation/grad_accum.py (measured_grad_accum.json), every one recorded after the prediction
    code it tests (held out), with load_measured's columns and:

    grad_accum_steps   micro-batches of batch_size per optimizer step (1 for the control cases); predict_case
                       and predict_peak_case pass it as Run.grad_accum_steps
    peak_step{n}_micro{j}_{phase}_bytes   each micro-batch's forward and backward peak (k > 1); the step's
                       peak_step{n}_{phase}_bytes is the highest of them
    group              "gradient accumulation"
    """
    return load_measured(name)


PARALLEL_FILE = "measured_parallel.json"


def load_measured_parallel(name: str = PARALLEL_FILE) -> pd.DataFrame:
    """The tensor- and pipeline-parallel runs (validation/parallel.py, gloo on one CPU, recorded after
    memmath/parallel.py was written: held out): configuration columns (engine: tp, tp-sp, pp, tp-pp or dp-tp;
    world_size; schedule and micro_batches for a pipeline; tp, the tensor degree of tp-pp and dp-tp), then per-rank lists (param_bytes_per_rank, grad_bytes_per_rank,
    optimizer_state_bytes_per_rank, saved_bytes_per_rank: autograd's saved storages in step 1, a stage's
    micro-batches together, peak_step1_bytes_per_rank, peak_step2_bytes_per_rank, ...)."""
    import pandas as pd  # only here: `import memmath` stays numpy-only
    rows = []
    for record in _document(name).get("parallel_cases", []):
        config = dict(record["config"])
        model = config.pop("model")
        rows.append({**config, **model, **record["measured"]})
    return pd.DataFrame(rows)


def parallel_run(row, rank: int = 0):
    """The memmath.Run of one rank of a recorded parallel case."""
    from memmath.run import Run

    engine = _text(row, "engine")
    world = _count(row, "world_size", low=2, high=validate.MAX_GPUS)
    schedule = dict(pp_schedule=_text(row, "schedule"), micro_batches=_count(row, "micro_batches", high=validate.MAX_BATCH)) \
        if engine in ("pp", "tp-pp") else {}
    if schedule.get("pp_schedule") == "interleaved":  # several stages per rank
        schedule["virtual_stages"] = _count(row, "virtual_stages", low=2, high=world * validate.MAX_GPUS)
    # the combined layouts name their tensor degree (column tp); the rest of the ranks are pipeline stages (tp-pp) or
    # data-parallel copies (dp-tp)
    tp = _count(row, "tp", low=2, high=world) if engine in ("tp-pp", "dp-tp") else world
    degrees = {"tp": dict(tp=world), "tp-sp": dict(tp=world, sequence_parallel=True), "pp": dict(pp=world, **schedule),
               "tp-pp": dict(tp=tp, pp=world // tp, **schedule), "dp-tp": dict(tp=tp)}
    if engine not in degrees:
        raise ValueError(f"row column 'engine' must be tp, tp-sp, pp, tp-pp or dp-tp; got {validate.describe(engine)}")
    # every data-parallel copy averages its gradients in place (validation/parallel.py): no DDP buckets
    return Run(case_model(row), n_gpus=world, rank=rank, **degrees[engine], **case_arguments(row),
               gradient_as_bucket_view=True)


def predict_parallel_case(row, rank: int):
    """memmath.training_memory(...) of one rank of a recorded parallel case (memmath/parallel.py)."""
    from memmath.memory import training_memory

    return training_memory(parallel_run(row, rank))


def predict_parallel_peak(row, rank: int, step: str = "steady") -> dict:
    """memmath.parallel.parallel_peak of one rank of a recorded parallel case: forward, backward,
    optimizer_step, total bytes (the measured: peak_step2_bytes_per_rank for "steady", step 1 for "first")."""
    from memmath.parallel import parallel_peak

    return parallel_peak(parallel_run(row, rank), step=step)


PREFERENCE_FILE = "measured_preference.json"


def load_measured_preference(name: str = PREFERENCE_FILE) -> pd.DataFrame:
    """The cases of validation/preference.py (measured_preference.json): DPO with a frozen reference model, every one
    recorded after memmath/preference.py was written (held out), with load_measured's columns and:

    reference      copy (a frozen copy of the model), adapters_off (the LoRA policy with peft's adapters disabled)
                   or precomputed (2 x batch_size fp32 reference log-probs in the batch); predict_case builds
                   DPO(base=the method columns' method, reference=...)
    batch_size     prompts: the policy runs sequences = 2 x batch_size (chosen and rejected)
    reference_param_bytes  the reference copy's parameters (0 for adapters_off and precomputed); param_bytes
                   counts them too
    group          "preference (DPO)"
    """
    return load_measured(name)

