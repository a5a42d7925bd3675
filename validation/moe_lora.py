"""Measure LoRA on mixtures of experts as peft 0.21 makes it, and record it for memmath's tests.

    python -m validation.moe_lora            # every case, CPU -> memmath_lessons/reference/data/measured_moe_lora.json
    python -m validation.moe_lora --only qwen3 --print --explain   # some cases, every saved storage listed

On transformers 5.24 the routed experts of Mixtral, Qwen2-MoE and Qwen3-MoE are two 3-D Parameters
(gate_up_proj E x 2I x h, down_proj E x h x I) and the router a module holding an E x h Parameter; peft 0.21
adapts them with lora.ParamWrapper (peft/tuners/lora/layer.py): each forward builds W + scaling * B A through
torch's parametrize and the module reads that. target_modules="all-linear" reaches them on Mixtral and on
Qwen3-MoE, whose configs peft converts (utils/transformers_weight_conversion.py: the transformers-4 names w1, w3,
w2 and gate, or gate_proj, up_proj, down_proj and gate, onto gate_up_proj at rank 2r, down_proj at rank r and
gate.weight at rank r); it does not convert qwen2_moe itself, so there "all-linear" is the attention, the shared
expert and shared_expert_gate, and the router and experts are reached through target_parameters (with the rank
pattern the conversion would give).

Each case runs two training steps with validation/measure.py's measure() (saved tensors through
saved_tensors_hooks, each storage once, parameters and buffers left out; the profiler's peak per phase; the
bytes of parameters, gradients and optimizer states), on measure.py's tiny MoE shapes and wider ones below.
Every case was recorded after memmath's model of these adapters was written (ModelShape.lora_adapters,
hf_activations._wrapped_weight and _moe, peak.py's expert-weight gradient): all held out.

Targets are memmath's names (models.LORA_TARGETS) joined by "+", or "all-linear" (peft's string, memmath's
"all"); peft_lora_config() says how each is asked of peft. torch, transformers and peft are imported here only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from unittest import mock

from . import measure as M

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "memmath" / "reference" / "data" / "measured_moe_lora.json"

# Wider shapes than measure.py's three tiny MoE ones (3 blocks, h 64, 4 experts, 2 per token): more experts,
# other top-k, Qwen3-MoE without renormalized top-k weights, a wider shared expert.
WIDE_SHAPES = {
    "mixtral-moe-wide": dict(family="llama", arch="mixtral", n_layers=2, hidden_size=128, n_heads=8, n_kv_heads=2,
                             intermediate_size=160, vocab_size=512, tied_embeddings=False,
                             hf_config=dict(num_local_experts=8, num_experts_per_tok=2)),
    "qwen2moe-moe-wide": dict(family="llama", arch="qwen2_moe", n_layers=2, hidden_size=128, n_heads=8, n_kv_heads=8,
                              intermediate_size=256, vocab_size=512, tied_embeddings=False,
                              hf_config=dict(num_experts=6, num_experts_per_tok=3, moe_intermediate_size=64,
                                             shared_expert_intermediate_size=128)),
    "qwen3moe-moe-wide": dict(family="llama", arch="qwen3_moe", head_dim=16, n_layers=2, hidden_size=128, n_heads=8,
                              n_kv_heads=4, intermediate_size=256, vocab_size=512, tied_embeddings=True,
                              hf_config=dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=80,
                                             norm_topk_prob=False)),
}
GROUP = "LoRA on experts"

# memmath target names -> the module names peft adapts.
_PEFT_NAMES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
               "down": "down_proj", "shared_gate": "shared_expert_gate"}
# The transformers-4 names peft 0.21 converts onto the router and the routed experts (its
# _MOE_TARGET_MODULE_MAPPING): for mixtral and for the types transformers maps onto qwen2_moe's conversion.
_CONVERTED = {"mixtral": {"router": ["gate"], "experts": ["w1", "w3", "w2"]},
              "qwen3_moe": {"router": ["gate"], "experts": ["gate_proj", "up_proj", "down_proj"]}}
# Where peft does not convert (qwen2_moe): the parameters themselves.
_PARAMETERS = {"router": ["gate.weight"], "experts": ["experts.gate_up_proj", "experts.down_proj"]}


def peft_lora_config(arch: str, targets: str, rank: int, alpha: int = M.LORA_ALPHA):
    """The peft.LoraConfig that adapts memmath's `targets` ("all-linear", or names joined by "+") on `arch`."""
    import peft

    common = dict(r=rank, lora_alpha=alpha, lora_dropout=0.0, bias="none")  # ParamWrapper refuses dropout
    if targets == "all-linear":
        return peft.LoraConfig(target_modules="all-linear", **common)
    modules, parameters = [], []
    for name in targets.split("+"):
        if name in ("router", "experts"):
            if arch in _CONVERTED:
                modules += _CONVERTED[arch][name]
            else:
                parameters += _PARAMETERS[name]
        else:
            modules.append(_PEFT_NAMES[name])
    extra = {}
    if "experts.gate_up_proj" in parameters:
        # The rank and alpha peft's conversion gives the fused gate and up elsewhere (r * 2, alpha * 2).
        extra = dict(rank_pattern={r".*\.gate_up_proj": 2 * rank}, alpha_pattern={r".*\.gate_up_proj": 2 * alpha})
    return peft.LoraConfig(target_modules=modules or None, target_parameters=parameters or None, **common, **extra)


