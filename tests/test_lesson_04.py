"""Lesson 4 (freezing): it runs, its numbers match the article and hand counts, every control survives its extremes."""

import re

import marimo as mo
import numpy as np
import pytest

import lessons

NAME = "04_freezing"


@pytest.fixture(scope="module")
def default_run():
    return lessons.run(NAME)


def test_runs_clean(default_run):
    outputs, _ = default_run
    assert lessons.bad_text(outputs) == []


def test_article_ten_layers_nine_frozen(default_run):
    # The article: ten equal layers, first nine frozen -> about 10% trainable. 7B in pure 16-bit with
    # Adam: 56 GB for full finetuning; frozen: 7e9 x 2 B + 0.7e9 x (2 + 4) B = 14 + 4.2 = 18.2 GB.
    _, defs = default_run
    assert defs["n_layers"] == 10 and defs["n_frozen"] == 9
    assert defs["equal_frozen"].trainable_fraction == pytest.approx(0.10)
    assert defs["equal_full"].total == 56 * 10**9
    assert defs["equal_frozen"].weights == 14 * 10**9
    assert defs["equal_frozen"].total == 18_200_000_000


def test_gpt2_default_share_by_hand(default_run):
    # GPT-2, first 10 of 12 blocks frozen: 2 x (12h^2 + 13h) = 2 x 7,087,872 (blocks) + 2h = 1,536 (ln_f);
    # the head is tied to the frozen token embedding. 14,177,280 of 124,439,808 parameters.
    _, defs = default_run
    frozen = defs["frozen"]
    assert frozen.trainable_params == 2 * 7_087_872 + 1_536 == 14_177_280
    assert frozen.trainable_fraction == pytest.approx(14_177_280 / 124_439_808)
    # Backward stops at block 11: only 2 blocks keep activations.
    assert frozen.activation_detail.layers_storing == 2
    assert frozen.weights == defs["full"].weights == 2 * 124_439_808  # frozen weights are still stored


def test_share_curve_ends(default_run):
    _, defs = default_run
    share = defs["share_grid"]
    # 0 frozen: all but the frozen embeddings (wte 50,257 x 768 + wpe 1,024 x 768 = 39,383,808);
    # 12 frozen: ln_f alone (1,536).
    assert share[0] == pytest.approx((124_439_808 - 39_383_808) / 124_439_808)
    assert share[-1] == pytest.approx(1_536 / 124_439_808)


def test_bert_large_reported_point(default_run):
    # BERT-large block: 12h^2 + 13h = 12,596,224 at h=1,024; pooler 1,049,600; total 335,141,888.
    # Top 6 blocks + pooler: 22.9% (< 25%); top 7: 26.6%, the first to reach the reported 25%.
    _, defs = default_run
    share = defs["bert_sweep"].trainable_fraction
    assert share[6] == pytest.approx((6 * 12_596_224 + 1_049_600) / 335_141_888)
    assert share[6] < 0.25 <= share[7]
    assert share[7] == pytest.approx((7 * 12_596_224 + 1_049_600) / 335_141_888)


def test_bert_large_memory_by_hand(default_run):
    # BERT-large at the defaults (b = 4, s = 512: t = 2,048; h = 1,024, I = 4,096, a = 16, 24 blocks), pure bf16
    # (e = 2) with Adam on CUDA (masks 1 B, LayerNorm stats fp32), SDPA with BERT's dropout (p = 0.1), counted as
    # memmath/hf_activations.py's docstring lays out transformers' BERT forward pass.
    outputs, defs = default_run
    t, h, inner, b = 2_048, 1_024, 4_096, 4
    eth, mth, stats, eti = 2 * t * h, t * h, 2 * 4 * t, 2 * t * inner
    # A block: q/k/v's shared input, q, k, v (three storages), SDPA output and fp32 log-sum-exp (4 x b x a x s), the
    # attention dropout mask, the attention LayerNorm's input + stats, intermediate.dense's input (that LayerNorm's
    # output), GELU's input, output.dense's input, the output dropout mask, the output LayerNorm's input + stats.
    block = eth + 3 * eth + eth + 4 * b * 16 * 512 + mth + (eth + stats) + eth + eti + eti + mth + (eth + stats)
    assert block == 71_467_008
    # After the blocks: the pooler's input (token 0 is a view: the last block's whole output), its tanh output
    # e x b x h, the classifier dropout mask m x b x h and the classifier's input e x b x h; the loss: log-softmax
    # e x b x labels (the preset has num_labels = 0), labels 8 x b, a total weight e.
    head = eth + 2 * b * h + b * h + 2 * b * h + 0 + 8 * b + 2
    # The embeddings, when they train: token ids 8 x t, token-type ids 8 x s (the position ids are a buffer's
    # slice, not new), the embedding LayerNorm's input + stats, the embedding dropout mask.
    embeddings = 8 * t + 8 * 512 + (eth + stats) + mth
    params, block_params, pooler = 335_141_888, 12_596_224, 1_049_600
    # Adam's fp32 steps, 4 B per parameter tensor: 16 per block, the pooler's 2, the embeddings' 5 (three tables
    # and the LayerNorm's two).
    full = 2 * params + 2 * params + (4 * params + 4 * (24 * 16 + 2 + 5)) + 24 * block + embeddings + head
    top7_params = 7 * block_params + pooler
    top7 = 2 * params + 2 * top7_params + (4 * top7_params + 4 * (7 * 16 + 2)) + 7 * block + head
    assert defs["bert_full"].total == full == 4_406_887_998
    assert defs["bert_sweep"].total[7] == top7 == 1_710_107_114
    text = lessons.output_text(outputs)
    assert re.search(r"1\.71 GB against\s+4\.41 GB for full finetuning", text)


