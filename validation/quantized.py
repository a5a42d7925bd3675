"""QLoRA measured: bitsandbytes' 4-bit (NF4, FP4) and 8-bit bases with peft's LoRA on top, two steps.

    python -m validation.quantized            # measure the grid, append it to memmath_lessons/reference/data/measured_cpu.json
    python -m validation.quantized --print --only llama-gqa   # a subset, printed, nothing written

Each case builds the transformers model of validation/measure.py in the case's dtype, replaces
every linear weight that transformers' bitsandbytes integration converts (every nn.Linear and GPT-2
Conv1D in the blocks, and BERT's pooler; not lm_head or the classifier) by bitsandbytes 0.50.2's
`bnb.nn.Linear4bit` (quant_type nf4 or fp4, compress_statistics = double quantization, blocks of
64, uint8 storage, compute_dtype = the model's dtype) or `bnb.nn.Linear8bitLt` (LLM.int8,
has_fp16_weights=False, threshold 6.0), quantized on the CPU from the model's own weights; biases
stay in the model's dtype. Then peft's get_peft_model puts its bitsandbytes LoRA layers on the
targets (peft.tuners.lora.bnb), and measure.measure runs the two steps. peft's
prepare_model_for_kbit_training is NOT applied: it upcasts every unquantized parameter to fp32,
which memmath models as precision="fp32", not as a 16-bit base.

Besides measure.measure's columns it records the quantization state, each storage once:
quant_absmax_bytes (fp32 absmax per 64 values, or uint8 with double quantization; 8-bit: the fp32
row scales SCB), quant_nested_absmax_bytes and quant_offset_bytes (double quantization),
quant_code_bytes (the 16-value code map per matrix, and the 256-value nested map), their sum
quantization_constant_bytes, base_params (the unquantized element count), and held_by_ctx_bytes:
inputs that bitsandbytes' autograd functions keep as ctx attributes, outside autograd's saved
tensors (MatMul8bitFp keeps ctx.A; MatMul4Bit keeps only the packed weight, a parameter), not yet
among the saved storages. Every case here was recorded after memmath's QLoRA layout code was
written: held_out, reported apart (validation/report.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from . import measure as M

GROUP_4BIT = "QLoRA 4-bit"
GROUP_8BIT = "QLoRA 8-bit base"
QUANT_BLOCK = 64  # bitsandbytes' Linear4bit default blocksize
INT8_FITTED = ("gpt2", "bert", "llama-gqa")  # hf_activations' int8 ctx.A inputs were written from these
INT8_THRESHOLD = 6.0  # transformers' BitsAndBytesConfig llm_int8_threshold default


@dataclass(frozen=True)
class QuantCase(M.Case):
    """A measure.Case with the base stored by bitsandbytes: quant_type nf4, fp4 or int8."""

    quant_type: str = "nf4"
    double_quant: bool = True

    @property
    def case_id(self) -> str:
        base = self.quant_type + ("-dq" if self.double_quant else "")
        return f"qlora-{base}/" + super().case_id

    @property
    def held_out(self) -> bool:
        # Recorded after memmath's QLoRA(quant_type=..., layout="bitsandbytes") was written, except the
        # 8-bit cases of the three shapes whose ctx-held inputs were modelled from their measurement.
        return not (self.quant_type == "int8" and self.shape in INT8_FITTED)


def grid() -> list[QuantCase]:
    """NF4 and FP4, with and without double quantization, and the 8-bit base, across shapes."""
    cases = []
    shapes = ("llama-mha", "llama-gqa", "llama-gqa-tied", "gpt2", "bert", "qwen2-gqa", "mistral-gqa", "llama-wide",
              "gpt2-wide", "bert-wide")
    four_bit = list(itertools.product(("nf4", "fp4"), (True, False)))
    for i, shape in enumerate(shapes):
        for j, (qt, dq) in enumerate(four_bit):
            k = i + j
            cases.append(QuantCase(shape, precision=("bf16", "fp32")[k % 2], method="lora",
                                   lora_targets=("all", "qv")[(k // 2) % 2], adapter_format=("fp32", "bf16")[k % 3 == 2
                                   and k % 2 == 0], group=GROUP_4BIT, quant_type=qt, double_quant=dq,
                                   batch_size=(2, 1, 3)[k % 3], seq_len=(64, 48, 32)[k % 3]))
        # QLoRA's own recipe: NF4 with double quantization, bf16 compute, every linear, fp32 adapters;
        # with checkpointing and eager attention with dropout, and with another optimizer.
        cases.append(QuantCase(shape, precision="bf16", method="lora", lora_targets="all", lora_rank=16,
                               checkpointing=True, group=GROUP_4BIT, quant_type="nf4", double_quant=True))
        cases.append(QuantCase(shape, precision="bf16", method="lora", lora_targets="qv", attention="eager",
                               dropout=True, optimizer="sgd_momentum", group=GROUP_4BIT, quant_type="nf4",
                               double_quant=True, batch_size=2, seq_len=40))
        # Other sizes: rank 4 on every linear with bf16 adapters at a wide batch; FP4 with double
        # quantization under checkpointing and eager attention with dropout, one long sequence.
        cases.append(QuantCase(shape, precision="bf16", method="lora", lora_targets="all", lora_rank=4,
                               adapter_format="bf16", group=GROUP_4BIT, quant_type="nf4", double_quant=False,
                               batch_size=4, seq_len=16))
        cases.append(QuantCase(shape, precision="bf16", method="lora", lora_targets="qv", attention="eager",
                               dropout=True, checkpointing=True, group=GROUP_4BIT, quant_type="fp4",
                               double_quant=True, batch_size=1, seq_len=72))
        for precision, targets in (("bf16", "all"), ("fp32", "qv")):
            cases.append(QuantCase(shape, precision=precision, method="lora", lora_targets=targets, group=GROUP_8BIT,
                                   quant_type="int8", double_quant=False))
    return cases


# ---- building ------------------------------------------------------------------------------------
def _quantized_modules(model, family):
    """(parent, name, module) of every linear transformers' integration converts (not lm_head/classifier)."""
    import torch
    from transformers.pytorch_utils import Conv1D

    skip = {"lm_head", "classifier", "score"}
    found = []
    for parent_name, parent in model.named_modules():
        for name, child in parent.named_children():
            if name in skip and parent_name == "":
                continue
            if isinstance(child, (torch.nn.Linear, Conv1D)):
                found.append((parent, name, child))
    return found


