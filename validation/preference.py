"""Measure preference training (DPO) with a frozen reference model, and record it for memmath's tests.

    python -m validation.preference            # every case, CPU -> memmath_lessons/reference/data/measured_preference.json
    python -m validation.preference --only copy --print --explain   # some cases, every saved storage listed

The loop is written here, as the DPO paper states the loss (Rafailov et al. 2023, eq. 7), without a trainer
library: each of the case's b prompts gives a chosen and a rejected sequence (random token ids, chosen first, as
TRL's concatenated_forward stacks them), so the policy runs 2b sequences; per sequence

    logp = log_softmax(model(input_ids).logits.float(), -1)           # fp32 over the vocabulary
    pi   = gather(logp[:, :-1], 2, labels[:, 1:, None]).sum over the tokens   (labels = input_ids, a batch tensor)
    loss = -logsigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))).mean()

The reference log-probabilities ref come, before the policy's forward and inside the profiled forward phase, from
  copy          a frozen copy of the model (validation/measure.py's build of the same seed, Full(), in eval mode,
                requires_grad False) under torch.no_grad
  adapters_off  the policy itself under torch.no_grad and peft's `with model.disable_adapter():` (LoRA only)
  precomputed   2b fp32 values made before the step, in the batch
Then loss.backward(), optimizer.step(), zero_grad(set_to_none=True): two steps, as validation/measure.py measures
(the saved tensors of step 1's forward through saved_tensors_hooks, the profiler's peak per phase of each step,
parameters with the copy's, gradients, states). The models are measure.py's SHAPES (gpt2, llama-gqa). Every case was
recorded after memmath/preference.py was written: all held out. torch, transformers and peft are imported here only.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from . import measure as M

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "memmath" / "reference" / "data" / "measured_preference.json"
GROUP = "preference (DPO)"
BETA = 0.1


@dataclass(frozen=True)
class PreferenceCase(M.Case):
    """A measure.Case trained with DPO: batch_size prompts (2 x batch_size sequences), `reference` one of copy,
    adapters_off, precomputed."""

    reference: str = "copy"
    group: str = GROUP

    @property
    def case_id(self) -> str:
        return f"dpo-{self.reference}/" + M.Case.case_id.fget(self)

    @property
    def held_out(self) -> bool:
        return True  # every case recorded after the prediction code it tests


def grid() -> list[PreferenceCase]:
    """GPT-2 and LLaMA (grouped-query) at measure.py's small widths; full finetuning with a reference copy or
    precomputed log-probs, LoRA with adapters off, a copy or precomputed log-probs, freezing with a copy; bf16 and
    fp32; eager attention, checkpointing and SGD once each."""
    cases = []
    for shape in ("gpt2", "llama-gqa"):
        cases += [
            PreferenceCase(shape, precision="bf16", method="full", reference="copy", batch_size=2, seq_len=64),
            PreferenceCase(shape, precision="fp32", method="full", reference="copy", batch_size=1, seq_len=48),
            PreferenceCase(shape, precision="bf16", method="full", reference="precomputed", batch_size=2, seq_len=64),
            PreferenceCase(shape, precision="bf16", method="lora", lora_targets="all", adapter_format="fp32",
                           reference="adapters_off", batch_size=2, seq_len=64),
            PreferenceCase(shape, precision="fp32", method="lora", reference="adapters_off", batch_size=3,
                           seq_len=40),
            PreferenceCase(shape, precision="bf16", method="lora", lora_targets="all", adapter_format="bf16",
                           reference="adapters_off", checkpointing=True, batch_size=2, seq_len=64),
            PreferenceCase(shape, precision="bf16", method="lora", reference="copy", batch_size=2, seq_len=48),
            PreferenceCase(shape, precision="fp32", method="lora", lora_targets="all", reference="precomputed",
                           attention="eager", batch_size=2, seq_len=32),
            PreferenceCase(shape, precision="bf16", method="freeze", frozen_layers=1, reference="copy",
                           optimizer="sgd_momentum", batch_size=2, seq_len=56),
        ]
    ids = [c.case_id for c in cases]
    assert len(set(ids)) == len(ids), "duplicate case ids"
    return cases


def sequence_logps(logits, labels):
    """Summed log-probabilities of each sequence's next tokens: log_softmax over the vocabulary (fp32), gathered
    at the labels shifted by one (labels[:, 1:] for the positions :-1), summed per sequence."""
    import torch

    logp = torch.log_softmax(logits.float(), dim=-1)
    return torch.gather(logp[:, :-1], 2, labels[:, 1:].unsqueeze(-1)).squeeze(-1).sum(-1)


def dpo_loss(policy, reference, beta: float = BETA):
    """-logsigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))), averaged over the prompts (chosen first)."""
    import torch.nn.functional as F

    b = policy.shape[0] // 2
    margin = (policy[:b] - reference[:b]) - (policy[b:] - reference[b:])
    return -F.logsigmoid(beta * margin).mean()


def build(case: PreferenceCase, device: str = "cpu"):
    """(policy, optimizer, batch, reference model or None): measure.build at 2 x batch_size sequences; the copy
    is measure.build's Full() model of the same seed (the base without adapters), frozen, in eval mode."""
    import torch

    if case.reference == "adapters_off" and case.method != "lora":
        raise ValueError("adapters_off needs a LoRA case")
    sequences = replace(case, batch_size=2 * case.batch_size)
    model, optimizer, batch = M.build(sequences, device)
    reference = None
    if case.reference == "copy":
        if case.method == "lora":
            reference, _, _ = M.build(replace(sequences, method="full", checkpointing=False), device)
        else:
            reference = copy.deepcopy(model)
        reference.requires_grad_(False)
        reference.eval()
    elif case.reference == "precomputed":
        generator = torch.Generator().manual_seed(2)
        batch["reference_logps"] = (-100 * torch.rand(2 * case.batch_size, generator=generator)).to(device)
    return model, optimizer, batch, reference


