"""A traced answer for any model transformers can build: counted on the meta device, stepped under fake tensors.

memmath's exact answers rest on a record per model type (memmath/architectures/). For a type without one, this
module asks PyTorch itself, never the network, and never real memory:

- the model is built from its config.json (a dict, JSON text, a file, its folder, or a repo id found in the local
  Hugging Face cache) on the meta device (torch.device("meta"): shapes and dtypes, no storage), and its
  parameters, their dtypes and what trains (full, freezing the first k blocks, LoRA through peft) are counted
  from it exactly;
- the step is run twice under torch._subclasses.fake_tensor.FakeTensorMode with PyTorch's MemTracker
  (torch.distributed._tools.mem_tracker), memmath.stepping's engine: gradients, optimizer states, the bytes saved
  for backward and each phase's peak, at the full batch and sequence length. To stay fast, the trace runs one
  block of each distinct kind (same class, same parameter shapes, frozen or not) with the embeddings and the
  head, then that model with one more block of each kind that repeats; every quantity is composed as the first
  trace plus (count - 1) times each kind's difference, which is exact for what grows block by block (tests hold
  it against a full trace).

The answer says it was traced (basis "traced"): neither memmath's model nor a measurement. It is cached per
config and run settings (a hash of both and of the library versions) in the user's cache folder
(MEMMATH_CACHE_DIR, else $XDG_CACHE_HOME/memmath, else ~/.cache/memmath). Needs the torch extra:
pip install "memmath[torch]".
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import sys
import time
from dataclasses import field
from pathlib import Path

from . import validate
from .config_reader import _load_config
from .hf_cache import find_in_hf_cache
from .methods import Freeze, Full, LoRA, QLoRA
from .presets import PRESET_CONFIGS, PRESETS
from .stepping import prefill, step_twice
from .units import format_bytes
from .values import frozen

EXTRA = 'pip install "memmath[torch]"'
TRACE_SCHEMA = 1  # bump when a cached answer's fields or meaning change
PRECISIONS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # pure formats: weights, grads, states
OPTIMIZERS = ("adamw", "adam", "adam_amsgrad", "adamw_amsgrad", "sgd", "sgd_momentum")
METHODS = ("full", "freeze", "lora")
ATTENTION = ("sdpa", "eager")
# memmath's LoRA target names -> the module names most transformers decoders use (peft matches name endings).
LORA_MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
                "down": "down_proj"}
LORA_ALPHA = 16


class TorchMissing(ImportError):
    """torch, transformers or peft is not installed: the message names the extra that brings them."""


def require_torch():
    """(torch, transformers), or TorchMissing naming memmath[torch]."""
    try:
        import torch
        import transformers
    except ImportError as error:
        raise TorchMissing(f"a traced answer needs torch and transformers ({error.name or error} is missing): "
                           f"{EXTRA}") from None
    return torch, transformers


@frozen
class TraceSettings:
    """The training step to trace, in memmath.Run's words (pure formats; one GPU's micro-batch)."""

    precision: str = "bf16"
    optimizer: str = "adamw"
    method: str = "full"
    frozen_layers: int = 0  # freeze: the first k blocks and the embeddings frozen (memmath.Freeze)
    lora_rank: int = 8
    lora_targets: tuple = ("q", "v")
    lora_format: str = "fp32"  # peft's autocast_adapter_dtype=True: fp32 adapters on a 16-bit base
    batch_size: int = 1
    seq_len: int = 2048
    checkpointing: bool = False
    attention: str = "sdpa"

    def __post_init__(self):
        validate.choice("precision", self.precision, tuple(PRECISIONS))
        validate.choice("optimizer", self.optimizer, OPTIMIZERS)
        validate.choice("method", self.method, METHODS)
        validate.choice("attention", self.attention, ATTENTION)
        validate.choice("lora_format", self.lora_format, ("fp32", "base"))
        for name, low in (("frozen_layers", 0), ("lora_rank", 1), ("batch_size", 1), ("seq_len", 1)):
            object.__setattr__(self, name, validate.count(name, getattr(self, name), low=low, scalar=True))
        object.__setattr__(self, "checkpointing", validate.flag("checkpointing", self.checkpointing))
        targets = (self.lora_targets,) if isinstance(self.lora_targets, str) else tuple(self.lora_targets)
        for target in targets:
            validate.choice("lora_targets", target, tuple(LORA_MODULES) + ("all-linear",))
        object.__setattr__(self, "lora_targets", targets)


def settings_of(run=None, **overrides) -> TraceSettings:
    """TraceSettings from a memmath.Run, a dict of TraceSettings' fields, or None (the defaults)."""
    if run is None or isinstance(run, dict):
        return TraceSettings(**{**(run or {}), **overrides})
    if isinstance(run, TraceSettings):
        return dataclasses.replace(run, **overrides)
    method = run.method
    values = dict(precision=run.precision, optimizer=run.optimizer, batch_size=run.batch_size,
                  seq_len=run.seq_len, checkpointing=run.checkpointing, attention=run.attention or "sdpa")
    if isinstance(method, QLoRA) or not isinstance(method, (Full, Freeze, LoRA)):
        raise ValueError(f"method {type(method).__name__} cannot be traced; trace Full(), Freeze(...) or LoRA(...)")
    if isinstance(method, Freeze):
        n_layers = run.model.n_layers
        frozen = method.frozen_layers if method.frozen_layers is not None else n_layers - method.trainable_layers
        values.update(method="freeze", frozen_layers=frozen)
    elif isinstance(method, LoRA):
        values.update(method="lora", lora_rank=method.rank, lora_targets=tuple(method.targets),
                      lora_format="fp32" if method.adapter_format == "fp32" else "base")
    return TraceSettings(**{**values, **overrides})


