"""Freeze.groups: what stays trainable when the first blocks are frozen, part by part (hand-counted)."""

import numpy as np
import pytest

import memmath as mm


def _trainable(frame):
    return int(frame.loc[frame["trainable"], "params"].sum())


def test_llama_untied_head_trains():
    # Llama-2-7B block: 4*4096^2 (q,k,v,o) + 3*4096*11008 (gate, up, down) + 2*4096 (norms) = 202,383,360.
    # Last 2 blocks + final norm (4,096) + untied head (32,000 x 4,096 = 131,072,000) = 535,842,816.
    frame = mm.Freeze(frozen_layers=30).groups(mm.PRESETS["llama-2-7b"])
    assert frame.set_index("part").loc["trainable blocks", "params"] == 2 * 202_383_360
    assert frame.set_index("part").loc["trainable blocks", "blocks"] == "31-32"
    assert _trainable(frame) == 2 * 202_383_360 + 4_096 + 131_072_000
    assert int(frame["params"].sum()) == 6_738_415_616  # every parameter appears once


def test_gpt2_tied_head_stays_frozen():
    # GPT-2 block: 12h^2 + 13h = 7,087,872 at h=768; the head is the token embedding, so only the
    # last blocks and ln_f (2h = 1,536) train.
    frame = mm.Freeze(trainable_layers=2).groups(mm.PRESETS["gpt2"])
    head = frame.set_index("part").loc["output head"]
    assert head["params"] == 0 and not head["trainable"]
    assert _trainable(frame) == 2 * 7_087_872 + 1_536


def test_bert_pooler_is_the_head_and_there_is_no_final_norm():
    # BERT-large block 12h^2 + 13h = 12,596,224 at h=1,024; pooler h^2 + h = 1,049,600.
    frame = mm.Freeze(frozen_layers=18).groups(mm.PRESETS["bert-large-uncased"])
    assert _trainable(frame) == 6 * 12_596_224 + 1_049_600
    assert frame.set_index("part").loc["final norm", "params"] == 0


def test_article_ten_layers():
    frame = mm.Freeze(frozen_layers=9).groups(mm.uniform_model(7e9, 10))
    assert _trainable(frame) == 700_000_000  # one of ten equal layers of 7e9 parameters
    assert frame.set_index("part").loc["frozen blocks", "blocks"] == "1-9"


def test_matches_plan_and_rejects_arrays():
    shape = mm.PRESETS["mistral-7b"]
    method = mm.Freeze(frozen_layers=20, train_embeddings=True)
    plan = method.plan(shape, mm.get_recipe("bf16"))
    assert _trainable(method.groups(shape)) == plan.trainable_params
    with pytest.raises(ValueError, match="single number"):
        mm.Freeze(frozen_layers=np.array([1, 2])).groups(shape)