def quantize(model, case: QuantCase, dtype):
    """Replace the linear layers by bitsandbytes' quantized ones, in place; returns how many."""
    import bitsandbytes as bnb
    import torch
    from transformers.pytorch_utils import Conv1D

    family = M.SHAPES[case.shape]["family"]
    count = 0
    for parent, name, child in _quantized_modules(model, family):
        weight = child.weight.data
        if isinstance(child, Conv1D):  # GPT-2 stores (in, out); bitsandbytes (out, in), as transformers transposes
            weight = weight.t().contiguous()
        d_out, d_in = weight.shape
        bias = child.bias
        if case.quant_type == "int8":
            layer = bnb.nn.Linear8bitLt(d_in, d_out, bias=bias is not None, has_fp16_weights=False,
                                        threshold=INT8_THRESHOLD)
            layer.weight = bnb.nn.Int8Params(weight.clone(), requires_grad=False, has_fp16_weights=False)
        else:
            layer = bnb.nn.Linear4bit(d_in, d_out, bias=bias is not None, compute_dtype=dtype,
                                      compress_statistics=case.double_quant, quant_type=case.quant_type,
                                      quant_storage=torch.uint8)
            layer.weight = bnb.nn.Params4bit(weight.clone(), requires_grad=False, blocksize=QUANT_BLOCK,
                                             compress_statistics=case.double_quant, quant_type=case.quant_type,
                                             quant_storage=torch.uint8)
        if bias is not None:
            layer.bias = torch.nn.Parameter(bias.data.clone(), requires_grad=False)
        layer = layer.to("cpu")  # bitsandbytes quantizes here (on the CPU since 0.48)
        setattr(parent, name, layer)
        count += 1
    return count


