"""A right-padded batch (Run(padded=True)) and packed sequences (Run(packed=True)): the masks transformers 5.24 then gives every attention call, by hand and
against the CPU measurements of validation/padding.py (memmath_lessons/reference/data/measured_padding.json, every case
recorded after the prediction code; three packed cases repeat the probe that found the rotary term), replayed
without torch.

What transformers 5.24 and torch 2.13 do with an attention mask that has zeros (masking_utils.py,
integrations/sdpa_attention.py, torch's SDPA):
- under SDPA the causal mask can no longer be skipped (sdpa_mask skips it only without padding): every block's SDPA
  call gets the boolean (b, 1, s, s) mask, so sdpa_attention_forward repeats k and v to every query head
  (use_gqa_in_sdpa is false with a mask) and torch converts the mask into a b x s x s tensor in the query's dtype,
  which the CPU flash kernel saves;
- eager attention gets its (b, 1, s, s) mask in the model's dtype with or without pads: nothing changes.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

import memmath as mm
from memmath import cli
from memmath_lessons.reference.measured import (
    load_measured_padding, predict_case, predict_peak_case, predicted_saved_per_block,
)
from memmath.validate import FieldError

CASES = load_measured_padding()
ROWS = {row["case_id"]: row for row in CASES.to_dict("records")}
IDS = sorted(ROWS)
STEP_COLUMN = {"first": "peak_step1_bytes", "steady": "peak_step2_bytes"}
# validation/measure.py's llama-gqa: 3 blocks, h = 64, 4 query heads of d = 16, 2 key/value heads.
LLAMA_GQA = mm.models.llama_model(n_layers=3, hidden_size=64, n_heads=4, n_kv_heads=2, intermediate_size=176, vocab_size=1000)


def _saved(padded, attention="sdpa", b=2, s=64):
    return mm.training_memory(LLAMA_GQA, precision="bf16", batch_size=b, seq_len=s, attention=attention,
                              dropout=False, padded=padded, activations="transformers").activation_detail


# ---- by hand --------------------------------------------------------------------------------------------------
def test_padding_under_sdpa_adds_the_mask_and_a_head_copies_of_k_and_v_to_each_block():
    # b = 2, s = 64, t = 128 tokens, a = 4 heads of d = 16, 2 key/value heads, e = 2 B (bf16). Without pads SDPA
    # shares key/value heads: k and v keep 2 heads, t x 2 x 16 x 2 B = 8,192 B each. With pads repeat_kv copies them
    # to 4 heads (16,384 B each: +8,192 B each), and the mask converted to the query's dtype, b x s x s x e =
    # 2 x 64 x 64 x 2 = 16,384 B, is saved by the flash kernel: 32,768 B more per block.
    assert _saved(True).per_layer - _saved(False).per_layer == 2 * 8_192 + 16_384


def test_padding_under_eager_attention_changes_nothing_saved():
    # eager repeats k and v and adds its b x s x s mask whether or not the batch has pads
    assert _saved(True, "eager").per_layer == _saved(False, "eager").per_layer
    assert int(_saved(True, "eager").total) == int(_saved(False, "eager").total)


def test_the_boolean_mask_lives_through_the_forward_pass():
    # The padding mask differs per sequence: a whole (b, 1, s, s) boolean tensor, 2 x 64 x 64 = 8,192 B, alive from
    # before the first block to the forward's end; the peak holds it there.
    pad, plain = (mm.peak_memory(LLAMA_GQA, precision="bf16", batch_size=2, seq_len=64, dropout=False, padded=p,
                                 step="steady") for p in (True, False))
    assert pad.forward > plain.forward


@pytest.mark.parametrize("model", ["gpt2", "bert-base-uncased"])
def test_a_padded_batch_of_another_family_is_refused_by_name(model):
    with pytest.raises(FieldError) as error:
        mm.Run(model, padded=True)
    assert error.value.field == "padded" and "LLaMA-layout" in str(error.value)


def test_a_padded_batch_with_the_textbook_formula_says_what_it_leaves_out():
    run = mm.training_memory("llama-3-8b", seq_len=512, padded=True, activations="textbook")
    assert any(n.kind == "padded_not_in_textbook" for n in run.notes)


def test_the_command_line_takes_padded():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(["train", "llama-3-8b", "--padded", "--batch", "2", "--seq", "1024", "--json"])
    report = json.loads(out.getvalue())
    assert status == 0 and report["settings"]["padded"] is True
    padded = mm.training_memory("llama-3-8b", batch_size=2, seq_len=1024, padded=True)
    assert report["parts"]["activations"] == int(padded.activations)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["train", "llama-3-8b", "--padded", "--batch", "2", "--seq", "1024"])
    assert "right-padded (an attention mask with zeros)" in " ".join(out.getvalue().split())


# ---- the recorded cases ------------------------------------------------------------------------------------------
def test_the_file_holds_padded_and_packed_sdpa_and_eager_runs():
    padded, packed = CASES[CASES["padded"]], CASES[CASES["packed"]]
    assert len(padded) >= 10 and len(packed) >= 7 and len(padded) + len(packed) == len(CASES)
    assert padded["held_out"].all()
    # Three packed cases repeat the probe that found the per-sequence rotary tables before that term was written.
    assert (~packed["held_out"]).sum() == 3
    for sub in (padded, packed):
        assert set(sub["attention"]) == {"sdpa", "eager"} and {"full", "lora", "freeze"} <= set(sub["method"])
        assert sub["checkpointing"].any() and sub["dropout"].any()


def test_packed_sequences_add_the_mask_and_a_rotary_table_per_sequence():
    # Packed (b = 2, s = 64, two sequences per row): the block-diagonal mask every call gets, as padding's, and cos
    # and sin computed on (b, s) position ids: (b - 1) x s x d x e x 2 = 1 x 64 x 16 x 2 x 2 = 4,096 B more than
    # the (1, s, d) tables of the default position ids.
    packed = mm.training_memory(LLAMA_GQA, precision="bf16", batch_size=2, seq_len=64, dropout=False, packed=True)
    padded = mm.training_memory(LLAMA_GQA, precision="bf16", batch_size=2, seq_len=64, dropout=False, padded=True)
    assert int(packed.activations) - int(padded.activations) == 4_096
    with pytest.raises(FieldError) as error:
        mm.Run(LLAMA_GQA, padded=True, packed=True)
    assert error.value.field == "packed"


@pytest.mark.parametrize("case_id", IDS)
def test_parameters_gradients_and_states_to_the_byte(case_id):
    row = ROWS[case_id]
    m = predict_case(row)
    assert (int(m.trainable_params), int(m.weights), int(m.gradients), int(m.optimizer_states)) == (
        row["trainable_params"], row["param_bytes"], row["grad_bytes"], row["optimizer_state_bytes"])


@pytest.mark.parametrize("case_id", IDS)
def test_saved_activations_to_the_byte_block_by_block(case_id):
    row = ROWS[case_id]
    assert int(predict_case(row).activation_detail.saved_by_forward) == row["saved_bytes"]
    assert predicted_saved_per_block(row) == list(row["saved_per_layer"])


@pytest.mark.parametrize("case_id, step", [(c, s) for s in STEP_COLUMN for c in IDS])
def test_peak_within_five_percent(case_id, step):
    row = ROWS[case_id]
    measured = row[STEP_COLUMN[step]]
    predicted = int(predict_peak_case(row, step=step).total)
    assert abs(predicted - measured) <= 0.05 * measured, f"predicted {predicted:,} B, measured {measured:,} B"


@pytest.mark.live
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_a_recorded_case_measures_the_same_today(torch, transformers):
    from validation import padding

    case = padding.grid()[0]
    threads, onednn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    try:
        [record] = padding.run([case])
    finally:
        torch.set_num_threads(threads)
        torch.backends.mkldnn.enabled = onednn
    recorded, now = ROWS[case.case_id], record["measured"]
    for key in ("param_bytes", "grad_bytes", "optimizer_state_bytes", "saved_bytes"):
        assert now[key] == recorded[key], key
    for key in ("peak_step1_bytes", "peak_step2_bytes"):
        assert abs(now[key] - recorded[key]) <= 0.01 * recorded[key], key
