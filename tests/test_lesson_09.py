"""Lesson 9, notation and glossary: the symbols and their example values from Llama-3-8B's published config, the
formulas' numbers derived by hand, the glossary linked to the lessons, and every lesson linking to this page."""

import re

import lessons
import pytest

from validation.published_configs import PUBLISHED_CONFIGS

LESSON = "09_notation"
NOTATION_LINK = "[Notation and glossary](?file=09_notation.py)"  # as `marimo run notebooks` serves the lessons
LLAMA_3_8B = PUBLISHED_CONFIGS["Meta-Llama-3-8B"]  # meta-llama/Meta-Llama-3-8B's config.json


@pytest.fixture(scope="module")
def default_run():
    return lessons.run(LESSON)


def test_runs_and_shows_nothing_bad(default_run):
    outputs, _ = default_run
    assert lessons.bad_text(outputs) == []


def test_the_symbols_table_gives_llama_3_8b_as_its_config_says(default_run):
    outputs, _ = default_run
    text = lessons.plain_text(outputs)
    c = LLAMA_3_8B
    h, I, L, a, kv, V = (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["num_attention_heads"],
                         c["num_key_value_heads"], c["vocab_size"])
    d = h // a  # 128
    # Untied embeddings and head 2·V·h, per block q and o h·h each, k and v h·kv·d each, the SwiGLU MLP 3·h·I, two
    # RMSNorms 2·h; the final norm h.
    n = 2 * V * h + L * (2 * h * h + 2 * h * kv * d + 3 * h * I + 2 * h) + h
    assert n == 8_030_261_248
    for symbol, value in (("N", f"{n:,}"), ("h", f"{h:,}"), ("L", f"{L}"), ("a", f"{a}"), ("kv_heads", f"{kv}"),
                          ("head_dim", f"{d}"), ("I", f"{I:,}"), ("V", f"{V:,}"), ("s", "2,048"), ("t = b·s", "2,048")):
        assert re.search(rf"\b{re.escape(symbol)} [^|]*? {re.escape(value)} ", text), (symbol, value)


def test_the_formulas_numbers_by_hand(default_run):
    outputs, _ = default_run
    text = lessons.plain_text(outputs)
    c = LLAMA_3_8B
    h, L, a, kv, V = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"]
    b, s, e, d = 1, 2048, 2, h // a
    kv_cache = 2 * L * kv * d * e * s * b  # kipply 2022: 268,435,456 B
    block = s * b * h * (34 + 5 * a * s // h)  # Korthikanti et al. 2022, eager, dropout: 2,048 x 4,096 x 114
    logits = 4 * s * b * V  # fp32
    assert (kv_cache, block, logits) == (268_435_456, 956_301_312, 1_050_673_152)
    for shown in ("0.27 GB", "0.96 GB", "1.05 GB", "16.78 MB", "16.06 GB in bf16", "64.24 GB"):
        assert shown in text, shown
    assert f"{8 * (h + h):,} on q_proj" in text  # LoRA r = 8 on q_proj, 4,096 x 4,096: r·(d_in + d_out)


def test_bytes_per_format_and_the_bound_chart(default_run):
    _, defs = default_run
    formats = defs["formats_frame"].set_index("format")["bytes per value (e)"]
    assert (formats["fp32"], formats["bf16"], formats["int8"], formats["nf4"]) == (4, 2, 1, 0.5)  # bits / 8
    grid = defs["weights_grid"]
    seven = grid[grid.billions == 7].set_index("format")
    # The article's 7B: 7e9 x 4 B = 28 GB in fp32, x 2 B = 14 GB in bf16; int8 adds one fp32 scale per 64 values
    # (7e9 / 64 x 4 B = 0.4375 GB: 7.44 GB); nf4 is 3.5 GB plus QLoRA's double-quantized scales, one 8-bit per 64
    # and one fp32 per 256 of those (7e9 / 64 x 1 B + 7e9 / 16,384 x 4 B = 0.111 GB: 3.61 GB, lesson 1's figure).
    assert tuple(seven.loc[["fp32", "bf16", "int8", "nf4"], "GB"]) == (28.0, 14.0, 7.44, 3.61)
    assert seven.loc["bf16", "label"] == "14.00 GB = 13.04 GiB"  # 14e9 / 2**30


def test_the_chart_follows_its_slider_and_the_slider_re_runs_one_cell():
    import marimo as mo

    slider = mo.ui.slider(steps=[0.1, 7, 1000], value=1000)
    _, defs = lessons.run_with(LESSON, weights_params_slider=slider)
    (rows,) = defs["weights_chart"].rows.values()
    # 1,000B parameters x 4 B (fp32) = 4,000 GB.
    assert {row["format"]: row["GB"] for row in rows}["fp32"] == 4000.0
    assert defs["weights_chart"].signals["caption"] == "N: 1000B parameters"
    assert len(lessons.cells_rerun_by(LESSON, "weights_params_slider")) == 1


def test_every_control_at_its_extremes():
    seen = set()
    for control, which, outputs, _ in lessons.extreme_runs(LESSON):
        seen.add(control)
        assert lessons.bad_text(outputs) == [], (control, which)
    assert seen == {"weights_params_slider"}


def test_the_glossary_has_the_words_and_links_each_to_a_lesson(default_run):
    outputs, defs = default_run
    terms = {term: where for section in defs["GLOSSARY"].values() for term, _, where in section}
    for word in ("activation", "optimizer state", "master weights", "gradient checkpointing", "adapter", "LoRA",
                 "QLoRA", "ZeRO", "KV cache", "GB, GiB", "recipe", "peak"):
        assert any(word in term for term in terms), word
    for term, where in terms.items():
        stem = re.search(r"\?file=(\d\d_[a-z_]+)\.py", where).group(1)
        assert stem in lessons.LESSONS, (term, stem)
    assert "lesson 3" in lessons.plain_text(outputs)


def test_the_problems_by_hand(default_run):
    outputs, _ = default_run
    text = lessons.plain_text(outputs)
    # 1. 2 x kv_heads x head_dim x e = 2 x 8 x 128 x 2 B = 4,096 B per layer, x 32 = 131,072 B per token.
    assert "4,096 B per layer" in text and "131,072 B per token" in text
    # 2. A T4: 15,360 MiB (nvidia-smi) = 15.00 GiB = 15,360 x 2**20 = 16,106,127,360 B = 16.11 GB.
    assert "15,360 MiB = 15.00 GiB = 16.11 GB" in text
    # 3. Mixed precision with AdamW: 2 + 2 + 4 (fp32 master) + 8 (two fp32 moments) = 16 B per parameter.
    assert "16 B per parameter" in text
    # 4. 4 x 8,192 x 1 x 128,256 = 4,202,692,608 B.
    assert "4,202,692,608 B = 4.20 GB" in text


@pytest.mark.parametrize("stem", [s for s in lessons.LESSONS if s != LESSON])
def test_every_lesson_links_to_this_page(stem):
    source = (lessons.NOTEBOOKS / f"{stem}.py").read_text(encoding="utf-8")
    assert NOTATION_LINK in source, f"{stem} does not link to the notation page"