# GPT-2 at the lesson's defaults (b = 4, s = 512: t = 2,048 tokens; h = 768, I = 3,072, a = 12, V = 50,257), pure
# bf16 (e = 2) on CUDA (dropout masks m = 1 B, LayerNorm mean and rstd fp32), SDPA with the config's dropout
# (p = 0.1), counted as memmath/hf_activations.py's docstring lays out transformers' GPT2LMHeadModel forward pass.
T, H, I, V = 2_048, 768, 3_072, 50_257
ETH, MTH, STATS, ETI = 2 * T * H, T * H, 2 * 4 * T, 2 * T * I
LSE = 4 * 4 * 12 * 512  # SDPA's fp32 log-sum-exp, 4 x b x a x s
# A trainable block: ln_1 input + stats, c_attn input (ln_1's output), the fused qkv output (one storage, 3 eth) and
# the SDPA output (also attn.c_proj's input) and log-sum-exp, the residual dropout mask, ln_2 input + stats,
# c_fc input, gelu_new's four tensors (x, tanh, 1 + tanh, 0.5x), mlp.c_proj input (gelu's output), the MLP mask.
GPT2_BLOCK = (ETH + STATS) + ETH + 3 * ETH + ETH + LSE + MTH + (ETH + STATS) + ETH + 4 * ETI + ETI + MTH
# A frozen block whose input needs a gradient (behind trainable embeddings): the same but the three inputs that
# only its frozen linears' weight gradients would need (ln_1's output, ln_2's output, gelu's output).
GPT2_FROZEN_BLOCK = GPT2_BLOCK - 2 * ETH - ETI
# The loss: the logits upcast to fp32 for log-softmax 4 x t x V, the shifted labels 8 x t, a 4-byte total weight.
GPT2_LOSS = 4 * T * V + 8 * T + 4
LN_F = ETH + STATS  # the final LayerNorm's input and stats (it trains in every case here)
# When the embeddings train: token ids 8 x t, position ids 8 x s, the embedding dropout mask; the tied head then
# trains too and keeps its input (ln_f's output).
GPT2_EMBEDDINGS = 8 * T + 8 * 512 + MTH
GPT2_HEAD_INPUT = ETH


def test_gpt2_activations_by_hand(default_run):
    # What freezing saves at the defaults (GPT-2, 10 of 12 blocks frozen, batch 4 of 512 tokens), by hand.
    outputs, defs = default_run
    assert GPT2_BLOCK == 91_357_184 and GPT2_LOSS == 411_721_732
    full, frozen = defs["full"], defs["frozen"]
    assert full.activations == 12 * GPT2_BLOCK + GPT2_EMBEDDINGS + LN_F + GPT2_HEAD_INPUT + GPT2_LOSS == 1_515_909_124
    # Frozen: blocks 1-10 and the embeddings keep nothing, the tied head is frozen: two blocks, ln_f and the loss.
    assert frozen.activations == 2 * GPT2_BLOCK + LN_F + GPT2_LOSS == 597_598_212
    # Weights 2 B x 124,439,808; gradients 2 B and Adam's two bf16 moments 4 B per trainable parameter, plus a 4-byte
    # fp32 step per parameter tensor (GPT-2: 12 per block, ln_f's 2, wte and wpe: 148; trainable here 2 x 12 + 2).
    weights = 2 * 124_439_808
    assert full.total == weights + 2 * 124_439_808 + (4 * 124_439_808 + 4 * 148) + 1_515_909_124 == 2_511_428_180
    assert frozen.total == weights + 2 * 14_177_280 + (4 * 14_177_280 + 4 * 26) + 597_598_212 == 931_541_612
    # The table shows them: activations 1.52 GB against 597.60 MB (918.31 MB saved), totals 2.51 GB against 931.54 MB
    # (1.58 GB saved), and the run's settings above it.
    text = lessons.output_text(outputs)
    for shown in ("1.52 GB", "597.60 MB", "918.31 MB", "2.51 GB", "931.54 MB", "1.58 GB"):
        assert shown in text, shown
    assert "For gpt2: fused (SDPA) attention and dropout at p = 0.1" in text