@frozen
class TracedMemory:
    """A traced training step: bytes per part (integers) and where each number came from."""

    model_type: str
    settings: TraceSettings
    total_params: int
    trainable_params: int
    adapter_params: int
    params_by_dtype: dict
    param_bytes: int
    grad_bytes: int
    optimizer_state_bytes: int
    saved_bytes: int
    peak_step1_bytes: int
    peak_step2_bytes: int
    peak_step1_phase: str
    peak_step2_phase: str
    phase_peaks: dict
    layer_kinds: dict  # kind label -> how many blocks
    traces: int  # how many reduced models were stepped
    seconds: float
    versions: dict
    basis: str = "traced"
    cached: bool = field(default=False, compare=False)

    def as_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["settings"] = dataclasses.asdict(self.settings)
        data["settings"]["lora_targets"] = list(self.settings.lora_targets)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> TracedMemory:
        settings = dict(data["settings"])
        settings["lora_targets"] = tuple(settings["lora_targets"])
        return cls(**{**data, "settings": TraceSettings(**settings)})

    def text(self) -> str:
        s = self.settings
        method = {"full": "full finetuning", "freeze": f"the first {s.frozen_layers} blocks frozen",
                  "lora": f"LoRA rank {s.lora_rank} on {','.join(s.lora_targets)}"}[s.method]
        kinds = ", ".join(f"{n} x {kind}" for kind, n in self.layer_kinds.items())
        rows = [("Weights", self.param_bytes), ("Gradients", self.grad_bytes),
                ("Optimizer states", self.optimizer_state_bytes), ("Saved activations", self.saved_bytes),
                (f"Peak, first step ({self.peak_step1_phase})", self.peak_step1_bytes),
                (f"Peak, every later step ({self.peak_step2_phase})", self.peak_step2_bytes)]
        lines = [f"{self.model_type}: traced by PyTorch under fake tensors (not memmath's model, not a measurement)",
                 f"  {s.precision}, {s.optimizer}, {method}, batch {s.batch_size} x {s.seq_len} tokens, "
                 f"{s.attention}{', checkpointing' if s.checkpointing else ''}",
                 f"  {self.total_params:,} parameters ({self.trainable_params:,} train); blocks: {kinds}"]
        lines += [f"  {label:<40s} {format_bytes(n):>12s}  {n:>20,} B" for label, n in rows]
        lines.append(f"  ({self.traces} reduced model{'s' if self.traces != 1 else ''} traced in "
                     f"{self.seconds:.1f} s{', from the cache' if self.cached else ''}; CPU tensors, so no CUDA "
                     "context, allocator rounding or kernel workspace)")
        return "\n".join(lines) + "\n"


