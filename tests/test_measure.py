"""memmath.measure and memmath.snapshot: a user's own step measured part by part beside memmath's prediction, and
PyTorch memory snapshots read by part.

The measured step is held against the recorded measurement of the same case (memmath_lessons/reference/data/
measured_cpu.json, recorded by validation/measure.py) and against memmath's prediction within the recorded groups'
tolerances. Snapshot files are built here in the format torch/cuda/memory.py documents for `_snapshot` (there is no
GPU to make one), with sizes worked out by hand in the comments.
"""

from __future__ import annotations

import io
import json
import pickle
from collections import OrderedDict

import pytest

from memmath import snapshot
from memmath_lessons.reference.measured import load_measured

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

LLAMA_CASE = "llama-gqa/bf16/adamw/full/sdpa/nodrop/nockpt/b2s64"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMMATH_CACHE_DIR", str(tmp_path / "cache"))


def _case_config(case_id):
    from validation import measure

    case = next(c for c in measure.grid() if c.case_id == case_id)
    return case, measure._hf_config(case).to_dict()


def test_a_measured_cpu_step_equals_the_recording_and_agrees_with_memmath(transformers):
    from memmath.measure import measure_run

    case, config = _case_config(LLAMA_CASE)
    frame = load_measured()
    row = frame[frame.case_id == LLAMA_CASE].iloc[0]
    comparison = measure_run(config, dict(precision=case.precision, batch_size=case.batch_size,
                                          seq_len=case.seq_len), device="cpu")
    assert comparison.basis == "memmath" and comparison.device == "cpu"
    for key in ("param_bytes", "grad_bytes", "optimizer_state_bytes", "saved_bytes"):
        assert comparison.measured[key] == row[key], key
    for key in ("peak_step1_bytes", "peak_step2_bytes"):  # the profiler's peak: within 1% across processors
        assert abs(comparison.measured[key] - row[key]) <= 0.01 * row[key], key
    assert all(r["agrees"] for r in comparison.rows() if "agrees" in r), comparison.text()
    assert comparison.measured["peak_step2_phase"] in ("forward", "backward", "optimizer_step")
    data = json.loads(json.dumps(comparison.as_dict()))
    assert [r["key"] for r in data["rows"]][:3] == ["param_bytes", "grad_bytes", "optimizer_state_bytes"]
    assert "Saved activations" in comparison.text()
    # The step timeline: every phase of both steps measured beside memmath's peak model, held as the peaks are;
    # each step's peak is its highest phase, measured and predicted alike.
    timeline = comparison.timeline()
    assert [(r["step"], r["phase"]) for r in timeline] == [(k, p) for k in (1, 2)
                                                           for p in ("forward", "backward", "optimizer_step")]
    assert all(r["agrees"] for r in timeline), comparison.timeline_chart()
    for k in (1, 2):
        for side in ("measured", "predicted"):
            assert max(r[side] for r in timeline if r["step"] == k) == getattr(comparison, side)[f"peak_step{k}_bytes"]
    assert data["timeline"] == json.loads(json.dumps(timeline))
    assert "Step timeline" in comparison.text() and "step 2 optimizer step" in comparison.text()


def test_memmath_measure_on_the_command_line(transformers, tmp_path, capsys):
    from memmath.cli import main

    _, config = _case_config(LLAMA_CASE)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["measure", str(path), "--device", "cpu", "--batch", "1", "--seq", "16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["device"] == "cpu" and data["basis"] == "memmath"
    assert data["measured"]["param_bytes"] == data["predicted"]["param_bytes"] == 533_376  # 266,688 bf16 weights
    assert main(["measure"]) == 2
    assert "MODEL is required" in capsys.readouterr().err


def test_the_trainer_callback_measures_the_static_parts(torch, transformers, require, tmp_path):
    from memmath.measure import trainer_callback

    require("accelerate")  # transformers' Trainer needs it (installed with peft, which depends on it)
    _, config = _case_config(LLAMA_CASE)
    hf = transformers.AutoConfig.for_model("llama", **{k: v for k, v in config.items() if k != "model_type"})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(hf)  # fp32: 266,688 weights, 1,066,752 B
    ids = torch.randint(1, 1000, (4, 16))
    data = [{"input_ids": row, "labels": row} for row in ids]
    args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=2, max_steps=2,
                                          report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no")
    out = io.StringIO()
    callback = trainer_callback({"param_bytes": 1_066_752}, out=out)
    transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback]).train()
    # AdamW (Loshchilov & Hutter 2019): two fp32 moments per weight, and torch.optim's 4 B step count per tensor.
    n_tensors = sum(1 for p in model.parameters())
    assert callback.measured["param_bytes"] == 1_066_752
    assert callback.measured["grad_bytes"] == 1_066_752
    assert callback.measured["optimizer_state_bytes"] == 2 * 1_066_752 + 4 * n_tensors
    assert "param_bytes measured 1,066,752 B, predicted 1,066,752 B" in out.getvalue()


# ---- snapshots ---------------------------------------------------------------------------------------------
def _frame(filename, name, line=1):
    return {"filename": filename, "line": line, "name": name}


