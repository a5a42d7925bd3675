"""Measure training steps on right-padded batches (an attention mask with zeros), and record them for memmath's tests.

    python -m validation.padding            # every case, CPU -> memmath_lessons/reference/data/measured_padding.json
    python -m validation.padding --only gqa --print --explain   # some cases, every saved storage listed

A batch of sequences of different lengths is padded to the longest and given an attention mask with zeros at the
pads. transformers 5.24 then cannot skip the mask under SDPA (masking_utils.py: sdpa_mask skips it only when the
attention mask has no zero), so every attention call gets a boolean (b, 1, s, s) mask, and sdpa_attention_forward
stops sharing key/value heads (use_gqa_in_sdpa is false once a mask is given): repeat_kv copies k and v to every
query head. Eager attention gets its (b, 1, s, s) mask in the model's dtype with or without pads. These cases test
Run(padded=True) in memmath/hf_activations.py (_sdpa_masked_blocks, _forward_masks) on validation/measure.py's
LLaMA shapes: the second and later sequences of each batch end in pads (a quarter of their tokens), whose labels are
-100, as DataCollatorForLanguageModeling's padding sets them. Packed cases put two sequences in every row, each
with its own position ids and no attention mask (as DataCollatorWithFlattening does): transformers then finds the
packed sequences from the position ids (masking_utils.find_packed_sequence_indices) and gives every attention call
their block-diagonal mask, and the rotary tables are computed per row, (b, s, d) instead of (1, s, d).

Each case runs validation/measure.py's measure() (two training steps, the saved tensors, the profiler's peak per
phase, the bytes of parameters, gradients and states). Every case was recorded after memmath's model of it was
written, all held out except three packed cases: the packed runs' per-sequence rotary tables were found by a probe of
three packed settings before that term was written, and the three cases with those settings are not held out.
torch and transformers are imported here only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from . import measure as M

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "memmath" / "reference" / "data" / "measured_padding.json"
GROUP, GROUP_PACKED = "padded batch", "packed sequences"
PAD_SHARE = 4  # the last seq_len // 4 tokens of every sequence but the first are pads


@dataclass(frozen=True)
class PaddedCase(M.Case):
    """A measure.Case whose batch is right-padded (padded=True in memmath's Run) or packed (packed=True: two
    sequences per row, each with its own position ids, no attention mask)."""

    padded: bool = True
    packed: bool = False

    @property
    def case_id(self) -> str:
        return ("packed/" if self.packed else "padded/") + M.Case.case_id.fget(self)

    @property
    def held_out(self) -> bool:
        # The packed cases' masks were modelled before any packed run; their per-sequence rotary tables were found by a
        # probe of the first three grid settings, packed, before the packed model was written: those three repeat it.
        return not (self.packed and (self.shape, self.method, self.attention, self.batch_size, self.seq_len) in PROBED)


# The settings the packed probe ran (llama-gqa, bf16, full finetuning): its rotary tables per sequence came from them.
PROBED = {("llama-gqa", "full", "sdpa", 2, 64), ("llama-gqa", "full", "sdpa", 3, 96),
          ("llama-gqa", "full", "eager", 2, 64)}


def grid() -> list[PaddedCase]:
    """LLaMA with grouped-query attention (llama-gqa: 2 key/value heads for 4; llama-wide: 2 for 8) under SDPA and
    eager; full finetuning, LoRA, freezing, checkpointing; bf16, and fp32 with dropout (SDPA's math kernel)."""
    def case(shape, **settings):
        return PaddedCase(shape, group=GROUP, **settings)

    def packed(shape, **settings):
        return PaddedCase(shape, group=GROUP_PACKED, padded=False, packed=True, **settings)

    return [
        case("llama-gqa", precision="bf16", batch_size=2, seq_len=64),
        case("llama-gqa", precision="bf16", batch_size=3, seq_len=96),
        case("llama-gqa", precision="bf16", attention="eager", batch_size=2, seq_len=64),
        case("llama-gqa", precision="bf16", method="lora", lora_targets="all", adapter_format="fp32", batch_size=2,
             seq_len=64),
        case("llama-gqa", precision="bf16", method="freeze", frozen_layers=1, batch_size=2, seq_len=64),
        case("llama-gqa", precision="bf16", checkpointing=True, batch_size=2, seq_len=64),
        case("llama-gqa", precision="fp32", dropout=True, batch_size=2, seq_len=48),
        case("llama-wide", precision="bf16", batch_size=2, seq_len=64),
        case("llama-wide", precision="bf16", method="lora", lora_targets="qv", adapter_format="bf16", batch_size=4,
             seq_len=32),
        case("llama-wide", precision="bf16", attention="eager", batch_size=2, seq_len=48),
    ] + [
        packed("llama-gqa", precision="bf16", batch_size=2, seq_len=64),
        packed("llama-gqa", precision="bf16", batch_size=3, seq_len=96),
        packed("llama-gqa", precision="bf16", attention="eager", batch_size=2, seq_len=64),
        packed("llama-gqa", precision="bf16", method="lora", lora_targets="all", adapter_format="fp32", batch_size=2,
               seq_len=64),
        packed("llama-gqa", precision="bf16", checkpointing=True, batch_size=4, seq_len=48),
        packed("llama-wide", precision="bf16", method="freeze", frozen_layers=1, batch_size=2, seq_len=64),
        packed("llama-wide", precision="fp32", dropout=True, batch_size=2, seq_len=32),
    ]


def build(case: PaddedCase, device: str = "cpu"):
    """(model, optimizer, batch): measure.build's, with an attention mask whose later rows end in pads, or (packed)
    position ids that start again halfway through every row (two sequences per row, no attention mask)."""
    import torch

    model, optimizer, batch = M.build(case, device)
    b, s = batch["input_ids"].shape
    if case.packed:
        half = s // 2
        positions = torch.cat([torch.arange(half), torch.arange(s - half)]).repeat(b, 1).to(batch["input_ids"].device)
        return model, optimizer, {**batch, "position_ids": positions}
    mask = torch.ones(b, s, dtype=torch.long, device=batch["input_ids"].device)
    mask[1:, s - s // PAD_SHARE:] = 0
    labels = batch["labels"].clone()
    labels[mask == 0] = -100
    return model, optimizer, {**batch, "attention_mask": mask, "labels": labels}


def run(cases, explain=False) -> list[dict]:
    M.configure_torch()
    records = []
    for i, case in enumerate(cases, 1):
        started = time.perf_counter()
        measured = M.measure(case, "cpu", explain=explain, build_fn=build)
        M.report_progress(i, len(cases), case, measured, started)
        records.append({"config": case.config(), "measured": measured})
    return records


DESCRIPTION = ("Right-padded batches (an attention mask with zeros: SDPA's mask tensor, eager's mask) and packed "
               "sequences (their own position ids), two training steps per case, measured by validation/padding.py; see "
               "memmath_lessons/reference/measured.py (load_measured_padding). Recorded after the prediction code; three packed "
               "cases repeat the probe that found the rotary term (held_out false).")


def main(argv=None):
    M.recorder_main(__doc__, grid, run, DEFAULT_OUT, DESCRIPTION, M.SHAPES, argv)


if __name__ == "__main__":
    main()
