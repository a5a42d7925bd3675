"""What the command line says, read as a newcomer reads it: short refusals with the suggestion first, names never cut,
config-provided text printed as data, a plan printed in Python as the command line prints it, and a static build
that cleans up after itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import memmath as mm
from memmath.cli import FIELD_OPTIONS, build_parser

REPO = Path(__file__).resolve().parent.parent
# meta-llama/Meta-Llama-3-8B's config.json, the fields memmath reads.
LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "attention_bias": False, "mlp_bias": False, "head_dim": 128,
}


def run(*args, env=None, module="memmath", **kwargs):
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80", **(env or {})}
    environment.pop("NO_COLOR", None)
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=environment,
                          cwd=REPO, timeout=120, **kwargs)


def refusal(done) -> str:
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


# ---- a model that is not found: the suggestion first, short, no download advice for what is no Hub id --------
@pytest.mark.parametrize("typo, suggestion", [("llama3-8b", "llama-3-8b"), ("llama-2-7b@main", "llama-2-7b"),
                                              ("Mistral-7", "mistral-7b")])
def test_a_model_not_found_says_the_suggestion_first_in_a_short_line(tmp_path, typo, suggestion):
    line = refusal(run("train", typo, env={"HF_HUB_CACHE": str(tmp_path)}))
    message = line.split("error: MODEL: ", 1)[1]
    assert message.startswith(f"did you mean {suggestion}"), message
    assert len(line) < 300 and "hf download" not in line and "gpt3-175b" not in line  # no list of every preset


def test_a_hub_id_not_in_the_cache_still_gets_the_download_command(tmp_path):
    line = refusal(run("infer", "meta-llama/Llama-3.1-8B", env={"HF_HUB_CACHE": str(tmp_path)}))
    assert "`hf download meta-llama/Llama-3.1-8B config.json`" in line and len(line) - len(str(tmp_path)) < 350


# ---- text a config.json provides is printed as data -----------------------------------------------------------
FORGED = "evil\x1b[2J\x1b]0;title\x07\nRTX 4090 (25.76 GB, 24,564 MiB as the driver reports it):\n  fits\u202e"


@pytest.mark.parametrize("args", [("train", "--method", "qlora", "--seq", "512"),
                                  ("train", "--method", "qlora", "--seq", "512", "--plan-layout"),
                                  ("infer", "--context", "200000")])
def test_a_configs_name_never_reaches_the_terminal_as_escape_codes_or_lines(tmp_path, args):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**LLAMA3_8B, "_name_or_path": FORGED}))
    done = run(args[0], str(config), *args[1:], "--gpu", "RTX 4090")
    assert done.returncode in (0, 1), done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout and "\u202e" not in done.stdout
    assert not any(line.startswith("RTX 4090 (25.76 GB") and "evil" not in line for line in
                   done.stdout.splitlines()[:3]), done.stdout[:400]
    assert "evil\\x1b[2J" in done.stdout  # shown, as its escapes


# ---- without a card, a hint that a card gives a verdict ------------------------------------------------------
@pytest.mark.parametrize("command", ["train", "infer"])
def test_without_a_gpu_one_line_says_a_card_gives_a_verdict(command):
    done = run(command, "gpt2", *(["--seq", "64"] if command == "train" else []))
    assert done.returncode == 0
    assert "Add --gpu NAME (a card from `memmath gpus`) or --gpu-memory SIZE for a verdict" in " ".join(
        done.stdout.split())
    with_gpu = run(command, "gpt2", "--gpu", "T4", *(["--seq", "64"] if command == "train" else []))
    assert "for a verdict" not in with_gpu.stdout


# ---- memmath models never cuts a name -------------------------------------------------------------------------
def test_models_never_cuts_a_hub_id():
    # microsoft/Phi-3-mini-4k-instruct: phi-3-mini's source, 32 characters (its config.json on the Hub).
    text = run("models").stdout
    assert "microsoft/Phi-3-mini-4k-instruct" in text and "..." not in text
    for name in mm.PRESETS:
        assert any(line.startswith(name + " ") for line in text.splitlines()), name


# ---- a plan printed in Python reads as the command line ------------------------------------------------------
def after(start: str, text: str) -> list:
    lines = text.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith(start)):]


def test_str_of_a_plan_is_the_command_lines_text():
    plan = mm.plan_training("llama-3-8b", "RTX 4090", method=mm.QLoRA(), seq_len=512)
    text = str(plan)
    assert len(text) < 4000 and "TrainingPlan(" not in text
    cli = run("train", "llama-3-8b", "--method", "qlora", "--seq", "512", "--gpu", "RTX 4090").stdout
    # the same lines, but the title, which on the command line names where the preset came from
    assert after("Method:", text) == after("Method:", cli) and text.startswith("llama-3-8b: 8,030,261,248 parameters")
    assert plan._repr_markdown_() == "```text\n" + text + "```"
    serving = mm.plan_serving(mm.Serve("llama-2-13b", context_len=8192), "RTX 4090")
    cli = run("infer", "llama-2-13b", "--context", "8192", "--gpu", "RTX 4090").stdout
    assert after("Serving:", str(serving)) == after("Serving:", cli) and "weights in nf4" in str(serving)


# ---- the command line's options are the fields' -----------------------------------------------------------------
def test_every_option_of_a_run_or_serve_field_is_generated_from_the_field():
    from dataclasses import fields

    train, infer = (build_parser()._subparsers._group_actions[0].choices[c] for c in ("train", "infer"))
    for parser, cls in ((train, mm.Run), (infer, mm.Serve)):
        options = {action.dest: action for action in parser._actions}
        for f in fields(cls):
            spec = f.metadata.get("option")
            if spec is not None:
                assert options[f.name].option_strings == [spec["flag"]]
                assert FIELD_OPTIONS[f.name] == spec["flag"]  # a library error about the field names the option
    # --sharding sets Run.sharding: FSDP2's per-tensor shards with ZeRO stage 3
    done = run("train", "gpt2", "--seq", "64", "--gpus", "2", "--zero-stage", "3", "--sharding", "fsdp2", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["settings"]["sharding"] == "fsdp2"
    api = mm.plan_training("gpt2", seq_len=64, n_gpus=2, zero_stage=3, sharding="fsdp2")
    assert json.loads(done.stdout)["sum_of_parts"] == api.memory.total


# ---- the lessons: python -m memmath_lessons, an empty --static, SIGTERM during a build ----------------------------
def test_python_m_memmath_lessons_is_memmath_lessons():
    done = run("--path", module="memmath_lessons")
    assert done.returncode == 0 and Path(done.stdout.strip(), "00_start_here.py").is_file()
    assert done.stdout == run("lessons", "--path").stdout


def test_an_empty_static_folder_is_refused():
    line = refusal(run("lessons", "--static", ""))
    assert "--static: is empty" in line
    line = refusal(run("lessons", "--static", "  "))
    assert "--static: is empty" in line


def test_sigterm_during_a_static_build_removes_its_work_folder(tmp_path):
    pytest.importorskip("marimo")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    environment = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(temporary)}
    build = subprocess.Popen([sys.executable, "-m", "memmath", "lessons", "--static", str(tmp_path / "site")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment, cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while not list(temporary.glob("memmath-site-*")) and time.monotonic() < deadline:
            assert build.poll() is None, build.communicate()
            time.sleep(0.05)
        assert list(temporary.glob("memmath-site-*")), "the build never started"
        build.send_signal(signal.SIGTERM)
        build.wait(timeout=60)
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()
    assert list(temporary.glob("memmath-site-*")) == [] and not (tmp_path / "site").exists()
    assert build.returncode == 128 + signal.SIGTERM  # the shell's status for a process ended by SIGTERM