# ---- reading the config -----------------------------------------------------------------------------
def read_config(config) -> dict:
    """The config.json as a dict: a dict, JSON text, a file, its folder, "owner/name" in the local HF cache, or a preset
    read from its published config.json's fields (memmath.presets.PRESET_CONFIGS)."""
    text = isinstance(config, str) and not config.lstrip().startswith("{")
    if text and not _exists(config) and config.strip() in PRESET_CONFIGS:
        return copy.deepcopy(PRESET_CONFIGS[config.strip()])
    if text and not _exists(config) and config.strip() in PRESETS:
        raise validate.FieldError("config", f"preset {config.strip()!r} is built from its paper's or its family's "
                                  "widths, not from a config.json PyTorch could build; pass the model's config.json")
    if text and not _exists(config):
        try:
            found, folder = find_in_hf_cache(config.strip())
        except OSError:  # a name the system cannot look up (too long)
            found, folder = None, "the Hugging Face cache"
        if found is None:
            raise validate.FieldError("config", f"{config!r} is not a file or folder, and not in the local Hugging "
                                      f"Face cache (looked in {folder}); memmath never downloads")
        config = found
    elif text:
        config = Path(config).expanduser()
    data = _load_config(config)
    if not isinstance(data.get("model_type"), str):
        raise validate.FieldError("config", "config is missing the field 'model_type' (transformers needs it to "
                                  "know which model to build)")
    return data


def _exists(path: str) -> bool:
    try:
        return Path(path).expanduser().exists()
    except (OSError, ValueError):  # a name too long, a NUL byte
        return False