def measure(case: PreferenceCase, device: str = "cpu", explain: bool = False) -> dict:
    """Two DPO steps of `case` (see the module docstring), recorded as validation/measure.py's measure() records."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    family = M.SHAPES[case.shape]["family"]
    model, optimizer, batch, reference = build(case, device)
    blocks = M.model_blocks(model, family)
    params = list(model.parameters())
    reference_params = list(reference.parameters()) if reference is not None else []
    trainable = [p for p in params if p.requires_grad]
    adapters = [p for n, p in model.named_parameters() if M._is_adapter(n)]
    reference_buffers = list(reference.buffers()) if reference is not None else []
    resident = M._unique_bytes(itertools.chain(params, model.buffers(), reference_params, reference_buffers,
                                               batch.values()))
    recorder = M.SavedTensorRecorder(model, blocks)
    recorder.excluded |= {M._storage_key(t)[0] for t in itertools.chain(reference_params, reference_buffers)}
    phases = ("forward", "backward", "optimizer_step")
    names = [f"step{k}/{phase}" for k in range(1, M.STEPS + 1) for phase in phases]
    ids, labels = batch["input_ids"], batch["labels"]

    def reference_logps():
        if case.reference == "precomputed":
            return batch["reference_logps"]
        with torch.no_grad():
            if case.reference == "copy":
                return sequence_logps(reference(input_ids=ids).logits, labels)
            with model.disable_adapter():
                return sequence_logps(model(input_ids=ids).logits, labels)

    loss = ref = None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for k in range(1, M.STEPS + 1):
            hooks = recorder.hooks() if k == 1 else contextlib.nullcontext()
            with record_function(f"step{k}/forward"):
                ref = reference_logps()  # the previous step's lives until this replaces it
                with hooks:
                    logits = model(input_ids=ids).logits
                    policy = sequence_logps(logits, labels)
                    del logits
                    loss = dpo_loss(policy, ref)
                    del policy
            with record_function(f"step{k}/backward"):
                loss.backward()
            with record_function(f"step{k}/optimizer_step"):
                optimizer.step()
            if k == 1:
                grad_bytes = M._unique_bytes(p.grad for p in params)
            optimizer.zero_grad(set_to_none=True)
    recorder.close()
    if explain:
        for region, shape, dtype, nbytes, op in recorder.log:
            where = "outside" if region < 0 else f"block {region}"
            print(f"  {where:8s} {str(shape):18s} {dtype:9s} {nbytes:>9,} {op}", file=sys.stderr)
    per_block, outside = recorder.per_region(len(blocks))
    states = {}
    for state in optimizer.state.values():
        for key, value in state.items():
            if torch.is_tensor(value):
                states[key] = states.get(key, 0) + value.untyped_storage().nbytes()
    result = {
        "total_params": sum(p.numel() for n, p in model.named_parameters() if not M._is_adapter(n)),
        "trainable_params": sum(p.numel() for p in trainable),
        "adapter_params": sum(p.numel() for p in adapters),
        "trainable_tensors": len(trainable),
        "param_bytes": M._unique_bytes(itertools.chain(params, reference_params)),
        "reference_param_bytes": M._unique_bytes(reference_params),
        "grad_bytes": grad_bytes,
        "optimizer_state_bytes": sum(states.values()),
        "optimizer_state_detail": dict(sorted(states.items())),
        "saved_bytes": sum(per_block) + outside,
        "saved_per_layer": per_block,
        "saved_outside_layers": outside,
        "resident_before_bytes": resident,
        "sequences": 2 * case.batch_size,
    }
    peaks, _ = M.phase_peaks(prof, names)
    for k in range(1, M.STEPS + 1):
        for phase in phases:
            result[f"peak_step{k}_{phase}_bytes"] = resident + peaks[f"step{k}/{phase}"]
        result[f"peak_step{k}_bytes"] = max(result[f"peak_step{k}_{phase}_bytes"] for phase in phases)
    result["peak_bytes"] = result[f"peak_step{M.STEPS}_bytes"]
    return result  # the models, the optimizer and the loss go with this frame


def run(cases, explain=False) -> list[dict]:
    M.configure_torch()
    records = []
    for i, case in enumerate(cases, 1):
        started = time.perf_counter()
        measured = measure(case, "cpu", explain=explain)
        M.report_progress(i, len(cases), case, measured, started)
        records.append({"config": case.config(), "measured": measured})
    return records


DESCRIPTION = ("Preference training (DPO) with a frozen reference copy, the policy with its adapters off, or "
               "precomputed reference log-probs; two training steps per case, measured by validation/preference.py; "
               "see memmath_lessons/reference/measured.py (load_measured_preference). Every case held out: recorded after "
               "memmath/preference.py was written.")


def main(argv=None):
    M.recorder_main(__doc__, grid, run, DEFAULT_OUT, DESCRIPTION, M.SHAPES, argv, extra={"beta": BETA})


if __name__ == "__main__":
    main()