def test_training_the_embeddings_sends_backward_through_every_block():
    _, base = lessons.run(NAME)
    owners = ("preset_dropdown", "head_switch", "norm_switch", "embeddings_switch")
    overrides = {name: base[name] for name in owners}
    overrides["embeddings_switch"] = mo.ui.switch(value=True)
    outputs, defs = lessons.load_app(NAME).run(defs=overrides)
    frozen = defs["frozen"]
    # Plus wte and wpe; the tied head is the same matrix as wte, so nothing more.
    assert frozen.trainable_params == 14_177_280 + 39_383_808
    # Backward reaches the embeddings through all 12 blocks: the 2 trainable ones keep everything, the 10 frozen
    # ones what their input's gradient needs (no linear's input), by hand above.
    detail = frozen.activation_detail
    assert (detail.layers_storing, detail.frozen_layers_storing) == (2, 10)
    assert detail.frozen_per_layer == GPT2_FROZEN_BLOCK == 72_482_816
    assert frozen.activations == (2 * GPT2_BLOCK + 10 * GPT2_FROZEN_BLOCK + GPT2_EMBEDDINGS + LN_F + GPT2_HEAD_INPUT
                                  + GPT2_LOSS)
    assert "runs through all 12 blocks, as full finetuning does" in _work_sentence(outputs)


def test_every_control_at_its_extremes():
    seen = set()
    for control, which, outputs, defs in lessons.extreme_runs(NAME):
        seen.add(control)
        assert lessons.bad_text(outputs) == [], (control, which)
        for result in (defs["frozen"], defs["equal_frozen"]):
            assert all(int(v) >= 0 for v in result.parts().values()), (control, which)
        assert np.all(defs["share_grid"] >= 0) and np.all(defs["share_grid"] <= 1)
    assert {"params_slider", "layers_slider", "frozen_slider", "unit_radio", "preset_dropdown", "head_switch",
            "norm_switch", "embeddings_switch", "real_frozen_slider", "batch_slider", "seq_slider"} <= seen


def test_tied_head_switch_says_why_it_changes_nothing(default_run):
    # GPT-2's head is the token-embedding matrix (tied): with the embeddings frozen, the head switch cannot
    # make it train, and the lesson says so instead of leaving the switch looking broken.
    outputs, defs = default_run
    assert defs["model"].tied_embeddings and not defs["freeze"].train_embeddings
    assert "head switch changes nothing here" in lessons.output_text(outputs)


def test_checked_against_pytorch_frozen_blocks_keep_nothing(default_run):
    # Recorded by validation/measure.py: the tiny GPT-2 in fp32 (h = 64, MLP 256, 230,464 parameters), fused
    # attention, b = 2, s = 64. One block by hand: 2 LayerNorms 2 x 128, c_attn 64 x 192 + 192, attn c_proj
    # 64 x 64 + 64, c_fc 64 x 256 + 256, mlp c_proj 256 x 64 + 64 = 49,984; the final norm 128 trains too.
    _, defs = default_run
    rows = defs["freeze_rows"].set_index("frozen blocks")
    block = 2 * 128 + (64 * 192 + 192) + (64 * 64 + 64) + (64 * 256 + 256) + (256 * 64 + 64)
    assert block == 49_984
    # Gradients by hand: fp32 4 B x trainable parameters (all; 2 blocks + norm; 1 block + norm).
    assert list(rows["trainable parameters"]) == [230_464, 2 * block + 128, block + 128]
    assert list(rows["gradients, measured (B)"]) == [4 * n for n in rows["trainable parameters"]]
    assert list(rows["gradients, measured (B)"]) == [921_856, 400_384, 200_448]
    assert list(rows["saved, measured (B)"]) == [3_345_924, 2_390_020, 1_468_420]  # saved for backward
    for part in ("gradients", "saved"):
        assert list(rows[f"{part}, memmath (B)"]) == list(rows[f"{part}, measured (B)"])
    # Block by block: the frozen blocks saved 0 B, measured and predicted alike.
    blocks = defs["freeze_blocks"]
    for source in ("measured", "memmath"):
        two = blocks[(blocks["frozen"] == "2 frozen") & (blocks["source"] == source)]
        assert list(two["bytes"]) == [0, 0, 921_600]