def config_key(config: dict, settings: TraceSettings, versions: dict) -> str:
    """The cache key: a hash of the config, the settings and the versions that traced them."""
    text = json.dumps({"config": config, "settings": dataclasses.asdict(settings), "versions": versions,
                       "schema": TRACE_SCHEMA}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def cache_dir() -> Path:
    if os.environ.get("MEMMATH_CACHE_DIR"):
        return Path(os.environ["MEMMATH_CACHE_DIR"]).expanduser() / "traced"
    base = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache")
    return Path(base).expanduser() / "memmath" / "traced"


def hf_config(config: dict, settings: TraceSettings):
    """The transformers config object for a config.json dict, with the run's attention implementation."""
    _, transformers = require_torch()
    fields = {k: v for k, v in config.items() if k not in ("model_type", "transformers_version")}
    try:
        hf = transformers.AutoConfig.for_model(config["model_type"], **fields)
    except (ValueError, KeyError) as error:
        raise ValueError(f"config field 'model_type' {config['model_type']!r}: transformers "
                         f"{transformers.__version__} cannot build it ({str(error).splitlines()[0]})") from None
    hf._attn_implementation = settings.attention
    return hf


def model_class(hf):
    """The class the config's architectures name (when transformers has it), else its causal-LM class."""
    _, transformers = require_torch()
    for name in getattr(hf, "architectures", None) or ():
        cls = getattr(transformers, name, None)
        if cls is not None and hasattr(cls, "_from_config"):
            return cls
    for auto in (transformers.AutoModelForCausalLM, transformers.AutoModel):
        try:
            return auto._model_mapping[type(hf)]
        except KeyError:
            continue
    raise ValueError(f"transformers has no model class for model_type {hf.model_type!r}")


def build_meta(hf, settings: TraceSettings):
    """The model on the meta device (no storage), in the run's precision."""
    torch, _ = require_torch()
    dtype = getattr(torch, PRECISIONS[settings.precision])
    with torch.device("meta"):
        return model_class(hf)._from_config(hf, dtype=dtype)


def blocks_of(model):
    """The model's repeated blocks: its longest nn.ModuleList (decoder layers) and that list's owner and name."""
    torch, _ = require_torch()
    best = (None, None, None)
    for name, module in model.named_modules():
        for child_name, child in module.named_children():
            if isinstance(child, torch.nn.ModuleList) and (best[0] is None or len(child) > len(best[0])):
                best = (child, module, child_name)
    if best[0] is None:
        raise ValueError(f"{type(model).__name__} has no list of blocks to trace")
    return best


def _signature(block) -> tuple:
    return (type(block).__name__,) + tuple((n, tuple(p.shape), str(p.dtype)) for n, p in block.named_parameters())


def layer_kinds(blocks, frozen: int, hf=None) -> list[tuple]:
    """Each block's kind: its class, its parameters' shapes and dtypes, its attention type (the config's
    layer_types: sliding and full attention share their weights but not their masks) and whether it is frozen."""
    types = getattr(hf, "layer_types", None)
    types = list(types) if isinstance(types, (list, tuple)) and len(types) == len(blocks) else [None] * len(blocks)
    return [(_signature(b) + ((types[i] or getattr(b, "attention_type", None)),), i < frozen)
            for i, b in enumerate(blocks)]


def _kind_label(kind, labels: dict) -> str:
    signature, frozen = kind
    attention = f" {signature[-1]}" if isinstance(signature[-1], str) else ""
    label = f"{signature[0]}{attention}{' (frozen)' if frozen else ''}"
    if any(other == label for other in labels.values()):
        label += f" #{len(labels) + 1}"
    return labels.setdefault(kind, label)


def apply_method(model, settings: TraceSettings, blocks, frozen_count: int | None = None):
    """Full, Freeze (first k blocks and the embeddings frozen; final norm and an untied head train) or LoRA."""
    require_torch()
    if settings.method == "full":
        return model
    if settings.method == "freeze":
        frozen_count = settings.frozen_layers if frozen_count is None else frozen_count
        for p in model.parameters():
            p.requires_grad_(False)
        block_params = {id(p) for b in blocks for p in b.parameters()}
        input_embeddings = {id(p) for p in model.get_input_embeddings().parameters()}
        for block in list(blocks)[frozen_count:]:
            for p in block.parameters():
                p.requires_grad_(True)
        for p in model.parameters():  # outside the blocks: all but the input embeddings (and a head tied to them)
            if id(p) not in block_params and id(p) not in input_embeddings:
                p.requires_grad_(True)
        return model
    import peft

    # "all-linear": peft's own choice, every linear layer but the output head (any module names).
    targets = ("all-linear" if settings.lora_targets == ("all-linear",)
               else [LORA_MODULES[t] for t in settings.lora_targets])
    config = peft.LoraConfig(r=settings.lora_rank, lora_alpha=LORA_ALPHA, lora_dropout=0.0, bias="none",
                             target_modules=targets)
    return peft.get_peft_model(model, config, autocast_adapter_dtype=settings.lora_format == "fp32")


def count(model, settings: TraceSettings) -> dict:
    """Parameters (each storage once: a tied head is its embedding), by dtype, and what trains."""
    seen, total, adapters, trainable, by_dtype, nbytes = set(), 0, 0, 0, {}, 0
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            continue
        seen.add(id(p))
        if "lora_" in name:
            adapters += p.numel()
        else:
            total += p.numel()
        if p.requires_grad:
            trainable += p.numel()
        dtype = str(p.dtype).replace("torch.", "")
        by_dtype[dtype] = by_dtype.get(dtype, 0) + p.numel()
        nbytes += p.numel() * p.element_size()
    return {"total_params": total, "adapter_params": adapters, "trainable_params": trainable,
            "params_by_dtype": dict(sorted(by_dtype.items())), "param_bytes": nbytes}


def _reduced(meta_model, owner, name, picked: list[int]):
    """A deep copy of the meta model holding only the blocks at `picked` (in their order)."""
    torch, _ = require_torch()
    full = getattr(owner, name)
    setattr(owner, name, torch.nn.ModuleList([full[i] for i in picked]))
    try:
        small = copy.deepcopy(meta_model)
    finally:
        setattr(owner, name, full)
    config = getattr(small, "config", None)  # one copy, shared by every submodule that holds it
    types = getattr(config, "layer_types", None)
    if isinstance(types, (list, tuple)) and len(types) == len(full):
        with contextlib.suppress(AttributeError):  # a config that derives layer_types (Jamba's property) keeps it
            config.layer_types = [types[i] for i in picked]  # a model that looks up layer_types[i] by position
    if config is not None and getattr(config, "num_hidden_layers", None) == len(full):
        config.num_hidden_layers = len(picked)
    for position, block in enumerate(blocks_of(small)[0]):  # the cache of a use_cache=True forward, by position
        for module in block.modules():
            if isinstance(getattr(module, "layer_idx", None), int):
                module.layer_idx = position
    return small


def _batch(torch, hf, model, settings: TraceSettings):
    vocab = getattr(hf, "vocab_size", None) or getattr(getattr(hf, "text_config", None), "vocab_size", 2)
    input_ids = torch.randint(1, max(vocab, 2), (settings.batch_size, settings.seq_len))
    name = type(model).__name__
    if "SequenceClassification" in name:
        labels = torch.zeros(settings.batch_size, dtype=torch.long)
    else:
        labels = input_ids.clone()
    return {"input_ids": input_ids, "labels": labels}


def trace_reduced(meta_model, hf, settings: TraceSettings, picked: list[int], frozen_in_picked: int,
                  serve: bool = False) -> dict:
    """Two fake-tensor training steps of the meta model cut to the blocks at `picked` (memmath.stepping's record),
    or with serve=True one prefill of the batch with the KV cache on (memmath.stepping.prefill's)."""
    torch, _ = require_torch()
    from torch._subclasses.fake_tensor import FakeTensorMode

    blocks, owner, name = blocks_of(meta_model)
    small = _reduced(meta_model, owner, name, picked)
    if settings.checkpointing and not serve:
        small.gradient_checkpointing_enable()
    if not serve:  # the method on meta tensors: peft cannot move fake ones
        small = apply_method(small, settings, blocks_of(small)[0], frozen_in_picked)
    with FakeTensorMode(allow_non_fake_inputs=True), _as_real_tensors():
        small.to_empty(device="cpu")
        base = small.get_base_model() if hasattr(small, "get_base_model") else small
        base.tie_weights()  # to_empty makes a new tensor per module: the tied head shares the embedding again
        if serve:
            small.eval()
            batch = _batch(torch, hf, small, settings)
            return prefill(small, {"input_ids": batch["input_ids"]})
        small.train()
        small_blocks, _, _ = blocks_of(small)
        optimizer = make_optimizer([p for p in small.parameters() if p.requires_grad], settings.optimizer)
        batch = _batch(torch, hf, small, settings)
        return step_twice(small, optimizer, batch, small_blocks, mode="fake")


@contextlib.contextmanager
def _as_real_tensors():
    """transformers' masking_utils takes a fake tensor for a graph being compiled (import_utils.is_tracing) and then
    builds the causal mask that eager training skips, or reads the position ids' values to find packed sequences.
    The trace is to run what training runs on an unpadded, unpacked batch (no attention mask given): masking_utils
    is told that nothing is being compiled, and that the batch is not packed."""
    from transformers import masking_utils

    saved = {name: getattr(masking_utils, name) for name in ("is_tracing", "find_packed_sequence_indices")}
    masking_utils.is_tracing = lambda tensor=None: saved["is_tracing"](None)
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(masking_utils, name, value)


def make_optimizer(params, name: str):
    """torch.optim's optimizer for a memmath optimizer name, at lr 1e-3 (the rate changes no byte)."""
    import torch

    if name in ("adamw", "adamw_amsgrad"):
        return torch.optim.AdamW(params, lr=1e-3, amsgrad=name.endswith("amsgrad"))
    if name in ("adam", "adam_amsgrad"):
        return torch.optim.Adam(params, lr=1e-3, amsgrad=name.endswith("amsgrad"))
    if name in ("sgd", "sgd_momentum"):
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9 if name == "sgd_momentum" else 0.0)
    raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}; got {name!r}")