def grid() -> list[M.Case]:
    """The recorded cases: per family, what all-linear adapts and the router and experts in other combinations,
    both adapter formats, fp32 and bf16, eager attention with dropout, checkpointing, SGD with momentum."""
    def case(shape, targets, **settings):
        return M.Case(shape, method="lora", lora_targets=targets, group=GROUP, **settings)

    cases = []
    for shape, arch in (("mixtral-moe", "mixtral"), ("qwen2moe-moe", "qwen2_moe"), ("qwen3moe-moe", "qwen3_moe")):
        experts_and_router = "q+k+v+o+router+experts" if arch == "qwen2_moe" else "router+experts"
        cases += [
            case(shape, "all-linear", precision="bf16", adapter_format="fp32", batch_size=2, seq_len=64),
            case(shape, "experts", precision="bf16", adapter_format="bf16", batch_size=1, seq_len=48),
            case(shape, experts_and_router, precision="fp32", adapter_format="fp32", attention="eager", dropout=True,
                 batch_size=1, seq_len=48),
            case(shape, "all-linear", precision="bf16", adapter_format="fp32", checkpointing=True, batch_size=2,
                 seq_len=32),
            case(shape, "shared_gate+router" if arch == "qwen2_moe" else "router", precision="bf16",
                 adapter_format="bf16", optimizer="sgd_momentum", batch_size=3, seq_len=40),
        ]
    for shape, spec in WIDE_SHAPES.items():
        targets = "q+k+v+o+router+experts" if spec["arch"] == "qwen2_moe" else "all-linear"
        cases += [
            case(shape, targets, precision="bf16", adapter_format="fp32", batch_size=2, seq_len=64),
            case(shape, "experts", precision="bf16", adapter_format="bf16", checkpointing=True, batch_size=1,
                 seq_len=64),
        ]
    return cases


def build(case: M.Case, device: str = "cpu"):
    """(model, optimizer, batch) as measure.build makes them, with peft_lora_config's adapters."""
    import peft
    import torch
    import transformers

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[case.precision]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(M._hf_config(case))
    model = model.to(device=device, dtype=dtype)
    if case.checkpointing:
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    config = peft_lora_config(M.SHAPES[case.shape]["arch"], case.lora_targets, case.lora_rank)
    # autocast_adapter_dtype=True (peft's default) keeps adapters in fp32 on a 16-bit base.
    model = peft.get_peft_model(model, config, autocast_adapter_dtype=case.adapter_format == "fp32")
    model.train()
    optimizer = M.make_optimizer([p for p in model.parameters() if p.requires_grad], case.optimizer)
    generator = torch.Generator().manual_seed(1)
    vocab = M.SHAPES[case.shape]["vocab_size"]
    input_ids = torch.randint(1, vocab, (case.batch_size, case.seq_len), generator=generator).to(device)
    return model, optimizer, {"input_ids": input_ids, "labels": input_ids.clone()}


def run(cases, explain=False) -> list[dict]:
    M.configure_torch()
    records = []
    with mock.patch.dict(M.SHAPES, WIDE_SHAPES):  # measure() and Case.config() look shapes up there
        for i, case in enumerate(cases, 1):
            started = time.perf_counter()
            measured = M.measure(case, "cpu", explain=explain, build_fn=build)
            print(f"[{i:3d}/{len(cases)}] {case.case_id}  trainable {measured['trainable_params']:,}  saved "
                  f"{measured['saved_bytes']:,} B  peak {measured['peak_step1_bytes']:,} / {measured['peak_bytes']:,} B"
                  f"  ({time.perf_counter() - started:.2f} s)", file=sys.stderr)
            config = dict(case.config(), held_out=True)  # recorded after the prediction code: every case
            records.append({"config": config, "measured": measured})
    return records


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", default=None, help="measure only cases whose id contains this text")
    parser.add_argument("--print", action="store_true", help="print the records instead of writing a file")
    parser.add_argument("--explain", action="store_true", help="list every saved storage (to stderr)")
    args = parser.parse_args(argv)

    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    cases = [c for c in grid() if not args.only or args.only in c.case_id]
    records = run(cases, explain=args.explain)
    if args.print:
        json.dump(records, sys.stdout, indent=1)
        return
    document = {
        "schema": M.SCHEMA_VERSION,
        "description": "LoRA on mixtures of experts (router, routed experts, shared expert), two training steps per "
                       "case, measured by validation/moe_lora.py; see memmath_lessons/reference/measured.py "
                       "(load_measured_moe_lora). Every case held out: recorded after the prediction code.",
        "device": "cpu",
        "threads": 1,
        "versions": M.versions(),
        "dropout_p": M.DROPOUT_P,
        "lora_alpha": M.LORA_ALPHA,
        "shapes": {name: dict(M.SHAPES.get(name) or WIDE_SHAPES[name]) for name in sorted({c.shape for c in cases})},
        "cases": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
