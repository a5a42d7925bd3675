"""Measure training steps of sliding-window models below, at and past the window, and record them for memmath's tests.

    python -m validation.sliding            # every case, CPU -> memmath_lessons/reference/data/measured_sliding.json
    python -m validation.sliding --only gemma3 --print --explain   # some cases, every saved storage listed

transformers 5.24 builds each model's attention masks once per forward pass (masking_utils.py). Under SDPA a
causal mask is skipped (SDPA's is_causal), but a sliding-window mask only while the sequence is shorter than the
window (_ignore_causal_mask_sdpa); from the window on each sliding layer's SDPA call gets a (b, 1, s, s) boolean
mask, so sdpa_attention_forward repeats k and v to every query head and torch converts the mask to the query's
dtype. Eager attention gets its mask (b x s x s in the model's dtype) at every length. These cases test what
memmath/hf_activations.py and memmath/trace.py say about that (_sdpa_masked_blocks, _forward_masks,
Trace._sdpa_mask_inputs), on Mistral, Phi-3, Gemma 2 (eager: it has no SDPA), Gemma 3 and Qwen2 with
use_sliding_window, at hidden size 256 with a 64-token window.

Each case runs two training steps with validation/measure.py's measure() (saved tensors through
saved_tensors_hooks, each storage once, parameters and buffers left out; the profiler's peak per phase; the
bytes of parameters, gradients and optimizer states). Every case was recorded after the prediction code: all
held out. torch, transformers and peft are imported here only.
"""

from __future__ import annotations

import time
from pathlib import Path
from unittest import mock

from . import measure as M

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "memmath" / "reference" / "data" / "measured_sliding.json"
GROUP = "sliding window"
WINDOW = 64

_WIDE = dict(family="llama", n_layers=3, hidden_size=256, n_heads=4, head_dim=64, intermediate_size=512,
             vocab_size=512)
SHAPES = {
    # Mistral: every layer slides; grouped-query attention (2 key/value heads for 4), untied head.
    "mistral-sw": dict(_WIDE, arch="mistral", n_kv_heads=2, tied_embeddings=False, sliding_window=WINDOW),
    # Phi-3 (as Phi-3-mini: a key/value head per query head, every layer sliding; measure.py's phi3 shapes set
    # no window, so build() sets it on the config).
    "phi3-sw": dict(_WIDE, arch="phi3", n_kv_heads=4, tied_embeddings=False, sliding_window=WINDOW),
    # Gemma 2: sliding, full, sliding (Gemma2Config's alternation), softcapped scores and logits; eager only.
    "gemma2-sw": dict(_WIDE, arch="gemma2", n_kv_heads=2, tied_embeddings=True,
                      hf_config=dict(sliding_window=WINDOW, attn_logit_softcapping=50.0,
                                     final_logit_softcapping=30.0, query_pre_attn_scalar=64)),
    # Gemma 3: one key/value head (as gemma-3-1b), a full block between two sliding ones.
    "gemma3-sw": dict(_WIDE, arch="gemma3_text", n_kv_heads=1, tied_embeddings=True,
                      hf_config=dict(sliding_window=WINDOW, query_pre_attn_scalar=64,
                                     layer_types=["sliding_attention", "full_attention", "sliding_attention"])),
    # Qwen2 with use_sliding_window: blocks from max_window_layers (1) on slide, block 0 is full.
    "qwen2-sw": dict(_WIDE, arch="qwen2", n_kv_heads=2, tied_embeddings=True,
                     hf_config=dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1)),
}
SDPA_SHAPES = ("mistral-sw", "phi3-sw", "gemma3-sw", "qwen2-sw")