COMPOSED = ("grad_bytes", "optimizer_state_bytes", "saved_bytes") + tuple(
    f"peak_step{k}_{phase}_bytes" for k in (1, 2) for phase in ("forward", "backward", "optimizer_step"))


SERVE_COMPOSED = ("prefill_peak_bytes", "cache_bytes")


def compose(base: dict, extra: dict[int, dict], counts: dict[int, int], keys=COMPOSED) -> dict:
    """Each quantity of the whole model: the base trace plus (count - 1) x each repeated kind's difference."""
    out = {}
    for key in keys:
        out[key] = base[key] + sum((counts[k] - 1) * (extra[k][key] - base[key]) for k in extra)
    return out


def versions() -> dict:
    import importlib.metadata  # some 20 ms: only when a trace is cached or measured
    import platform

    torch, transformers = require_torch()
    found = {"torch": torch.__version__, "transformers": transformers.__version__,
             "python": platform.python_version()}
    try:  # the distribution's version, without importing peft (seconds)
        found["peft"] = importlib.metadata.version("peft")
    except importlib.metadata.PackageNotFoundError:
        pass
    return found


def traced_training(config, run=None, *, cache: bool = True, progress=None, full_trace: bool | None = None,
                    **settings) -> TracedMemory:
    """The traced memory of one training step of the model a config.json describes (see the module docstring).

    run: a memmath.Run (its precision, optimizer, method, batch and sequence), a dict of TraceSettings' fields,
    or None; keyword settings override it. progress: a callable given one line per trace (the command line
    writes it to stderr). full_trace=True steps the whole model instead of composing blocks (the check of the
    composition); None (the default) composes unless the whole model has no more blocks than the composed traces.
    """
    require_torch()
    settings = settings_of(run, **settings)
    config = read_config(config)
    found_versions = versions()
    key = config_key(config, settings, found_versions) + {True: "-full", False: "-composed"}.get(full_trace, "")
    path = cache_dir() / f"{key}.json"
    if cache and path.is_file():
        try:
            return dataclasses.replace(TracedMemory.from_dict(json.loads(path.read_text(encoding="utf-8"))),
                                       cached=True)
        except (ValueError, TypeError, KeyError):
            pass  # an unreadable entry is traced again and overwritten
    started = time.perf_counter()
    say = progress or (lambda line: None)
    _quiet_transformers()
    hf = hf_config(config, settings)
    meta = _untraceable(config["model_type"], build_meta, hf, settings)
    blocks, _, _ = blocks_of(meta)
    if settings.method == "freeze" and settings.frozen_layers > len(blocks):
        raise validate.FieldError("frozen_layers", f"frozen_layers must be at most the model's {len(blocks)} "
                                  f"blocks; got {settings.frozen_layers}")
    counted = count(_with_method(meta, settings), settings)
    kinds = layer_kinds(blocks, settings.frozen_layers if settings.method == "freeze" else 0, hf)
    composed, traces = _traced_blocks(meta, hf, settings, kinds, full_trace, say, config["model_type"])
    phase_peaks = {f"step{k}": {phase: composed[f"peak_step{k}_{phase}_bytes"]
                                for phase in ("forward", "backward", "optimizer_step")} for k in (1, 2)}
    peaks = {k: max(phase_peaks[f"step{k}"].items(), key=lambda item: item[1]) for k in (1, 2)}
    answer = TracedMemory(
        model_type=config["model_type"], settings=settings, total_params=counted["total_params"],
        trainable_params=counted["trainable_params"], adapter_params=counted["adapter_params"],
        params_by_dtype=counted["params_by_dtype"], param_bytes=counted["param_bytes"],
        grad_bytes=composed["grad_bytes"], optimizer_state_bytes=composed["optimizer_state_bytes"],
        saved_bytes=composed["saved_bytes"], peak_step1_bytes=peaks[1][1], peak_step2_bytes=peaks[2][1],
        peak_step1_phase=peaks[1][0], peak_step2_phase=peaks[2][0], phase_peaks=phase_peaks,
        layer_kinds=_kind_counts(kinds), traces=traces, seconds=round(time.perf_counter() - started, 2),
        versions=found_versions)
    if cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(answer.as_dict(), indent=1) + "\n", encoding="utf-8")
        except OSError:
            pass  # a read-only home: the answer stands, uncached
    return answer


