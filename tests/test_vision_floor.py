"""A vision-language run memmath has neither a peak nor an upper bound for (a tower other than SigLIP and Qwen2-VL's
trains; its projector trains under a method whose language model's embeddings are frozen) gets a floor and no "fits": the sum of its parts leaves
out what the tower and projector save and compute, and recorded CPU steps (validation/vision_forward_steps_training.jsonl:
tiny Qwen2-VL, Qwen2.5-VL and Gemma 3 models whose projector or whole tower trains, bf16, measured with PyTorch's
profiler by validation/vision_forward.py) peaked 14-24% above that sum. A projector, or Gemma 3's SigLIP tower or
Qwen2-VL's, that trains under full finetuning gets an upper bound instead (tests/test_vision_projector.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import memmath as mm
from memmath.decision import requirement
from memmath.gpus import GPU
from memmath.verdict import verdict_of
from validation import vision_forward as recorder

HERE = Path(recorder.__file__).resolve().parent
TRAINING = [json.loads(line) for line in (HERE / "vision_forward_steps_training.jsonl").read_text().splitlines()
            if line.strip()]
# Qwen2.5-VL's tower, whose saved tensors memmath does not count (SigLIP's and Qwen2-VL's it does:
# tests/test_vision_projector.py)
TOWER_TRAINS = [r for r in TRAINING if r["vision"] == "trains" and r["tower"] == "qwen2_5_vl"]


def _shape(r):
    return mm.from_hf_config(recorder.config(r["tower"], r["attention"], r["sizes"]))


def _need(r):
    return requirement(_shape(r), method=mm.Full(vision=r["vision"]), precision="bf16", batch_size=r["batch"],
                       seq_len=r["seq_len"], attention=r["attention"], device="cpu")


@pytest.mark.parametrize("record", TOWER_TRAINS, ids=lambda r: f"{r['tower']}-{r['vision']}")
def test_a_training_tower_gets_a_floor_under_its_measured_step(record):
    need = _need(record)
    measured = record["peak_bytes"]
    # The sum of the parts the run was judged on before: short of the measured step, so no requirement.
    assert int(need.memory.total) < 0.87 * measured
    assert need.basis == "floor" and need.refused
    assert need.bytes <= measured  # a floor: no moment of the step holds less
    assert "vision tower" in need.left_out and "--vision frozen" in need.fix


def _card(memory_bytes):
    return GPU("test card", memory_bytes, 0, 0.0, "custom", "")


def test_a_floor_that_fits_has_no_verdict_and_one_that_does_not_fit_says_so():
    record = TOWER_TRAINS[0]  # Qwen2.5-VL, tower and projector train: measured peak 28,279,314 B
    assert record["peak_bytes"] == 28_279_314
    need = _need(record)
    assert mm.check_fit(need.bytes, _card(10**9), reserved_bytes=0).fits  # the floor alone fits ...
    assert verdict_of(need, _card(10**9), reserved_bytes=0).fits is None  # ... so the verdict is refused, not "fits"
    assert verdict_of(need, _card(need.bytes // 2), reserved_bytes=0).fits is False


def test_the_searches_refuse_a_training_tower_by_name():
    record = TOWER_TRAINS[0]
    run = mm.Run(model=_shape(record), method=mm.Full(vision="trains"), precision="bf16",
                 batch_size=record["batch"], seq_len=record["seq_len"], attention="sdpa", device="cpu")
    with pytest.raises(mm.planner.VerdictRefused, match="vision"):
        mm.planner.largest_batch_that_fits(run, _card(10**9), reserved_bytes=0)


def test_the_command_line_says_no_verdict_and_exits_3(tmp_path):
    record = TOWER_TRAINS[0]
    config = tmp_path / "config.json"
    config.write_text(json.dumps(recorder.config(record["tower"], record["attention"], record["sizes"])))
    done = subprocess.run([sys.executable, "-m", "memmath", "train", str(config), "--vision", "trains", "--batch",
                           "2", "--seq", "16", "--gpu-memory", "2GB", "--reserve", "0", "--json"],
                          capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    said = json.loads(done.stdout)
    assert said["verdict"]["fits"] is None and "vision" in said["verdict"]["refused"]
    assert said["required"]["bytes"] == _need(record).bytes