WEIGHT = [_frame("torch/nn/modules/module.py", "_apply"), _frame("train.py", "main")]
FORWARD = [_frame("torch/nn/modules/linear.py", "forward"), _frame("train.py", "main")]
BACKWARD = [_frame("torch/_tensor.py", "backward"), _frame("train.py", "main")]
OPTIMIZER = [_frame("torch/optim/adamw.py", "_single_tensor_adamw"), _frame("torch/optim/optimizer.py", "wrapper")]


def _snapshot_dict():
    # One large segment of 20 MiB: weights 4 MiB, an activation 2 MiB, a gradient 4 MiB, Adam's two moments 8 MiB,
    # and a 2 MiB inactive (free) block. A small segment of 2 MiB: one 512 B block of unknown origin, the rest free.
    mib = 2**20
    large = {"device": 0, "address": 0x7F0000000000, "total_size": 20 * mib, "allocated_size": 18 * mib,
             "active_size": 18 * mib, "requested_size": 18 * mib, "stream": 0, "segment_type": "large", "blocks": [
                 {"address": 0x7F0000000000, "size": 4 * mib, "requested_size": 4 * mib, "state": "active_allocated",
                  "frames": WEIGHT},
                 {"address": 0x7F0000400000, "size": 2 * mib, "requested_size": 2 * mib, "state": "active_allocated",
                  "frames": FORWARD},
                 {"address": 0x7F0000600000, "size": 4 * mib, "requested_size": 4 * mib, "state": "active_allocated",
                  "frames": BACKWARD},
                 {"address": 0x7F0000A00000, "size": 8 * mib, "requested_size": 8 * mib, "state": "active_allocated",
                  "frames": OPTIMIZER},
                 {"address": 0x7F0001200000, "size": 2 * mib, "requested_size": 0, "state": "inactive",
                  "frames": []}]}
    small = {"device": 0, "address": 0x7F1000000000, "total_size": 2 * mib, "allocated_size": 512,
             "active_size": 512, "requested_size": 500, "stream": 0, "segment_type": "small", "blocks": [
                 {"address": 0x7F1000000000, "size": 512, "requested_size": 500, "state": "active_allocated",
                  "frames": []},
                 {"address": 0x7F1000000200, "size": 2 * mib - 512, "requested_size": 0, "state": "inactive",
                  "frames": []}]}
    # The trace: weights, then a forward activation of 6 MiB freed before the gradient's 4 MiB is made.
    trace = [{"action": "alloc", "addr": 1, "size": 4 * mib, "stream": 0, "frames": WEIGHT},
             {"action": "alloc", "addr": 2, "size": 6 * mib, "stream": 0, "frames": FORWARD},
             {"action": "free_requested", "addr": 2, "size": 6 * mib, "stream": 0, "frames": BACKWARD},
             {"action": "free_completed", "addr": 2, "size": 6 * mib, "stream": 0, "frames": BACKWARD},
             {"action": "alloc", "addr": 3, "size": 4 * mib, "stream": 0, "frames": BACKWARD}]
    return {"segments": [large, small], "device_traces": [trace]}


def test_a_snapshot_is_read_by_part(tmp_path):
    mib = 2**20
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(_snapshot_dict()))  # what torch.cuda.memory._dump_snapshot writes
    summary = snapshot.read_snapshot(path)
    assert summary.allocated_by_part == {"weights": 4 * mib, "activations": 2 * mib,
                                         "gradients and backward": 4 * mib, "optimizer": 8 * mib, "other": 512}
    assert summary.allocated_bytes == 18 * mib + 512
    assert summary.reserved_bytes == 22 * mib
    assert summary.fragmented_bytes == 4 * mib - 512  # the two inactive blocks
    assert summary.largest_free_block_bytes == 2 * mib
    # Highest allocation in the trace: weights 4 MiB + the activation's 6 MiB, before it was freed.
    assert summary.trace_peak_bytes == 10 * mib
    assert summary.trace_peak_by_part["activations"] == 6 * mib
    assert "fragmented" in summary.text()


def test_memmath_measure_reads_a_snapshot_without_torch(tmp_path, capsys, monkeypatch):
    import sys

    from memmath.cli import main

    monkeypatch.setitem(sys.modules, "torch", None)
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(_snapshot_dict()))
    assert main(["measure", "--snapshot", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reserved_bytes"] == 22 * 2**20


@pytest.mark.parametrize("payload, message", [
    (pickle.dumps(OrderedDict(segments=[])), "plain data only"),  # a class reference is refused, never run
    (pickle.dumps({"blocks": []}), "'segments' list"),
    (b"not a pickle", "not a PyTorch memory snapshot"),
    (pickle.dumps({"segments": [{"total_size": -1, "blocks": []}]}), "total_size"),
])
def test_a_file_that_is_not_a_snapshot_is_refused(tmp_path, payload, message):
    path = tmp_path / "bad.pickle"
    path.write_bytes(payload)
    with pytest.raises(ValueError, match=message):
        snapshot.read_snapshot(path)


def test_measure_without_torch_names_the_extra(monkeypatch, tmp_path, capsys):
    import sys

    from memmath.cli import main

    monkeypatch.setitem(sys.modules, "torch", None)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama"}))
    assert main(["measure", str(path)]) == 2
    assert "memmath[torch]" in capsys.readouterr().err