def _kind_counts(kinds) -> dict:
    """{kind label: how many blocks}, in the order the kinds first appear."""
    labels: dict = {}
    counts: dict = {}
    for kind in kinds:
        label = _kind_label(kind, labels)
        counts[label] = counts.get(label, 0) + 1
    return counts


def _traced_blocks(meta, hf, settings, kinds, full_trace, say, model_type, serve=False):
    """(the composed quantities, how many reduced models were traced): one block of each kind, then one more of each
    kind that repeats (or the whole model, where that is no more work or full_trace asks for it)."""
    first: dict = {}
    for i, kind in enumerate(kinds):
        first.setdefault(kind, i)
    counts = {first[k]: sum(1 for other in kinds if other == k) for k in first}
    base_picked = sorted(first.values())
    keys = SERVE_COMPOSED if serve else COMPOSED

    def frozen_in(picked):
        return sum(1 for i in picked if kinds[i][1])

    # Serving's peak grows block by block only from the second block of a kind on (the first block's input is the
    # embedding's output): its base holds two of each repeated kind, training's one.
    start = 2 if serve else 1
    repeated = [i for i in base_picked if counts[i] > start]
    base_picked = sorted(base_picked + [_nth(kinds, i, 2) for i in base_picked if start == 2 and counts[i] > 1])
    if full_trace is None:  # composing costs the base once plus the base and one block per repeated kind
        full_trace = len(kinds) <= len(base_picked) * (1 + len(repeated)) + len(repeated)
    if full_trace:
        say(f"tracing {model_type}: all {len(kinds)} blocks")
        every = list(range(len(kinds)))
        whole = _untraceable(model_type, trace_reduced, meta, hf, settings, every, frozen_in(every), serve=serve)
        return {key: whole[key] for key in keys}, 1
    traces = 1 + len(repeated)
    say(f"tracing {model_type}: {len(first)} block kind(s), trace 1 of {traces}")
    base = _untraceable(model_type, trace_reduced, meta, hf, settings, base_picked, frozen_in(base_picked),
                        serve=serve)
    extra = {}
    for n, i in enumerate(repeated, 2):
        say(f"tracing {model_type}: trace {n} of {traces}")
        picked = sorted(base_picked + [_nth(kinds, i, start + 1)])
        extra[i] = _untraceable(model_type, trace_reduced, meta, hf, settings, picked, frozen_in(picked), serve=serve)
    return compose(base, extra, {i: counts[i] - start + 1 for i in counts}, keys), traces


