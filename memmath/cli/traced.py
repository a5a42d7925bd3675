"""`memmath train CONFIG --traced` and `memmath infer CONFIG --traced`: memmath.traced's answers on the command line.

The options each command already has are read here; one the trace cannot honour (several GPUs, QLoRA, a quantized
serving format, ...) is refused by name. With --gpu or --gpu-memory the verdict is the traced peak plus the CUDA
context against the card's memory.
"""

from __future__ import annotations

import json

from memmath import report, validate
from memmath.gpus import FIT_MARGIN, check_fit
from memmath.traced import (PRECISIONS, TorchMissing, TraceSettings, read_config, stderr_progress, traced_inference,
                     traced_training)

from .options import field_flags, gpu_and_reserve

_TRAIN_OPTIONS_TRACED = {"precision", "optimizer", "batch_size", "seq_len", "checkpointing", "attention", "method",
                         "rank", "targets", "trainable_layers", "json", "gpu", "gpu_memory", "reserve", "unit", "model",
                         "command", "traced"}


def settings_from_train_args(args, config: dict) -> TraceSettings:
    """TraceSettings from `memmath train`'s options; an option the trace cannot honour is refused by name."""
    for name, value in vars(args).items():
        if name not in _TRAIN_OPTIONS_TRACED and value not in (None, False, "full", "auto"):
            option = field_flags().get(name, "--" + name.replace("_", "-"))
            raise validate.FieldError("model", f"{option} has no traced answer; a trace takes --precision (fp32, bf16, "
                                      "fp16), --optimizer, --method full|freeze|lora, --batch, --seq, --checkpointing "
                                      "and --attention, on one GPU")
    method = args.method or "full"
    values = dict(method=method)
    if method == "freeze":
        layers = config.get("num_hidden_layers") or (config.get("text_config") or {}).get("num_hidden_layers")
        if args.trainable_layers is None or not isinstance(layers, int):
            raise validate.FieldError("model", "--method freeze needs --trainable-layers K (and a config with "
                                      "num_hidden_layers)")
        values["frozen_layers"] = max(layers - args.trainable_layers, 0)
    if method == "lora":
        if args.rank is not None:
            values["lora_rank"] = args.rank
        if args.targets is not None:
            values["lora_targets"] = tuple(args.targets)
    for name in ("precision", "optimizer", "batch_size", "seq_len", "checkpointing", "attention"):
        if getattr(args, name, None) is not None:
            values[name] = getattr(args, name)
    values.setdefault("seq_len", 2048)
    return TraceSettings(**values)


def run_infer(args, out, style=None) -> int:
    """`memmath infer CONFIG --traced`: one traced prefill (weights, KV cache, its peak); with a GPU, whether it fits."""
    weights = args.weights_format or "bf16"
    if weights not in PRECISIONS or (args.kv_format or weights) != weights:
        raise validate.FieldError("model", f"a traced answer serves in {', '.join(PRECISIONS)}, the weights and the "
                                  f"KV cache in one format; got --weights {weights} --kv {args.kv_format or weights}")
    try:
        answer = traced_inference(args.model, batch_size=args.batch_size or 1, context_len=args.context_len or 4096,
                                  precision=weights, attention=args.attention or "sdpa", progress=stderr_progress)
    except TorchMissing as error:
        raise ValueError(str(error)) from None
    return _write_traced(args, out, answer, answer.prefill_peak_bytes, style)


def _write_traced(args, out, answer, peak: int, style=None) -> int:
    """The traced answer as text or JSON, and with --gpu or --gpu-memory the verdict on its peak and the CUDA context
    (check_fit with FIT_MARGIN of the peak kept free, as every answer is judged)."""
    gpu, reserve = gpu_and_reserve(args)
    fit = None if gpu is None else check_fit(peak, gpu, reserved_bytes=reserve, margin=FIT_MARGIN)
    out.write(json.dumps(report.traced_json(answer, fit), indent=2) + "\n" if args.json else
              report.traced_text(answer, fit, peak, reserve, unit=getattr(args, "unit", "GB"),
                                 **({"style": style} if style is not None else {})))
    return 1 if fit is not None and not fit.fits else 0


def run_train(args, out, style=None) -> int:
    """`memmath train CONFIG --traced`: the traced answer as text or JSON; with a GPU, whether its peak fits."""
    try:
        config = read_config(args.model)
        settings = settings_from_train_args(args, config)
        answer = traced_training(config, settings, progress=stderr_progress)
    except TorchMissing as error:
        raise ValueError(str(error)) from None
    return _write_traced(args, out, answer, answer.peak_step2_bytes, style)