def test_frozen_layers_keep_their_value_when_the_layer_count_changes():
    # 0 frozen became 9 when layers went 10 -> 11. The slider is rebuilt from the learner's last
    # choice (the state its on_change sets), so a previous 0 stays 0 at 11 layers.
    _, defs = lessons.run_with(NAME, layers_slider=mo.ui.slider(1, 48, value=11), get_frozen=lambda: 0)
    assert defs["frozen_slider"].value == defs["n_frozen"] == 0
    assert defs["frozen_slider"]._on_change is defs["set_frozen"]


def test_frozen_layers_beyond_the_model_are_limited_and_the_page_says_why():
    outputs, defs = lessons.run_with(NAME, layers_slider=mo.ui.slider(1, 48, value=5))
    assert defs["n_frozen"] == 5  # the default 9 cannot be frozen in 5 layers
    assert "Frozen layers shows 5, not your 9" in lessons.output_text(outputs)


def test_frozen_blocks_keep_their_value_when_the_model_changes():
    llama = mo.ui.dropdown(options=["gpt2", "llama-2-7b"], value="llama-2-7b")
    _, defs = lessons.run_with(NAME, preset_dropdown=llama, get_real_frozen=lambda: 3)
    assert defs["real_frozen_slider"].value == 3
    assert defs["real_frozen_slider"]._on_change is defs["set_real_frozen"]
    gpt2 = mo.ui.dropdown(options=["gpt2", "llama-2-7b"], value="gpt2")
    outputs, defs = lessons.run_with(NAME, preset_dropdown=gpt2, get_real_frozen=lambda: 30)
    assert defs["real_frozen_slider"].value == 12  # GPT-2 has 12 blocks
    assert "Frozen blocks shows 12, not your 30" in lessons.output_text(outputs)


def _work_sentence(outputs) -> str:
    import re
    return re.search(r"(?:No less|Less) work.*?every", lessons.output_text(outputs), re.S).group(0)


def test_the_work_sentence_reads_well_at_every_value():
    # Not "computes 6,738,415,616 weight gradients instead of 6,738,415,616, and runs through 32 of 32
    # blocks instead of 32". LLaMA-2-7B with the embeddings trained and 0 frozen is full finetuning.
    llama = mo.ui.dropdown(options=["gpt2", "llama-2-7b"], value="llama-2-7b")
    runs = {
        "none": lessons.run_with(NAME, preset_dropdown=llama, embeddings_switch=mo.ui.switch(value=True),
                                 real_frozen_slider=mo.ui.slider(0, 32, value=0)),
        "some": lessons.run_with(NAME, preset_dropdown=llama, real_frozen_slider=mo.ui.slider(0, 32, value=3)),
        "all": lessons.run_with(NAME, real_frozen_slider=mo.ui.slider(0, 12, value=12)),
    }
    texts = {k: _work_sentence(o) for k, (o, _) in runs.items()}
    assert texts["none"].startswith("No less work yet") and "through all 32 blocks" in texts["none"]
    # 6,738,415,616 (LLaMA-2-7B) - 3 x 202,383,360 (one block: 4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096)
    # - 131,072,000 (the frozen 32,000 x 4096 embedding) = 6,000,193,536; backward through 29 of 32 blocks.
    assert "computes 6,000,193,536 weight gradients instead of 6,738,415,616" in texts["some"]
    assert "runs through 29 of the 32 blocks instead of all 32" in texts["some"]
    # GPT-2 all 12 frozen: only ln_f (2 x 768) trains, and backward reaches no block.
    assert "computes 1,536 weight gradients" in texts["all"] and "none of the 12 blocks" in texts["all"]
    # 1,536 / 124,439,808 = 0.0012%: a share shown with two significant digits, never as 0.00%.
    assert re.search(r"1,536 of 124,439,808 parameters train,\s+0.0012%", lessons.output_text(runs["all"][0]))
    assert "instead of" not in texts["none"]  # no "N instead of N"