def _untraceable(model_type, function, *args, **kwargs):
    """function(*args, **kwargs); a failure inside PyTorch or transformers (an operation whose output shape depends
    on tensor values, such as a mixture of experts' routing in some implementations) as a ValueError that says so."""
    try:
        return function(*args, **kwargs)
    except (ValueError, TypeError, validate.FieldError):
        raise
    except Exception as error:  # torch's fake-tensor exceptions have no common base outside RuntimeError
        first = (str(error).strip().splitlines() or [""])[0][:200]
        raise ValueError(f"PyTorch could not build or trace {model_type} on the meta device or under fake tensors "
                         f"({type(error).__name__}: {first}); memmath measure CONFIG runs it for real") from error


def _nth(kinds, first: int, n: int) -> int:
    """The index of the n-th block (1 = the first) of the kind of block `first`."""
    return [j for j in range(first, len(kinds)) if kinds[j] == kinds[first]][n - 1]


@frozen
class TracedServing:
    """A traced prefill: the weights, the KV cache the prompt leaves, and the highest allocation while it runs."""

    model_type: str
    precision: str
    batch_size: int
    context_len: int
    total_params: int
    param_bytes: int
    cache_bytes: int  # what the forward leaves alive besides the last position's logits: the KV cache
    prefill_peak_bytes: int  # weights, buffers, the prompt and the forward's own tensors at their highest
    layer_kinds: dict
    traces: int
    seconds: float
    versions: dict
    basis: str = "traced"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def text(self) -> str:
        kinds = ", ".join(f"{n} x {kind}" for kind, n in self.layer_kinds.items())
        rows = [("Weights", self.param_bytes), ("KV cache after the prompt", self.cache_bytes),
                ("Peak while the prompt runs (prefill)", self.prefill_peak_bytes)]
        lines = [f"{self.model_type}: traced by PyTorch under fake tensors (not memmath's model, not a measurement)",
                 f"  {self.precision} weights and cache, batch {self.batch_size} x {self.context_len} tokens, one "
                 "forward with use_cache=True under no_grad",
                 f"  {self.total_params:,} parameters; blocks: {kinds}"]
        lines += [f"  {label:<40s} {n:>20,} B" for label, n in rows]
        return "\n".join(lines) + "\n"