def grid() -> list[M.Case]:
    """Below (48), at (64) and past (128, 160, 192) the window; full finetuning, LoRA, freezing; bf16 (fp32 where
    dropout runs SDPA's math kernel); SDPA and eager; checkpointing on the mixed-type models."""
    def case(shape, **settings):
        return M.Case(shape, group=GROUP, **settings)

    cases = []
    for shape in SDPA_SHAPES:
        cases += [
            case(shape, precision="bf16", batch_size=2, seq_len=48),
            case(shape, precision="bf16", batch_size=2, seq_len=64),
            case(shape, precision="bf16", batch_size=2, seq_len=128),
            case(shape, precision="bf16", method="lora", lora_targets="all", adapter_format="fp32", batch_size=2,
                 seq_len=128),
            case(shape, precision="bf16", attention="eager", batch_size=1, seq_len=128),
        ]
    cases += [
        case("mistral-sw", precision="bf16", method="freeze", frozen_layers=1, batch_size=3, seq_len=96),
        case("mistral-sw", precision="bf16", method="lora", lora_rank=16, adapter_format="bf16", batch_size=1,
             seq_len=192),
        case("phi3-sw", precision="bf16", method="lora", lora_targets="all", adapter_format="bf16",
             checkpointing=True, batch_size=2, seq_len=128),
        case("gemma3-sw", precision="bf16", method="lora", lora_targets="all", adapter_format="fp32",
             checkpointing=True, batch_size=2, seq_len=128),
        case("gemma3-sw", precision="bf16", method="freeze", frozen_layers=1, batch_size=2, seq_len=160),
        # Recorded after the one-key/value-head view was modelled (found on the b = 1 eager case above): at b > 1
        # eager's matmul copies the repeated k and v.
        case("gemma3-sw", precision="bf16", attention="eager", batch_size=2, seq_len=96),
        case("qwen2-sw", precision="fp32", dropout=True, batch_size=2, seq_len=96),
        case("qwen2-sw", precision="bf16", method="freeze", frozen_layers=2, batch_size=2, seq_len=128),
        case("gemma2-sw", precision="bf16", attention="eager", batch_size=2, seq_len=48),
        case("gemma2-sw", precision="bf16", attention="eager", batch_size=2, seq_len=128),
        case("gemma2-sw", precision="bf16", method="lora", lora_targets="all", adapter_format="fp32",
             attention="eager", batch_size=2, seq_len=128),
        case("gemma2-sw", precision="bf16", method="freeze", frozen_layers=1, attention="eager", batch_size=1,
             seq_len=160),
    ]
    return cases


_MEASURE_CONFIG = M._hf_config


def _config(case: M.Case):
    """measure.py's config, with the shape's own sliding window (its Phi-3 shapes set none)."""
    config = _MEASURE_CONFIG(case)
    window = M.SHAPES[case.shape].get("sliding_window")
    if window is not None:
        config.sliding_window = window
    return config


def build(case: M.Case, device: str = "cpu"):
    """(model, optimizer, batch) as measure.build makes them, with the window on every config."""
    with mock.patch.object(M, "_hf_config", _config):
        return M.build(case, device)


def run(cases, explain=False) -> list[dict]:
    M.configure_torch()
    records = []
    with mock.patch.dict(M.SHAPES, SHAPES):  # measure() and Case.config() look shapes up there
        for i, case in enumerate(cases, 1):
            started = time.perf_counter()
            measured = M.measure(case, "cpu", explain=explain, build_fn=build)
            M.report_progress(i, len(cases), case, measured, started)
            config = dict(case.config(), held_out=True)  # recorded after the prediction code: every case
            records.append({"config": config, "measured": measured})
    return records


DESCRIPTION = ("Sliding-window models below, at and past the window (SDPA's mask tensor, eager's masks), two training "
               "steps per case, measured by validation/sliding.py; see memmath_lessons/reference/measured.py "
               "(load_measured_sliding). Every case held out: recorded after the prediction code.")


def main(argv=None):
    M.recorder_main(__doc__, grid, run, DEFAULT_OUT, DESCRIPTION, SHAPES, argv, appendable=True)


if __name__ == "__main__":
    main()
