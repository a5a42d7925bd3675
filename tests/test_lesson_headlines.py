"""Each lesson still shows its headline numbers at its default settings.

The numbers were captured from the lessons' own output before the package reorganization of this
round (commit 80b8edf: every "number + unit" string each lesson printed at its defaults), and are
kept here as literals: a refactoring of memmath that changes what a lesson teaches fails here.
Each is the figure the lesson is about (its worked example, its comparison, an exercise's answer).
When memmath.Run made the exact activation model the default for every model read from a config (presets built
in code included), the activation-dependent figures moved, each re-derived by hand in its lesson's tests:
lesson 0's training budget (63.35 -> 66.46 GB), lesson 4's GPT-2 runs (1.06 GB -> 1.52 GB, 859.09 -> 931.54 MB),
lesson 5's adapter and freeze runs (7.40 -> 4.97, 0.37 -> 0.34, 80.64 -> 39.74, 3.67 -> 2.71 GB), lesson 6's 13B
on a 4090 (26.56 -> 26.53, 7.73 -> 7.70 GB) and lesson 8's sum of the parts (56.27 -> 57.05 GB). Lesson 3's
figures are Korthikanti et al.'s formula, which it now asks for by name.
"""

import re

import lessons
import pytest

# "number + unit" as the capture read it: 14.00 GB, 1,164 B, 13.04 GiB.
SIZE = re.compile(r"\d[\d,]*(?:\.\d+)?\s?(?:B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\b")

# Captured before the reorganization (commit 80b8edf), at each lesson's defaults.
HEADLINES = {
    # the article's 7B in 16-bit: 14 GB of weights, + 14 GB gradients + 28 GB Adam = 56 GB; llama-2-7b's two
    # budgets (63.35 GB to train, 14.75 GB to serve); an RTX 4090's 24,564 MiB as 25.76 GB
    "00_start_here": ["14.00 GB", "28.00 GB", "56.00 GB", "66.46 GB", "14.75 GB", "25.76 GB"],
    # 7e9 x 2 B = 14.00 GB = 13.04 GiB; Llama-2-13B in bf16; the RTX 4090 in bytes; the RTX 3060's shortfall
    "01_weights_and_formats": ["14.00 GB", "13.04 GiB", "26.03 GB", "25,757,220,864 B", "1.12 GB"],
    # 56 GB = 14 GB weights + 42 GB; mixed precision's 112 GB; llama-2-7b's run; step counters; one moment
    "02_full_finetuning": ["56.00 GB", "42.00 GB", "112.00 GB", "53.91 GB", "1,164 B", "921,856 B"],
    # one GPT-2 block, the loss's logits, eager against fused attention and the saving
    "03_activations": ["358.61 MB", "89.65 MB", "1.65 GB", "73.43 GB", "23.14 GB", "50.29 GB"],
    # nine of ten layers frozen: 18.20 GB, saving 37.80 GB; 4.20 GB trainable; the BERT-large comparison
    "04_freezing": ["18.20 GB", "37.80 GB", "4.20 GB", "1.52 GB", "931.54 MB"],
    # the adapters' weights, what they save, their activations against freezing's (live and in the exercise)
    "05_adapters": ["67.64 MB", "40.23 GB", "4.97 GB", "0.34 GB", "39.74 GB", "2.71 GB"],
    # LoRA's adapters, QLoRA's NF4 base and constants, the 13B on a 4090 (LoRA's and QLoRA's requirement: the step's
    # peak), LLaMA 65B regular finetuning
    "06_lora_qlora": ["16.78 MB", "3.78 GB", "0.10 GB", "26.53 GB", "7.77 GB", "783.43 GB"],
    # Llama-2-13B's KV cache at 8,192 tokens (the worked example) and its weights (problem 1); the default run, since it
    # opens on a run that fits (Llama-3-8B at 8,192 tokens on an RTX 4090; tests/test_lesson_07.py derives each by
    # hand): its KV cache, the detailed sum against the rule of thumb, the rule's allowance; problem 2's 2,621,440 B
    "07_inference": ["6.71 GB", "26.03 GB", "1.07 GB", "18.11 GB", "19.27 GB", "3.21 GB", "2,621,440 B"],
    # llama-2-7b's full finetune per GPU, the planner's setup, serving it, the RTX 4090's CUDA context (426 MiB);
    # what the card must hold
    # (the verdict, the part table's last row, the chart's tick and the problems give one number per run),
    # for the run (the step's peak, 67.38 GB = the parts' 57.05 GB + the optimizer step's 10.34 GB) and for its
    # path's LoRA change (16.42 GB, the changes table's, the comparison's and the static chart's)
    "08_planner": ["53.91 GB", "57.05 GB", "13.80 GB", "0.42 GiB", "67.38 GB", "16.42 GB"],  # 93.15 GB left: the step's peak
    # Llama-3-8B worked through in the symbols: 8,030,261,248 x 2 B = 16.06 GB of bf16 weights (tests/test_lesson_09.py)
    "09_notation": ["16.06 GB", "0.27 GB", "0.96 GB", "1.05 GB", "4.20 GB"],
    # the chained problems' answers, each derived by hand in tests/test_lesson_10.py: Llama-3-8B with ZeRO-3 on 8 GPUs
    # (65.15 GB, the sum of its parts) and without (129.77 GB: the peak with DDP's buckets), Qwen3-30B-A3B's QLoRA
    # weights (59.72 GB) and its two-A100 peak with DDP's buckets (76.39 GB), Gemma 2 9B's cache (8.46 GB)
    "10_problems": ["65.15 GB", "129.77 GB", "59.72 GB", "76.39 GB", "8.46 GB", "22.39 GB"],
    # Llama-3-70B: 70,553,706,496 x 2 B = 141.11 GB of bf16 weights, 17.64 GB of them per GPU under ZeRO-3 or tensor
    # parallelism over 8; the one-card peak (705.54 GB) and the 16-GPU layout's highest rank peak (53.63 GB), each
    # the command line's (tests/test_lesson_11.py); the Playbook widget's preset by its own formulas, 444.35 GB
    "11_many_gpus": ["141.11 GB", "17.64 GB", "705.54 GB", "53.63 GB", "444.35 GB"],
}


def test_every_lesson_has_headlines():
    assert sorted(HEADLINES) == lessons.LESSONS


@pytest.mark.parametrize("lesson", sorted(HEADLINES))
def test_the_lesson_still_shows_its_headline_numbers(lesson):
    outputs, _ = lessons.run(lesson)
    shown = set(SIZE.findall(lessons.output_text(outputs)))
    missing = [number for number in HEADLINES[lesson] if number not in shown]
    assert not missing, f"{lesson} no longer shows {missing}"