def traced_inference(config, *, batch_size: int = 1, context_len: int = 4096, precision: str = "bf16",
                     attention: str = "sdpa", progress=None, full_trace: bool | None = None) -> TracedServing:
    """The traced memory of serving the config's model: one prefill of batch_size x context_len tokens with the KV
    cache on, under fake tensors (weights and cache in `precision`; the decode steps then add one token each)."""
    require_torch()
    settings = TraceSettings(precision=precision, batch_size=batch_size, seq_len=context_len, attention=attention)
    config = read_config(config)
    started = time.perf_counter()
    _quiet_transformers()
    hf = hf_config(config, settings)
    meta = _untraceable(config["model_type"], build_meta, hf, settings)
    blocks, _, _ = blocks_of(meta)
    counted = count(meta, settings)
    kinds = layer_kinds(blocks, 0, hf)
    composed, traces = _traced_blocks(meta, hf, settings, kinds, full_trace, progress or (lambda line: None),
                                      config["model_type"], serve=True)
    return TracedServing(model_type=config["model_type"], precision=settings.precision, batch_size=batch_size,
                         context_len=context_len, total_params=counted["total_params"],
                         param_bytes=counted["param_bytes"], cache_bytes=composed["cache_bytes"],
                         prefill_peak_bytes=composed["prefill_peak_bytes"], layer_kinds=_kind_counts(kinds),
                         traces=traces, seconds=round(time.perf_counter() - started, 2), versions=versions())


def _with_method(meta, settings):
    model = copy.deepcopy(meta) if settings.method != "full" else meta
    return apply_method(model, settings, blocks_of(model)[0])


def _quiet_transformers():
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    try:
        import transformers

        transformers.logging.set_verbosity_error()
    except Exception:  # pragma: no cover
        pass


def stderr_progress(line: str) -> None:
    print(f"memmath: {line} ...", file=sys.stderr, flush=True)