def quant_state_parts(model) -> dict[str, list]:
    """The tensors of every quantization state, by kind (see the module docstring)."""
    import torch

    parts = {"absmax": [], "nested_absmax": [], "offset": [], "code": [], "row_scales_and_copies": []}
    for module in model.modules():
        weight = getattr(module, "weight", None)
        qs = getattr(weight, "quant_state", None)
        if qs is not None:
            parts["absmax"].append(qs.absmax)
            parts["code"].append(qs.code)
            if qs.nested:
                parts["offset"].append(qs.offset)
                parts["nested_absmax"].append(qs.state2.absmax)
                parts["code"].append(qs.state2.code)
        state = getattr(module, "state", None)
        if weight is not None and (hasattr(weight, "SCB") or hasattr(state, "SCB")):
            for t in (getattr(weight, "SCB", None), getattr(state, "SCB", None)):
                if torch.is_tensor(t):
                    parts["absmax"].append(t)
            cb = getattr(state, "CB", None)  # after a forward, the weight's own storage (weight.data = state.CB)
            if torch.is_tensor(cb) and cb.untyped_storage().data_ptr() != weight.untyped_storage().data_ptr():
                parts["row_scales_and_copies"].append(cb)
    return parts


def build(case: QuantCase, device: str = "cpu"):
    """(model, optimizer, batch) as measure.build makes them, with the base quantized before peft."""
    import peft
    import torch
    import transformers

    if device != "cpu":
        raise ValueError("validation/quantized.py measures on the CPU (bitsandbytes quantizes there)")
    family = M.SHAPES[case.shape]["family"]
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[case.precision]
    torch.manual_seed(0)
    config = M._hf_config(case)
    model_class = {"gpt2": transformers.GPT2LMHeadModel, "llama": transformers.LlamaForCausalLM,
                   "bert": transformers.BertForSequenceClassification}[family]
    if M.SHAPES[case.shape].get("arch") not in (None, "gpt2", "llama"):
        model_class = transformers.AutoModelForCausalLM.from_config
    model = model_class(config).to(dtype=dtype)
    if case.checkpointing:
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    quantize(model, case, dtype)
    # Conv1D is gone (the bitsandbytes layers are (out, in)): fan_in_fan_out stays False.
    lora_config = peft.LoraConfig(r=case.lora_rank, lora_alpha=M.LORA_ALPHA, lora_dropout=0.0, bias="none",
                                  target_modules=M.PEFT_TARGETS[(M._peft_family(case), case.lora_targets)])
    model = peft.get_peft_model(model, lora_config, autocast_adapter_dtype=case.adapter_format == "fp32")
    model.train()
    optimizer = M.make_optimizer([p for p in model.parameters() if p.requires_grad], case.optimizer)
    parts = quant_state_parts(model)
    model.resident_tensors = [t for ts in parts.values() for t in ts]
    generator = torch.Generator().manual_seed(1)
    vocab = M.SHAPES[case.shape]["vocab_size"]
    input_ids = torch.randint(1, vocab, (case.batch_size, case.seq_len), generator=generator)
    labels = (torch.arange(case.batch_size) % M.SHAPES[case.shape]["num_labels"]) if family == "bert" else input_ids.clone()
    return model, optimizer, {"input_ids": input_ids, "labels": labels}