def test_a_slider_move_reruns_at_most_two_cells():
    # Every re-run cell costs ~6-10 ms of marimo's own; a move re-ran up to 10 cells before.
    for control in ("params_slider", "frozen_slider"):
        assert len(lessons.cells_rerun_by(NAME, control)) == 1, control  # the core number and its chart's rows
    # The number of layers rebuilds the frozen-layers slider (it keeps the learner's value) and the core cell.
    assert len(lessons.cells_rerun_by(NAME, "layers_slider")) == 2
    # What trains (and its chart) and what it saves (and its chart); batch and length: what it saves and BERT-large.
    for control in ("real_frozen_slider", "batch_slider", "seq_slider"):
        assert len(lessons.cells_rerun_by(NAME, control)) == 2, control


def test_the_core_path_comes_first(default_run):
    # The claim, the control, the number with its recipe, the takeaway, then the sections.
    outputs, _ = default_run
    text = lessons.output_text(outputs)
    claim, number, takeaway = text.index("The claim."), text.index("The number."), text.index("Takeaway.")
    assert claim < text.index("Frozen layers f (the first ones)") < number < takeaway < text.index("<h2")
    # The article's recipe in pure 16-bit with Adam: 7e9 weights x 2 B + 0.7e9 trainable x (2 + 4) B = 18.2 GB.
    recipe = text[number:takeaway]
    assert "7,000,000,000 × 2 B + 700,000,000 × (2 + 4) B" in recipe and "18.20 GB" in recipe
    assert "37.80 GB saved" in recipe  # 56 GB - 18.2 GB


def test_the_layer_strip_takes_a_new_layer_count_without_a_new_chart():
    # The strip's layer numbers are thinned by a param, so a new L sends rows and one value, not a spec.
    from memmath_lessons.live_chart import _without_param_values

    charts = [lessons.run_with(NAME, layers_slider=mo.ui.slider(1, 48, value=n))[1]["layers_chart"] for n in (10, 30)]
    assert _without_param_values(charts[0].spec) == _without_param_values(charts[1].spec)
    assert [c.signals["every"] for c in charts] == [1, 3]  # ceil(10 / 12), ceil(30 / 12)
    rows = next(iter(charts[1].rows.values()))  # 30 layers (9 frozen) and the two bars' parts
    assert sum(r["kind"] == "layer" for r in rows) == 30 and sum(r.get("state") == "frozen" for r in rows) == 9


def test_the_pytorch_check_shows_every_recorded_model_and_precision(default_run):
    outputs, _ = default_run
    text = lessons.output_text(outputs)
    assert "Do frozen blocks really keep nothing?" in text
    for tab in ("GPT-2, fp32", "GPT-2, bf16", "LLaMA, fp32", "LLaMA, bf16", "BERT, fp32", "BERT, bf16"):
        assert tab in text, tab


def test_no_layer_frozen_trains_every_parameter_and_a_remainder_is_said():
    # Not "With no layer frozen, 69,999,999,984 of 70,000,000,000 parameters train". 70e9 in 48 equal layers:
    # 70e9 // 48 = 1,458,333,333 a layer, 48 x 1,458,333,333 = 69,999,999,984, so 16 sit outside the layers.
    def run(frozen):
        return lessons.run_with(NAME, params_slider=mo.ui.slider(steps=[0.1, 0.35, 1, 3, 7, 13, 70], value=70),
                                layers_slider=mo.ui.slider(1, 48, value=48), get_frozen=lambda: frozen)

    outputs, defs = run(0)
    text = lessons.plain_text(outputs)
    assert defs["equal_frozen"].trainable_params == 70_000_000_000
    assert "With no layer frozen, 70,000,000,000 of 70,000,000,000 parameters train: 100.0%" in text
    assert "does not split into 48 equal layers: each holds 1,458,333,333 and the 16 left over sit outside them" in text
    outputs, defs = run(47)  # one layer trains: 1,458,333,333 parameters, the 16 stay frozen with the rest
    text = lessons.plain_text(outputs)
    assert defs["equal_frozen"].trainable_params == 1_458_333_333
    assert "With 47 of 48 layers frozen, 1,458,333,333 of 70,000,000,000 parameters train" in text
    assert "so 1 × 1,458,333,333 = 1,458,333,333 train" in text
    outputs, _ = lessons.run(NAME)  # the article's 7B in 10 layers divides evenly: no remainder to explain
    assert "left over" not in lessons.plain_text(outputs)
