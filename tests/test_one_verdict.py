"""One verdict rule, said the same way on every surface.

memmath.verdict names the rule once: a run fits when its requirement plus 5% of it is at most the card less the
CUDA reserve; "to spare" is the usable memory less the requirement; "short by" is the requirement plus the margin
less the usable memory. The figures below are derived by hand from the catalog's driver sizes (nvidia-smi MiB x 2**20)
and each card's CUDA context reserve (an RTX 4090 is an Ada card: 426 MiB = 446,693,376 B, measured on an RTX 6000
Ada, unslothai/unsloth-zoo pull request 1053; an RTX A6000 is Ampere GA10x: 256 MiB = 268,435,456 B, measured on an
RTX 3090, invoke-ai/InvokeAI issue 9413); then the same run is read off the lessons (app.run) and the command
line, and any two that show it differently fail here.
"""

from __future__ import annotations

import contextlib
import io
import re

import marimo as mo
import pytest

import lessons
import memmath as mm
from memmath import cli
from memmath.verdict import verdict_of

RESERVE_4090 = 426 * 2**20  # 446,693,376 B
RESERVE_A6000 = 256 * 2**20  # 268,435,456 B
A6000 = 49140 * 2**20  # 51,527,024,640 B as nvidia-smi reports the RTX A6000
RTX_4090 = 24564 * 2**20  # 25,757,220,864 B


def test_a_near_fit_says_only_the_margin_fails_and_its_real_shortfall():
    # 49e9 B on an RTX A6000: usable 51,527,024,640 - 268,435,456 = 51,258,589,184 B, so 2.26 GB would be left;
    # the margin is 5% of 49e9 = 2,450,000,000 B: short by 49e9 + 2.45e9 - 51,258,589,184 = 191,410,816 B.
    v = verdict_of(49_000_000_000, "RTX A6000")
    assert (v.usable_bytes, v.margin_bytes) == (A6000 - RESERVE_A6000, 2_450_000_000)
    assert not v.fits and v.what_fails == "the margin"
    assert v.short_by == 191_410_816 and v.spare == 51_258_589_184 - 49_000_000_000
    assert v.headline() == "It does not fit: short by 0.19 GB."
    assert "Only the margin fails: the requirement leaves 2.26 GB, less than the 2.45 GB" in v.why()


def test_a_run_past_the_card_is_short_by_the_margin_too():
    # 80e9 B on an RTX 4090: usable 25,757,220,864 - 446,693,376 = 25,310,527,488 B; short by
    # 80e9 + 4e9 - 25,310,527,488 = 58,689,472,512 B, the requirement alone 54,689,472,512 B past the usable memory.
    v = verdict_of(80 * 10**9, "RTX 4090")
    assert v.what_fails == "the card" and v.short_by == 58_689_472_512 and v.spare == 0
    assert v.sentence() .startswith("does not fit: short by 58.69 GB (the requirement is 54.69 GB more than the usable")


def test_a_fit_says_what_is_left_and_without_a_margin_no_margin_words():
    # 10e9 B on an RTX 4090: 25,310,527,488 - 10e9 = 15,310,527,488 B to spare; 5% (0.5e9) fits inside it.
    v = verdict_of(10 * 10**9, "RTX 4090")
    assert v.fits and v.what_fails is None and v.short_by == 0 and v.spare == 15_310_527_488
    assert v.headline() == "It fits, with 15.31 GB to spare."
    bare = verdict_of(10 * 10**9, "RTX 4090", reserved_bytes=0, margin=0)
    assert bare.spare == RTX_4090 - 10 * 10**9 and bare.why() == "" and "kept free" not in bare.sentence()