def _held_by_ctx(case: QuantCase) -> int:
    """Bytes of 8-bit layers' inputs that MatMul8bitFp keeps as ctx.A and autograd's saved tensors do not
    hold already: one forward of a fresh model, with the same saved-tensor recorder."""
    import torch

    from bitsandbytes.nn import Linear8bitLt

    if case.quant_type != "int8":
        return 0  # MatMul4Bit keeps ctx.tensors = (None, packed weight): a parameter
    model, _, batch = build(case)
    recorder = M.SavedTensorRecorder(model, M.model_blocks(model, M.SHAPES[case.shape]["family"]))
    inputs = {}

    def keep(module, args):
        x = args[0]
        if torch.is_grad_enabled() and x.requires_grad:
            ptr, nbytes = M._storage_key(x)
            inputs[ptr] = nbytes

    handles = [m.register_forward_pre_hook(keep) for m in model.modules() if isinstance(m, Linear8bitLt)]
    with recorder.hooks():
        loss = model(**batch).loss
    for h in handles:
        h.remove()
    recorder.close()
    del loss
    return sum(n for ptr, n in inputs.items() if ptr not in recorder.nbytes and ptr not in recorder.excluded)


def measure_case(case: QuantCase) -> dict:
    """measure.measure's record of `case`, plus the quantization state's bytes and the base's element count."""
    import torch

    result = M.measure(case, "cpu", build_fn=build)
    model, _, _ = build(case)
    # the step does not change the states' sizes; a fresh copy shows the layout
    parts = quant_state_parts(model)
    seen = set()
    sizes = {}
    for kind, tensors in parts.items():
        total = 0
        for t in tensors:
            ptr, nbytes = M._storage_key(t)
            if ptr not in seen:
                seen.add(ptr)
                total += nbytes
        sizes[kind] = total
    base_params = 0
    for name, p in model.named_parameters():
        if M._is_adapter(name):
            continue
        qs = getattr(p, "quant_state", None)
        base_params += int(torch.Size(qs.shape).numel()) if qs is not None else p.numel()
    result.update({
        "total_params": base_params,
        "quant_absmax_bytes": sizes["absmax"], "quant_nested_absmax_bytes": sizes["nested_absmax"],
        "quant_offset_bytes": sizes["offset"], "quant_code_bytes": sizes["code"],
        "quant_copies_bytes": sizes["row_scales_and_copies"],
        "quantization_constant_bytes": sum(sizes.values()),
        "quantized_matrices": len({M._storage_key(m.weight)[0] for m in model.modules()
                                   if getattr(getattr(m, "weight", None), "quant_state", None) is not None
                                   or hasattr(getattr(m, "weight", None), "SCB")}),
        "held_by_ctx_bytes": _held_by_ctx(case),
    })
    del model
    return result


def run(cases, progress=True) -> list[dict]:
    M.configure_torch()
    records = []
    for i, case in enumerate(cases, 1):
        measured = measure_case(case)
        if progress:
            print(f"[{i:3d}/{len(cases)}] {case.case_id}  params {measured['param_bytes']:,} constants "
                  f"{measured['quantization_constant_bytes']:,} saved {measured['saved_bytes']:,} peak "
                  f"{measured['peak_step1_bytes']:,} / {measured['peak_bytes']:,}", file=sys.stderr)
        records.append({"config": case.config(), "measured": measured})
    return records


def append(records, key: str, out: Path = M.DEFAULT_OUT):
    """Append records under `key` of the data file; a case id already there is kept as recorded."""
    document = json.loads(out.read_text(encoding="utf-8"))
    old = document.get(key, [])
    have = {r["config"]["case_id"] for r in old}
    document[key] = old + [r for r in records if r["config"]["case_id"] not in have]
    versions = M.versions()
    if versions != document["versions"]:
        document.setdefault(f"versions_{key}", versions)
    out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return len(document[key]) - len(old)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None)
    parser.add_argument("--print", action="store_true")
    args = parser.parse_args(argv)
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)  # bitsandbytes warns of the fp16 cast on every 8-bit call
    cases = [c for c in grid() if not args.only or args.only in c.case_id]
    have = set()
    if not args.print:
        have = {r["config"]["case_id"] for r in json.loads(M.DEFAULT_OUT.read_text())["quantized_cases"]} \
            if "quantized_cases" in json.loads(M.DEFAULT_OUT.read_text()) else set()
    records = run([c for c in cases if c.case_id not in have])
    if args.print:
        json.dump(records, sys.stdout, indent=1)
        return
    print(f"appended {append(records, 'quantized_cases')} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