def test_the_rule_is_the_fit_check_s_inequality():
    # At the edge: requirement + ceil(5%) == usable fits; one byte more does not, and is short by one byte.
    usable = RTX_4090 - RESERVE_4090
    edge = usable * 100 // 105
    while edge + -(-edge * 5 // 100) > usable:
        edge -= 1
    for need in (edge, edge + 1):
        v, fit = verdict_of(need, "RTX 4090"), mm.check_fit(need, "RTX 4090", margin=mm.FIT_MARGIN)
        assert v.fits == fit.fits and v.usable_bytes == fit.available_bytes and v.margin_bytes == fit.margin_bytes
    assert verdict_of(edge, "RTX 4090").fits and not verdict_of(edge + 2, "RTX 4090").fits


# ---- the same run on several surfaces ---------------------------------------------------------------------
# Llama-3-70B, full finetuning in pure bf16 with AdamW, 1 x 2,048 tokens, one GPU: lesson 8 (its preset and sliders),
# lesson 11 (t = p = d = 1) and `memmath train`.


def _short(text):
    return [m.group(1) for m in re.finditer(r"short by ([\d,.]+ GB)", text)]


@pytest.fixture(scope="module")
def lesson_8_70b():
    outputs, defs = lessons.run_with(
        "08_planner", preset_dropdown=mo.ui.dropdown(list(mm.PRESETS), value="llama-3-70b"),
        seq_len_slider=mo.ui.slider(steps=[2**k for k in range(7, 16)], value=2048))
    return defs, lessons.plain_text(outputs)


@pytest.fixture(scope="module")
def lesson_11_70b():
    one = {"1": 1, "2": 2, "4": 4, "8": 8}
    outputs, defs = lessons.run_with(
        "11_many_gpus", gpu_dropdown=mo.ui.dropdown(list(mm.GPUS), value="RTX 4090"),
        tp_dropdown=mo.ui.dropdown(one, value="1"), pp_dropdown=mo.ui.dropdown(one, value="1"))
    return defs, lessons.plain_text(outputs)


def test_lessons_8_and_11_show_one_run_one_verdict(lesson_8_70b, lesson_11_70b):
    (defs8, page8), (defs11, page11) = lesson_8_70b, lesson_11_70b
    assert mm.requirement(defs8["run"]).bytes == defs11["layout_need"].bytes  # the same run
    v8, v11 = defs8["verdict"], defs11["layout_verdict"]
    assert v8 == v11 and not v8.fits and v8.what_fails == "the card"
    shortfall = mm.format_bytes(v8.short_by)
    assert _short(page8)[0] == _short(page11)[0] == shortfall
    assert v8.headline() in page8 and v11.clause() in page11 and v11.why() in page11


def _cli_text(*args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(list(args))
    return out.getvalue()


def test_the_command_line_says_the_lessons_shortfall(lesson_8_70b):
    defs8, page8 = lesson_8_70b
    text = _cli_text("train", "llama-3-70b", "--seq", "2048", "--gpu", "RTX 4090")
    assert f"short by {mm.format_bytes(defs8['verdict'].short_by)}" in text


def test_the_command_line_says_the_lessons_spare_when_it_fits():
    # gpt2 at 1 x 512 on an RTX 4090 fits: the command line's "to spare" and lesson 8's are the usable memory less
    # the requirement, the same bytes.
    outputs, defs = lessons.run_with("08_planner", preset_dropdown=mo.ui.dropdown(list(mm.PRESETS), value="gpt2"))
    v = defs["verdict"]
    assert v.fits
    spare = f"{mm.format_bytes(v.spare)} to spare"
    assert spare in lessons.plain_text(outputs) and spare in _cli_text("train", "gpt2", "--seq", "512",
                                                                        "--gpu", "RTX 4090")


def test_lesson_6_near_fit_names_the_margin():
    # QLoRA's Guanaco-65B run at batch 6: the requirement alone fits the RTX A6000, its 5% margin does not.
    outputs, defs = lessons.run_with("06_lora_qlora", q65_batch_slider=mo.ui.slider(1, 16, value=6))
    v = defs["guanaco_verdict"]
    need = defs["guanaco_need"].bytes
    assert v.required_bytes == need and v.usable_bytes == A6000 - RESERVE_A6000
    text = lessons.plain_text(outputs)
    if v.what_fails == "the margin":
        assert f"short by {mm.format_bytes(need + -(-need * 5 // 100) - (A6000 - RESERVE_A6000))}" in text
        assert "only the margin fails" in text
    assert "missing" not in text.split("This run needs")[1][:600]


def test_the_site_s_teacher_section_states_the_rule_the_pages_use():
    # The static site's front page tells a teacher how every page judges a run: the words of memmath.verdict.
    from memmath_site.build import index_page

    page = index_page([])
    assert 'id="teaching"' in page and f"plus {mm.FIT_MARGIN:.0%} of it" in page
    assert '"short by" always counts those 5%' in page and "CUDA context" in page
