"""The command line (memmath/cli), run as a user runs it: `python -m memmath ...` in a subprocess.

Each MODEL form (preset, config.json, folder, a Hub id in a fake Hugging Face cache), each command,
--json checked against the Python API for the same run (and against numbers derived by hand), the
exit statuses, and bad input for every option: one line on stderr naming the option, no traceback.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import memmath as mm
from memmath import cli, sources

REPO = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[")
# meta-llama/Llama-2-7b-hf's config.json (the fields a transformers LlamaConfig reads).
LLAMA2_7B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "tie_word_embeddings": False,
    "torch_dtype": "float16", "_name_or_path": "meta-llama/Llama-2-7b-hf",
}
LLAMA2_7B_PARAMS = 6_738_415_616  # REFERENCE.md, checked against PyTorch on the meta device
MIB = 2**20
# An RTX 4090 is an Ada card: the CUDA context with lazy module loading measured on an RTX 6000 Ada, 426 MiB
# (unslothai/unsloth-zoo pull request 1053), what the command line reserves on it by default.
RTX_4090_CONTEXT = 426 * MIB


def run(*args, env=None, check_status=None):
    environment = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "", **(env or {})}
    environment.pop("NO_COLOR")
    done = subprocess.run([sys.executable, "-m", "memmath", *args], capture_output=True, text=True,
                          env=environment, cwd=REPO, timeout=120)
    if check_status is not None:
        assert done.returncode == check_status, (done.returncode, done.stdout[-2000:], done.stderr)
    return done


def run_json(*args, status=0, env=None):
    done = run(*args, "--json", env=env, check_status=status)
    assert done.stderr == ""
    return json.loads(done.stdout)


def api_settings(**changes):
    """The settings the CLI passes to training_memory by default (sdpa attention, transformers activations)."""
    settings = dict(precision="bf16", optimizer="adamw", method=mm.Full(), batch_size=1, seq_len=2048,
                    checkpointing=False, attention="sdpa", dropout=True, n_gpus=1, zero_stage=0,
                    activations="transformers")
    settings.update(changes)
    return settings


def peak_of(model, settings):
    keys = ("precision", "optimizer", "method", "batch_size", "seq_len", "checkpointing", "attention", "dropout",
            "grad_accum_steps")
    return mm.peak_memory(model, **{k: settings[k] for k in keys if k in settings})


# ---- train: the numbers are the API's, and the hand-derived ones ---------------------------------
def test_train_preset_json_carries_the_api_numbers_and_the_verdict():
    report = run_json("train", "llama-2-7b", "--batch", "2", "--seq", "512", "--gpu", "RTX 4090", status=1)
    settings = api_settings(batch_size=2, seq_len=512)
    memory = mm.training_memory("llama-2-7b", **settings)
    peak = peak_of("llama-2-7b", settings)
    assert report["parts"] == {k: int(v) for k, v in memory.parts().items()}
    assert report["sum_of_parts"] == memory.total
    assert report["peak"]["total"] == peak.total and report["peak"]["phase"] == peak.phase
    assert report["required"] == {"bytes": peak.total, "basis": "peak", "why_not_peak": None, "rank": 0,
                                  "reserved_bytes": RTX_4090_CONTEXT, "with_reserve_bytes": peak.total + RTX_4090_CONTEXT}
    # The verdict keeps 5% of the requirement free (memmath.FIT_MARGIN), as the planner judges every change.
    fit = mm.check_fit(peak.total, "RTX 4090", reserved_bytes=RTX_4090_CONTEXT, margin=0.05)
    assert report["verdict"] == {"fits": False, "refused": None, "required_bytes": fit.required_bytes,
                                 "available_bytes": fit.available_bytes, "headroom_bytes": fit.headroom_bytes,
                                 "margin_bytes": -(-peak.total * 5 // 100),
                                 "gpu_memory_bytes": 24564 * MIB, "reserved_bytes": RTX_4090_CONTEXT,
                                 # short by: the requirement and its 5% margin less the usable memory
                                 "spare": 0, "short_by": peak.total + -(-peak.total * 5 // 100) - fit.available_bytes,
                                 "what_fails": "the card"}
    assert report["exit_status"] == 1 and report["gpu"]["name"] == "RTX 4090"
    assert report["model"]["source"] == "preset" and report["model"]["total_params"] == LLAMA2_7B_PARAMS
    assert report["settings"]["seq_len"] == 512 and report["settings"]["seq_len_default"] is False


def test_train_hand_derived_bytes_the_articles_8_bytes_per_parameter():
    # Pure bf16 with Adam: 2 B weights + 2 B gradients + 2 x 2 B moments per parameter (the article's
    # 56 GB for 7B), plus PyTorch's 4-byte step counter for each of Llama-2-7B's 291 tensors
    # (embedding, 32 x 9 per block, final norm, head).
    report = run_json("train", "llama-2-7b", "--precision", "bf16", "--optimizer", "adam", "--seq", "512")
    n = LLAMA2_7B_PARAMS
    parts = report["parts"]
    assert parts["weights"] == 2 * n == 13_476_831_232
    assert parts["gradients"] == 2 * n
    assert parts["optimizer_states"] == 4 * n + 4 * 291
    assert parts["master_weights"] == parts["quantization_constants"] == parts["gradient_accumulation"] == 0
    assert parts["weights"] + parts["gradients"] + parts["optimizer_states"] - 4 * 291 == 8 * n
    assert parts["activations"] > 0
    assert report["verdict"] is None and report["gpu"] is None and report["exit_status"] == 0


def test_train_without_seq_uses_the_stated_default_never_zero_activations():
    report = run_json("train", "gpt2")
    assert report["settings"]["seq_len"] == mm.run.DEFAULT_SEQ_LEN == 2048
    assert report["settings"]["seq_len_default"] is True
    assert "default" in report["assumptions"]["seq_len"]
    assert report["parts"]["activations"] == mm.training_memory("gpt2", **api_settings()).activations > 0
    text = run("train", "gpt2", check_status=0).stdout
    assert "2,048 tokens (the default length; set --seq)" in " ".join(text.split())


def test_train_qlora_json_and_the_changes_are_judged_on_their_peak():
    args = ("train", "llama-3-8b", "--method", "qlora", "--batch", "4", "--seq", "2048", "--gpu", "rtx 4090")
    report = run_json(*args, status=1)
    settings = api_settings(method=mm.QLoRA(rank=8, targets=("q", "v")), batch_size=4)
    memory = mm.training_memory("llama-3-8b", **settings)
    assert report["parts"] == {k: int(v) for k, v in memory.parts().items()}
    assert report["settings"]["method"]["name"] == "qlora" and report["settings"]["method"]["rank"] == 8
    assert report["parts"]["quantization_constants"] > 0
    fitting = [c for c in report["changes"] if c["fits"]]
    assert fitting, "checkpointing or a smaller batch fits an 8B QLoRA run on a 24 GB card"
    for change in report["changes"]:
        s = change["settings"]
        redo = api_settings(method=mm.QLoRA(rank=8, targets=("q", "v")), batch_size=s["batch_size"],
                            checkpointing=s["checkpointing"], attention=s["attention"], optimizer=s["optimizer"],
                            precision=s["precision"], grad_accum_steps=s.get("grad_accum_steps", 1))
        if s["n_gpus"] > 1 or s["method"]["name"] != "qlora" or s["offload"]:  # offloading: an upper bound
            continue
        peak = peak_of("llama-3-8b", redo).total
        assert change["required_bytes"] == peak and change["basis"] == "peak"
        assert change["fits"] == mm.check_fit(peak, "RTX 4090", reserved_bytes=RTX_4090_CONTEXT).fits
    assert [c["saved_bytes"] for c in report["changes"]] == sorted((c["saved_bytes"] for c in report["changes"]),
                                                                   reverse=True)



@pytest.mark.parametrize("options, method", [
    (("--quant-type", "int8"), dict(quant_type="int8")),
    (("--quant-type", "fp4", "--no-double-quant"), dict(quant_type="fp4", double_quant=False)),
    (("--quant-layout", "bitsandbytes"), dict(layout="bitsandbytes")),
], ids=["int8-base", "fp4-plain-constants", "bitsandbytes-layout"])
def test_train_qlora_base_options_are_the_apis(options, method):
    report = run_json("train", "llama-3-8b", "--method", "qlora", "--seq", "512", *options)
    memory = mm.training_memory("llama-3-8b", **api_settings(method=mm.QLoRA(rank=8, targets=("q", "v"), **method),
                                                             seq_len=512))
    assert report["parts"] == {k: int(v) for k, v in memory.parts().items()}
    for key, value in method.items():
        assert report["settings"]["method"][key] == value


def test_train_qlora_int8_base_weights_by_hand():
    # LLM.int8 (Dettmers et al. 2022): 1 B per value of every block linear plus one fp32 scale per output row;
    # Llama-3-8B's blocks: 32 x (q 4096x4096 + k, v 1024x4096 + o 4096x4096 + gate, up 14336x4096 + down
    # 4096x14336) = 32 x 218,103,808 values; scales: 32 x (4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096) rows.
    report = run_json("train", "llama-3-8b", "--method", "qlora", "--quant-type", "int8", "--seq", "512")
    values, rows = 32 * 218_103_808, 32 * (4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096)
    assert report["parts"]["quantization_constants"] == 4 * rows
    # the rest in bf16: embeddings and head 2 x 128,256 x 4,096, norms 65 x 4,096; adapters r=8 on q, v in fp32
    rest = 2 * (2 * 128_256 * 4096 + 65 * 4096)
    adapters = 4 * 32 * 8 * ((4096 + 4096) + (4096 + 1024))
    assert report["parts"]["weights"] == values + rest + adapters


@pytest.mark.parametrize("options, option", [
    (("--method", "lora", "--quant-type", "fp4"), "--quant-type"),
    (("--method", "qlora", "--quant-type", "int8", "--no-double-quant"), "--no-double-quant"),
    (("--method", "qlora", "--quant-type", "nf5"), "--quant-type"),
    (("--method", "full", "--quant-layout", "paper"), "--quant-layout"),
])
def test_train_qlora_base_options_refused_by_name(options, option):
    done = run("train", "llama-3-8b", *options, check_status=2)
    assert done.stderr.startswith(f"memmath train: error: {option}") and "Traceback" not in done.stderr

def test_train_the_text_answer_reads_in_80_columns_without_colour_when_piped():
    done = run("train", "llama-3-8b", "--batch", "4", "--seq", "2048", "--gpu", "RTX 4090", check_status=1)
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert not ANSI.search(done.stdout) and done.stderr == ""
    text = done.stdout
    assert re.search(r"short by [0-9.,]+ GB on RTX 4090", text)
    assert "446,693,376" in text and "CUDA context" in text  # what was reserved, in bytes: 426 MiB
    assert "Peak of the step" in text and "Needed: peak + reserve" in text


def test_train_fits_exits_0_and_says_the_headroom():
    done = run("train", "gpt2", "--seq", "512", "--gpu", "H200", check_status=0)
    assert "fits, with" in done.stdout and "to spare" in done.stdout


def test_train_zero_sharding_is_judged_on_a_bound_and_says_why():
    report = run_json("train", "llama-2-7b", "--seq", "512", "--gpus", "8", "--zero-stage", "3", "--gpu", "A100 80GB")
    settings = api_settings(seq_len=512, n_gpus=8, zero_stage=3)
    memory = mm.training_memory("llama-2-7b", **settings)
    assert report["parts"] == {k: int(v) for k, v in memory.parts().items()}
    assert report["required"]["basis"] == "upper_bound" and report["peak"] is None
    assert "ZeRO" in report["required"]["why_not_peak"] and "upper bound" in report["required"]["why_not_peak"]
    # the command line takes dropout from the model's config (Llama 2: none), as a Run that leaves it unset does
    unset = {k: v for k, v in settings.items() if k != "dropout"}
    assert report["verdict"]["required_bytes"] == mm.requirement("llama-2-7b", **unset).bytes > memory.total


@pytest.mark.parametrize("method, extra, api_method", [
    ("freeze", ["--trainable-layers", "2"], mm.Freeze(trainable_layers=2)),
    ("lora", ["--rank", "16", "--targets", "all"], mm.LoRA(rank=16, targets="all")),
    ("adapters", ["--bottleneck", "32"], mm.Adapters(bottleneck=32)),
])
def test_train_each_method_matches_the_api(method, extra, api_method):
    report = run_json("train", "gpt2", "--method", method, *extra, "--seq", "256", "--unit", "GiB")
    activations = "textbook" if method == "adapters" else "transformers"
    memory = mm.training_memory("gpt2", **api_settings(method=api_method, seq_len=256, activations=activations))
    assert report["parts"] == {k: int(v) for k, v in memory.parts().items()}
    assert report["assumptions"]["activations"] == activations
    assert report["model"]["trainable_params"] == memory.trainable_params
    assert report["unit"] == "GiB"


# ---- MODEL forms ------------------------------------------------------------------------------
def write_config(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(LLAMA2_7B_CONFIG))
    return path


def test_model_as_a_config_file_and_as_its_folder(tmp_path):
    path = write_config(tmp_path / "llama")
    preset = run_json("train", "llama-2-7b", "--seq", "256")
    for given, source in ((str(path), "config file"), (str(path.parent), "config folder")):
        report = run_json("train", given, "--seq", "256")
        assert report["model"]["source"] == source and report["model"]["config_path"] == str(path)
        assert report["model"]["total_params"] == LLAMA2_7B_PARAMS
        assert report["parts"] == preset["parts"]


def fake_hub_cache(root: Path, repo="meta-llama/Llama-2-7b-hf", commit="0123abcd") -> Path:
    folder = root / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    write_config(folder / "snapshots" / commit)
    return folder


@pytest.mark.parametrize("variable", ["HF_HUB_CACHE", "HF_HOME"])
def test_model_as_a_hub_id_from_the_local_cache(tmp_path, variable):
    hub = tmp_path / "hub"
    fake_hub_cache(hub)
    env = {"HF_HUB_CACHE": str(hub)} if variable == "HF_HUB_CACHE" else {"HF_HOME": str(tmp_path), "HF_HUB_CACHE": ""}
    report = run_json("train", "meta-llama/Llama-2-7b-hf", "--seq", "256", env=env)
    assert report["model"]["source"] == "hugging face cache"
    assert report["model"]["name"] == "meta-llama/Llama-2-7b-hf"
    assert report["model"]["config_path"].endswith("snapshots/0123abcd/config.json")
    assert report["model"]["total_params"] == LLAMA2_7B_PARAMS


def test_model_missing_from_the_cache_says_where_it_looked_and_how_to_get_it(tmp_path):
    done = run("train", "meta-llama/Llama-3.1-8B", env={"HF_HUB_CACHE": str(tmp_path)}, check_status=2)
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert str(tmp_path / "models--meta-llama--Llama-3.1-8B") in done.stderr
    # huggingface_hub 1.0 removed `huggingface-cli`; its command line is `hf` (`hf download --help`)
    assert "`hf download meta-llama/Llama-3.1-8B config.json`" in done.stderr and "huggingface-cli" not in done.stderr
    assert "never uses the network" in done.stderr


def test_the_cli_never_loads_a_network_client(tmp_path):
    fake_hub_cache(tmp_path)
    code = ("import sys, io, contextlib, memmath.cli as c\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    c.main(['train', 'meta-llama/Llama-2-7b-hf', '--seq', '64'])\n"
            "    c.main(['train', 'no-such/model'])\n"
            "print(sorted(m for m in ('huggingface_hub', 'requests', 'httpx', 'urllib3') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_CACHE": str(tmp_path)})
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


def test_the_command_line_is_a_small_projection_of_the_library():
    # Its options come from the fields' metadata (memmath.flags), its answers from the planners and memmath.report:
    # what is left is the parser, the dispatch and the messages, at most 700 lines.
    lines = sum(len(path.read_text().splitlines()) for path in (REPO / "memmath" / "cli").glob("*.py"))
    assert lines <= 700, f"memmath/cli/*.py holds {lines} lines"


def test_a_training_question_loads_neither_the_trace_nor_the_measurement():
    # Each command's module loads when it runs (memmath.cli.COMMANDS): torch's side stays out of a plain answer.
    code = ("import sys, io, contextlib, memmath.cli as c\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    c.main(['train', 'llama-3-8b', '--method', 'lora', '--gpu', 'RTX 4090'])\n"
            "print(sorted(m for m in ('memmath.traced', 'memmath.cli.traced', 'memmath.measure', 'memmath.snapshot',\n"
            "                         'memmath.stepping', 'memmath.serving') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_cli_module_imports_only_the_standard_library():
    code = ("import sys, memmath\nbefore = set(sys.modules)\nimport memmath.cli\n"
            "new = {m.split('.')[0] for m in set(sys.modules) - before} - {'memmath'}\n"
            "print(sorted(m for m in new if m not in sys.stdlib_module_names))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.strip() == "[]", done.stdout + done.stderr



@pytest.mark.parametrize("args", [
    ["train", "llama-3-8b", "--method", "lora", "--batch", "4", "--seq", "2048", "--gpu", "RTX 4090"],
    ["train", "llama-2-7b", "--gpus", "8", "--zero-stage", "3", "--gpu", "H100 80GB", "--json"],
    ["train", "gpt2", "--method", "qlora", "--seq", "1024", "--gpu", "T4"],
    ["infer", "llama-2-7b", "--context", "32768", "--weights", "nf4", "--gpu", "RTX 4090"],
    ["models"], ["gpus"],
], ids=["train-lora", "train-zero3", "train-qlora", "infer", "models", "gpus"])
def test_a_question_about_one_run_never_imports_numpy(args):
    # numpy's import is most of a command's start (benchmarks/cli_speed.py holds the command line near
    # vramcalc's time): one run is Python ints,
    # and numpy loads only when an array is in play (memmath/arrays.py).
    code = ("import sys, io, contextlib, memmath.cli as c\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    status = c.main({args!r})\n"
            "print(status, 'numpy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    status, numpy_loaded = done.stdout.split()
    assert status in ("0", "1") and numpy_loaded == "False", done.stdout + done.stderr


def test_a_sweep_still_computes_with_numpy_loaded_on_demand():
    # In a fresh interpreter: a scalar answer without numpy, then a sweep of the same run (its arrays
    # import numpy); the sweep's element equals the scalar answer.
    code = ("import sys, memmath as mm\n"
            "one = mm.training_memory('llama-2-7b', seq_len=2048, batch_size=2).total\n"
            "before = 'numpy' in sys.modules\n"
            "import numpy as np\n"
            "many = mm.training_memory('llama-2-7b', seq_len=2048, batch_size=np.array([1, 2, 4])).total\n"
            "print(before, type(one).__name__, int(many[1]) == one)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.split() == ["False", "int", "True"], done.stdout + done.stderr

# ---- infer, models, gpus --------------------------------------------------------------------
def test_infer_json_carries_the_api_numbers():
    report = run_json("infer", "llama-3-8b", "--context", "32768", "--batch", "2", "--weights", "nf4", "--kv", "fp8_e4m3",
                      "--gpu", "rtx4090")
    memory = mm.inference_memory("llama-3-8b", weights_format="nf4", kv_format="fp8_e4m3", batch_size=2,
                                 context_len=32768, attention="sdpa")
    assert report["parts"] == {k: int(v) for k, v in memory.parts().items()}
    assert report["total"] == memory.total and report["rule_of_thumb"] == memory.rule_of_thumb
    fit = mm.check_fit(memory.total, "RTX 4090", reserved_bytes=RTX_4090_CONTEXT)
    assert report["verdict"]["fits"] == fit.fits and report["verdict"]["headroom_bytes"] == fit.headroom_bytes
    assert report["exit_status"] == (0 if fit.fits else 1)
    assert report["decode_tokens_per_second_upper_bound"] == pytest.approx(
        mm.inference.decode_tokens_per_second(memory, "RTX 4090"))


def test_infer_hand_derived_kv_cache_and_a_long_context_that_does_not_fit():
    # Llama-2-13B at 8,192 tokens in 16-bit: 2 x 40 layers x 40 heads x 128 x 8192 x 2 B = 6.7 GB (REFERENCE.md).
    report = run_json("infer", "llama-2-13b", "--context", "8192")
    assert report["parts"]["kv_cache"] == 2 * 40 * 40 * 128 * 8192 * 2 == 6_710_886_400
    assert report["parts"]["weights"] == 2 * 13_015_864_320
    long = run_json("infer", "llama-3-8b", "--context", "131072", "--gpu", "RTX 4090", status=1)
    limit = long["longest_context_that_fits"]
    fits = mm.check_fit(mm.inference_memory("llama-3-8b", context_len=limit), "RTX 4090", reserved_bytes=RTX_4090_CONTEXT)
    over = mm.check_fit(mm.inference_memory("llama-3-8b", context_len=limit + 1), "RTX 4090",
                        reserved_bytes=RTX_4090_CONTEXT)
    assert fits.fits and not over.fits
    assert any(c["fits"] for c in long["changes"])
    text = run("infer", "llama-3-8b", "--context", "131072", "--gpu", "RTX 4090", check_status=1).stdout
    assert max(len(line) for line in text.splitlines()) <= 80 and "short by" in text


def test_infer_without_context_states_the_default():
    report = run_json("infer", "gpt2")
    assert report["settings"]["context_len"] == mm.inference.SERVING_DEFAULTS['context_len'] and report["settings"]["context_len_default"]


def test_models_lists_every_preset_with_its_source():
    report = run_json("models")
    assert [r["name"] for r in report["models"]] == list(mm.PRESETS)
    for row in report["models"]:
        assert row["params"] == mm.PRESETS[row["name"]].n_params
        assert row["source"] == mm.presets.PRESET_SOURCES[row["name"]]
    text = run("models", check_status=0).stdout
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "6,738,415,616" in text and "meta-llama/Llama-2-7b-hf" in text


# Mixtral-8x7B (mistralai/Mixtral-8x7B-v0.1 config.json: h 4,096, 32 layers, 8 key/value heads of 128, experts of
# 14,336, 8 experts, 2 per token, vocabulary 32,000, untied head), by hand: per block attention 2 x 4,096^2 +
# 2 x 4,096 x 1,024 = 41,943,040, router 4,096 x 8 = 32,768, two norms 8,192; one expert 3 x 4,096 x 14,336 =
# 176,160,768. All: 32 x (41,984,000 + 8 x 176,160,768) + 2 x 32,000 x 4,096 + 4,096 = 46,702,792,704; per token
# (2 experts): 32 x (41,984,000 + 2 x 176,160,768) + 262,148,096 = 12,879,925,248. Mistral's announcement: 46.7B
# total, 12.9B active.
# Qwen3-30B-A3B (Qwen/Qwen3-30B-A3B config.json: h 2,048, 48 layers, 32 query heads and 4 key/value heads of 128,
# q/k norms, experts of 768, 128 experts, 8 per token, vocabulary 151,936, untied head): per block attention
# 2 x 2,048 x 4,096 + 2 x 2,048 x 512 = 18,874,368, q/k norms 256, two norms 4,096, router 2,048 x 128 = 262,144;
# one expert 3 x 2,048 x 768 = 4,718,592. Per token (8 experts): 48 x (19,140,864 + 8 x 4,718,592) +
# 2 x 151,936 x 2,048 + 2,048 = 3,353,032,704. The model card: 30.5B total, 3.3B activated.
MOE_ACTIVE = {"mixtral-8x7b": (46_702_792_704, 12_879_925_248, 2, 8),
              "qwen3-30b-a3b": (30_532_122_624, 3_353_032_704, 8, 128),
              # openai/gpt-oss-*: transformers' count (tests/fixtures/configs/expected_counts.json) less the unrouted
              # experts, each 3 x 2,880 x 2,880 weights and 3 x 2,880 biases: 24 x 28 (20b), 36 x 124 (120b)
              "gpt-oss-20b": (20_914_757_184, 20_914_757_184 - 24 * 28 * 24_891_840, 4, 32),
              "gpt-oss-120b": (116_829_156_672, 116_829_156_672 - 36 * 124 * 24_891_840, 4, 128),
              # Llama 4 Scout's text model, derived by hand in tests/test_families_dense.py (card: 17B active)
              "llama-4-scout": (107_769_861_120, 17_172_894_720, 1, 16),
              # Llama 4 Maverick's text model: transformers' count on the meta device (tests/test_block_layouts.py)
              # less 24 MoE blocks' 127 unrouted experts of 3 x 5,120 x 8,192 (card: 17B active, 400B total)
              "llama-4-maverick": (400_711_848_960, 400_711_848_960 - 24 * 127 * 3 * 5120 * 8192, 1, 128),
              # transformers' counts (tests/test_families_*.py) less each MoE block's unrouted experts of
              # 3 x h x moe_intermediate_size: DeepSeek-V3 58 blocks x 248, DeepSeek-V2-Lite 26 x 58, GLM-4.5-Air
              # 45 x 120, Qwen3-Next 48 x 502
              "deepseek-v3": (671_026_404_352, 671_026_404_352 - 58 * 248 * 3 * 7168 * 2048, 8, 256),
              "deepseek-v2-lite": (15_706_484_224, 15_706_484_224 - 26 * 58 * 3 * 2048 * 1408, 6, 64),
              "glm-4.5-air": (106_852_245_504, 106_852_245_504 - 45 * 120 * 3 * 4096 * 1408, 8, 128),
              "qwen3-next-80b-a3b": (79_674_391_296, 79_674_391_296 - 48 * 502 * 3 * 2048 * 512, 10, 512),
              # ERNIE-4.5-21B-A3B (tests/test_families_ernie.py): 27 MoE blocks x 58 unrouted experts
              "ernie-4.5-21b-a3b": (21_825_437_888, 21_825_437_888 - 27 * 58 * 3 * 2560 * 1536, 6, 64),
              # MiniMax-M2: 62 blocks x 248 unrouted experts of 3 x 3,072 x 1,536 (tests/test_families_minimax.py)
              "minimax-m2": (228_689_748_992, 228_689_748_992 - 62 * 248 * 3 * 3072 * 1536, 8, 256)}


def test_models_shows_a_mixture_of_experts_active_parameters_per_token():
    report = {row["name"]: row for row in run_json("models")["models"]}
    for name, (total, active, per_token, experts) in MOE_ACTIVE.items():
        row = report[name]
        assert (row["params"], row["active_params"], row["experts_per_tok"], row["n_experts"]) == \
            (total, active, per_token, experts)
    assert abs(report["mixtral-8x7b"]["active_params"] / 1e9 - 12.9) < 0.05  # Mistral's published 12.9B
    assert abs(report["qwen3-30b-a3b"]["active_params"] / 1e9 - 3.3) < 0.06  # Qwen's published 3.3B
    dense = report["llama-2-7b"]
    assert dense["active_params"] == dense["params"] == LLAMA2_7B_PARAMS and dense["n_experts"] == 0
    lines = run("models", check_status=0).stdout.splitlines()
    for name, (total, active, per_token, experts) in MOE_ACTIVE.items():
        at = next(i for i, line in enumerate(lines) if line.startswith(name + " "))
        assert f"{total:,}" in lines[at]
        below = next(line for line in lines[at + 1:] if "active per token" in line)  # after a wrapped source
        assert below.split() == [f"{active:,}", "active", "per", "token", f"({per_token}", "of",
                                 f"{experts}", "experts)"]
    assert sum("active per token" in line for line in lines) == len(MOE_ACTIVE)  # none for a dense model's row


# ---- a card without bf16 (T4, V100): one verdict, the run it would train instead, the same exit status ----------
# NVIDIA's T4 (Turing, compute capability 7.5) and V100 (Volta, 7.0) have no bf16 arithmetic; memmath's default
# recipe is pure bf16, so the verdict says the card cannot run it and judges fp16 mixed precision ("mixed") instead.
def test_bf16_on_a_t4_that_would_fit_says_so_in_one_verdict_and_the_status_stays_0():
    args = ("train", "llama-2-7b", "--method", "qlora", "--seq", "512", "--gpu", "T4")
    report = run_json(*args, status=0)
    plan = mm.plan_training("llama-2-7b", "T4", method=mm.QLoRA(), seq_len=512)
    instead = mm.requirement(plan.run.replace(precision="mixed"))
    fit = mm.check_fit(instead.bytes, "T4", reserved_bytes=1343 * MIB, margin=0.05)
    assert report["verdict"]["fits"] and report["exit_status"] == 0 and plan.fits
    assert report["cannot_run"] == plan.cannot_run.message and "no bf16 arithmetic" in report["cannot_run"]
    assert report["cannot_run_instead"] == {
        "precision": "mixed", "option": "--precision mixed", "required_bytes": instead.bytes,
        "basis": instead.basis.replace(" ", "_"), "with_reserve_bytes": instead.bytes + 1343 * MIB,
        "fits": fit.fits, "headroom_bytes": fit.headroom_bytes}
    # the API judges it once (plan.recipe_instead); the command line and lesson 8 print that judgement
    assert (plan.recipe_instead.precision, plan.recipe_instead.requirement, plan.recipe_instead.fit) == (
        "mixed", instead, fit)
    assert mm.plan_training("llama-2-7b", "RTX 4090").recipe_instead is None
    assert mm.plan_training("llama-2-7b", method=mm.QLoRA()).recipe_instead is None  # no card, no verdict
    text = " ".join(run(*args, check_status=0).stdout.split())
    verdict = text.split("T4 (16.11 GB, 15,360 MiB as the driver reports it):", 1)[1].strip()
    assert verdict.startswith(f"would fit, with {mm.format_bytes(plan.fit.headroom_bytes)} to spare, but cannot "
                              "run here: the T4 (Turing, compute capability 7.5) has no bf16 arithmetic")
    # one verdict: no plain "fits" about the bf16 run, only about the run it would train instead
    assert re.findall(r"\b(?:would fit|fits)\b", verdict) == ["would fit", "fits"]
    assert (f"with --precision mixed instead: needs {mm.format_bytes(instead.bytes + 1343 * MIB)} (the peak "
            f"{mm.format_bytes(instead.bytes)} + 1.41 GB reserved): fits, with "
            f"{mm.format_bytes(fit.headroom_bytes)} to spare") in verdict


def test_bf16_on_a_v100_that_does_not_fit_says_both_and_the_status_stays_1():
    args = ("train", "llama-2-13b", "--seq", "512", "--gpu", "V100 32GB")
    report = run_json(*args, status=1)
    assert not report["verdict"]["fits"] and report["exit_status"] == 1
    assert report["cannot_run_instead"]["precision"] == "mixed" and not report["cannot_run_instead"]["fits"]
    text = " ".join(run(*args, check_status=1).stdout.split())
    assert "does not fit: short by" in text and "nor could it run here: the V100 32GB (Volta" in text
    assert "with --precision mixed instead: needs" in text and "does not fit either: short by" in text
    assert "These changes keep the 'bf16' recipe, which the V100 32GB cannot run: add --precision mixed" in text


def test_a_card_with_bf16_gets_no_recipe_warning():
    report = run_json("train", "llama-2-7b", "--method", "qlora", "--seq", "512", "--gpu", "RTX 4090")
    assert report["cannot_run"] is None and report["cannot_run_instead"] is None
    assert "cannot run" not in run("train", "llama-2-7b", "--method", "qlora", "--seq", "512", "--gpu", "RTX 4090",
                                   check_status=0).stdout


def test_gpus_lists_the_catalog_with_the_drivers_memory():
    report = run_json("gpus")
    assert {r["name"]: r["memory_bytes"] for r in report["gpus"]} == {
        name: gpu.memory_bytes for name, gpu in mm.GPUS.items()}
    assert report["sources"]
    text = run("gpus", check_status=0).stdout
    assert max(len(line) for line in text.splitlines()) <= 80 and "24,564" in text


# ---- the reserve, the GPU names, colour, the entry point ---------------------------------------
def test_the_default_reserve_is_the_planner_lessons_cuda_context_figure():
    for name in ("memmath_lessons.reference.literature", "memmath.literature"):
        try:
            literature = importlib.import_module(name)
            break
        except ImportError:
            continue
    # Without a card (or a card of unknown family) the reserve is the V100's measured context; on a card, its family's:
    # the same figures the lessons say (memmath_lessons.viz reads them from the cards).
    reported = literature.REPORTED["cuda_context_v100"]
    assert mm.parse_bytes(f"{reported.value} {reported.unit}") == mm.CUDA_CONTEXT_BYTES == 1_408_237_568
    ada = literature.REPORTED["cuda_context_rtx6000ada_lazy"]
    no_card = run_json("train", "gpt2", "--seq", "128")
    assert no_card["assumptions"]["reserved"]["bytes"] == mm.CUDA_CONTEXT_BYTES
    on_4090 = run_json("train", "gpt2", "--seq", "128", "--gpu", "RTX 4090")
    assert on_4090["assumptions"]["reserved"]["bytes"] == mm.parse_bytes(f"{ada.value} {ada.unit}") == RTX_4090_CONTEXT
    assert "unsloth-zoo pull request 1053" in on_4090["assumptions"]["reserved"]["what"]
    gpus = {row["name"]: row["cuda_context_bytes"] for row in run_json("gpus")["gpus"]}
    assert gpus == {name: gpu.cuda_context_bytes for name, gpu in mm.GPUS.items()}


def test_reserve_can_be_set_and_changes_the_verdict():
    tight = run_json("train", "gpt2", "--seq", "128", "--gpu-memory", "3GiB", "--reserve", "0")
    assert tight["required"]["reserved_bytes"] == 0 and tight["verdict"]["available_bytes"] == 3 * 2**30
    custom = run_json("train", "gpt2", "--seq", "128", "--gpu-memory", "3GiB", "--reserve", "1.5GiB")
    assert custom["verdict"]["headroom_bytes"] == tight["verdict"]["headroom_bytes"] - int(1.5 * 2**30)
    assert custom["assumptions"]["reserved"] == {"bytes": int(1.5 * 2**30), "default": False,
                                                 "what": "given by --reserve"}


@pytest.mark.parametrize("given, name", [("RTX 4090", "RTX 4090"), ("rtx4090", "RTX 4090"), ("  rtx 4090 ", "RTX 4090"),
                                         ("a100-80gb", "A100 80GB"), ("h100", "H100 80GB"), ("4090", "RTX 4090")])
def test_gpu_names_forgive_case_and_spacing(given, name):
    class Args:
        gpu, gpu_memory = given, None

    assert cli.resolve_gpu(Args).name == name


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    class Terminal:
        def isatty(self):
            return True

    class Pipe:
        def isatty(self):
            return False

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert cli.Style(Terminal()).good("fits") == "\x1b[1;32mfits\x1b[0m"
    assert cli.Style(Pipe()).good("fits") == "fits"
    monkeypatch.setenv("NO_COLOR", "1")
    assert cli.Style(Terminal()).bad("does not fit") == "does not fit"


def test_the_console_script_names_an_importable_main(capsys):
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["memmath"].partition(":")
    main = getattr(importlib.import_module(module), function)
    assert main is cli.main
    assert main(["gpus", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["command"] == "gpus"


def test_no_command_prints_help_and_exits_2():
    done = run(check_status=2)
    assert "train" in done.stderr and "Traceback" not in done.stderr


# ---- bad input: every option, one line naming it, exit status 2 ----------------------------------
BAD_INPUT = [
    (["train", "no-such-model"], "MODEL"),
    (["train", "./missing/config.json"], "MODEL"),
    (["train", "gpt2", "--method", "sgd"], "--method"),
    (["train", "gpt2", "--rank", "8"], "--rank"),
    (["train", "gpt2", "--method", "lora", "--rank", "0"], "--rank"),
    (["train", "gpt2", "--method", "lora", "--rank", "99999"], "--rank"),
    (["train", "gpt2", "--method", "qlora", "--targets", "q,x"], "--targets"),
    (["train", "gpt2", "--targets", "q"], "--targets"),
    (["train", "gpt2", "--method", "freeze"], "--trainable-layers"),
    (["train", "gpt2", "--method", "freeze", "--trainable-layers", "13"], "--trainable-layers"),
    (["train", "gpt2", "--method", "freeze", "--trainable-layers", "-1"], "--trainable-layers"),
    (["train", "gpt2", "--method", "adapters", "--bottleneck", "wide"], "--bottleneck"),
    (["train", "gpt2", "--bottleneck", "8"], "--bottleneck"),
    (["train", "gpt2", "--precision", "fp64"], "--precision"),
    (["train", "gpt2", "--optimizer", "lion"], "--optimizer"),
    (["train", "gpt2", "--batch", "0"], "--batch"),
    (["train", "gpt2", "--batch", "2000000"], "--batch"),
    (["train", "gpt2", "--seq", "1.5"], "--seq"),
    (["train", "gpt2", "--seq", "99999999"], "--seq"),
    (["train", "gpt2", "--attention", "flash"], "--attention"),
    (["train", "gpt2", "--activations", "exact"], "--activations"),
    (["train", "gpt2", "--method", "adapters", "--activations", "transformers"], "--activations"),
    (["train", "gpt2", "--gpus", "0"], "--gpus"),
    (["train", "gpt2", "--gpus", "99999999"], "--gpus"),
    (["train", "gpt2", "--zero-stage", "4"], "--zero-stage"),
    (["train", "gpt2", "--gpu", "RTX 9090"], "--gpu"),
    (["train", "gpt2", "--gpu", "a100"], "--gpu"),
    (["train", "gpt2", "--gpu-memory", "24"], "--gpu-memory"),
    (["train", "gpt2", "--gpu-memory", "0GB"], "--gpu-memory"),
    (["train", "gpt2", "--gpu", "T4", "--gpu-memory", "24GiB"], "--gpu-memory"),
    (["train", "gpt2", "--reserve", "lots"], "--reserve"),
    (["train", "gpt2", "--gpu", "T4", "--reserve", "99GB"], "--reserve"),
    (["train", "gpt2", "--unit", "furlongs"], "--unit"),
    (["train", "gpt2", "--no-such-option"], "--no-such-option"),
    (["train"], "MODEL"),
    (["infer", "gpt2", "--context", "0"], "--context"),
    (["infer", "gpt2", "--context", "99999999"], "--context"),
    (["infer", "gpt2", "--batch", "-1"], "--batch"),
    (["infer", "gpt2", "--weights", "fp64"], "--weights"),
    (["infer", "gpt2", "--kv", "int3"], "--kv"),
    (["infer", "gpt2", "--attention", "flash"], "--attention"),
    (["infer", "gpt2", "--gpu", "GTX 480"], "--gpu"),
    (["infer", "gpt2", "--gpu-memory", "lots"], "--gpu-memory"),
    (["infer", "gpt2", "--gpu", "T4", "--reserve", "20GB"], "--reserve"),
    (["infer", "gpt2", "--unit", "parsecs"], "--unit"),
    (["models", "--unit", "GB"], "--unit"),
    # An empty --gpu read as "no GPU" (exit 0, no verdict); sizes past any card, fractions of a byte
    (["train", "gpt2", "--gpu", ""], "--gpu"),
    (["train", "gpt2", "--gpu", "   "], "--gpu"),
    (["infer", "gpt2", "--gpu", ""], "--gpu"),
    (["train", "gpt2", "--gpu-memory", ""], "--gpu-memory"),
    (["infer", "gpt2", "--gpu-memory", " "], "--gpu-memory"),
    (["train", "gpt2", "--gpu-memory", "1e30GB"], "--gpu-memory"),
    (["train", "gpt2", "--reserve", "0.3B"], "--reserve"),
    (["train", "gpt2", "--gpu-memory", "1,5GB"], "--gpu-memory"),
    (["lessons", "--port", "0"], "--port"),
    (["lessons", "--static", "site", "--headless"], "--headless"),
    (["nonsense"], "COMMAND"),
]


@pytest.fixture(scope="module")
def bad_input_results():
    """Every bad-input case run as its own process, four at a time (one answer per case)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip((tuple(a) for a, _ in BAD_INPUT), pool.map(lambda case: run(*case[0]), BAD_INPUT)))


@pytest.mark.parametrize("args, option", BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_naming_the_option(bad_input_results, args, option):
    done = bad_input_results[tuple(args)]
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("memmath") and ": error: " in lines[0]
    assert option in lines[0]


def test_choice_errors_list_the_allowed_values(bad_input_results):
    method = bad_input_results[("train", "gpt2", "--method", "sgd")].stderr
    assert "full, freeze, adapters, lora, qlora" in method
    precision = bad_input_results[("train", "gpt2", "--precision", "fp64")].stderr
    assert ", ".join(mm.RECIPES) in precision
    weights = bad_input_results[("infer", "gpt2", "--weights", "fp64")].stderr
    assert ", ".join(mm.FORMATS) in weights
    gpu = bad_input_results[("train", "gpt2", "--gpu", "RTX 9090")].stderr
    assert all(name in gpu for name in mm.GPUS)


# ---- docs/cli.md: its examples are what the command prints, its --json keys are the real ones ------
EXAMPLE = re.compile(r"^    \$ memmath (.+)\n((?:    .*\n|\n)*?)    \$ echo \$\?\n    (\d)\n", re.M)  # a `$ memmath ...` block: command, output, status


CLI_MANUAL = REPO / "docs" / "cli.md"


def readme_section() -> str:
    """The command line's manual page (docs/cli.md), which holds the transcripts and the --json keys."""
    return CLI_MANUAL.read_text(encoding="utf-8")


def readme_examples():
    """(arguments, printed text, exit status) for each `$ memmath ...` block in docs/cli.md."""
    examples = []
    blocks = EXAMPLE.findall(readme_section())
    for command, output, status in blocks:
        text = "\n".join(line[4:] for line in output.rstrip("\n").split("\n")) + "\n"
        examples.append((command, text, int(status)))
    return examples


def test_readme_has_the_three_examples_and_the_fresh_machine_line():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "\nmemmath train llama-3-8b --method qlora " in readme  # the README's command-line example
    commands = [c for c, _, _ in readme_examples()]
    assert len(commands) == 3
    assert commands[0].startswith("train") and "--method" not in commands[0]  # a full finetune
    assert "--method qlora" in commands[1] and commands[2].startswith("infer")
    assert [s for _, _, s in readme_examples()] == [1, 0, 1]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_readme_examples_are_what_the_command_prints(index):
    """docs/cli.md's examples are real runs. MEMMATH_UPDATE_README=1 pastes the current output in instead."""
    import shlex

    command, text, status = readme_examples()[index]
    done = run(*shlex.split(command))
    if os.environ.get("MEMMATH_UPDATE_README") == "1" and (done.stdout, done.returncode) != (text, status):
        path = CLI_MANUAL
        readme = path.read_text(encoding="utf-8")
        old = "    $ memmath " + command + "\n" + "".join(("    " + line if line else line) + "\n"
                                                    for line in text.rstrip("\n").split("\n"))
        new = "    $ memmath " + command + "\n" + "".join(("    " + line if line else line) + "\n"
                                                    for line in done.stdout.rstrip("\n").split("\n"))
        old += f"    $ echo $?\n    {status}\n"
        new += f"    $ echo $?\n    {done.returncode}\n"
        assert readme.count(old) == 1
        path.write_text(readme.replace(old, new), encoding="utf-8")
        return
    assert done.returncode == status, done.stderr
    assert done.stdout == text, ("docs/cli.md's example is stale: run this test with MEMMATH_UPDATE_README=1 to paste "
                                 "the current output")


def test_readme_documents_every_json_key():
    section = readme_section()
    reports = [run_json("train", "gpt2", "--seq", "64", "--gpu", "T4"), run_json("infer", "gpt2", "--gpu", "T4")]
    reports.append(run_json("train", "llama-3-8b", "--seq", "2048", "--batch", "4", "--gpu", "RTX 4090", status=1))
    for report in reports:
        for key, value in report.items():
            assert f"`{key}`" in section, key
            if isinstance(value, dict) and key not in ("parts", "settings"):
                for inner in value:
                    assert f"`{inner}`" in section, f"{key}.{inner}"
    for change in reports[2]["changes"]:
        for key in change:
            assert f"`{key}`" in section, f"changes.{key}"


def test_bad_config_files_are_one_line_naming_model(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "t5.json").write_text(json.dumps({"model_type": "t5", "d_model": 512}))
    (tmp_path / "broken.json").write_text('{"model_type": "llama",')
    (tmp_path / "short.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    cases = {str(tmp_path / "empty"): "holds no config.json", str(tmp_path / "t5.json"): "'t5' is not supported",
             str(tmp_path / "broken.json"): "not valid JSON", str(tmp_path / "short.json"): "missing the field"}
    for model, expected in cases.items():
        for command in ("train", "infer"):
            done = run(command, model, check_status=2)
            lines = done.stderr.splitlines()
            assert len(lines) == 1 and "Traceback" not in done.stderr and done.stdout == ""
            assert "MODEL" in lines[0] and expected in lines[0], lines[0]


def test_where_the_peak_does_not_apply_the_verdict_says_why():
    # GPT-2 trains with dropout (its config's 0.1). On CUDA AMP's SDPA keeps dropout in a fused kernel, which the
    # exact model traces: the peak decides. On the CPU PyTorch falls back to its math kernel there, which the exact
    # model does not trace: the textbook model, unchecked, so a floor and no verdict (the API's device="cpu"; the
    # command line plans CUDA).
    amp = run_json("train", "gpt2", "--precision", "amp", "--seq", "256", "--gpu", "T4")
    assert amp["required"]["basis"] == "peak" and amp["assumptions"]["activations"] == "transformers"
    on_cpu = mm.requirement("gpt2", precision="amp", seq_len=256, device="cpu")
    assert on_cpu.basis == "floor" and "math kernel" in on_cpu.reason and on_cpu.bytes < on_cpu.memory.total
    assert any("math kernel" in str(n) for n in on_cpu.memory.notes)
    # Houlsby adapters are traced in BERT's blocks and the decoders laid out as LLaMA's, not GPT-2's: a floor, no
    # verdict, and what would give one; the textbook model asked for by name is no peak either.
    adapters = run_json("train", "gpt2", "--method", "adapters", "--seq", "256", "--gpu", "T4", status=3)
    assert adapters["required"]["basis"] == "floor" and adapters["verdict"]["fits"] is None
    assert "gpt2's blocks have no such place traced" in adapters["verdict"]["refused"]
    assert "--traced" in adapters["verdict"]["refused"]
    assert any("decoders laid out as LLaMA's" in note for note in adapters["assumptions"]["notes"])
    chosen = run_json("train", "gpt2", "--method", "adapters", "--seq", "256", "--gpu", "T4", "--activations",
                      "textbook", status=3)
    assert chosen["required"]["basis"] == "floor" and chosen["verdict"]["fits"] is None
    assert "asked for by name" in chosen["verdict"]["refused"]
    # ZeRO across GPUs: the peak estimate does not model the sharding.
    zero = run_json("train", "gpt2", "--seq", "256", "--gpus", "2", "--zero-stage", "3", "--gpu", "T4")
    assert zero["required"]["basis"] == "upper_bound" and "ZeRO" in zero["required"]["why_not_peak"]
    # Without dropout AMP with SDPA is traced, and its peak is what the card must hold (2.49 GB > the 2.34 GB sum).
    exact = run_json("train", "gpt2", "--precision", "amp", "--seq", "128", "--no-dropout", "--gpu", "T4")
    assert exact["required"]["basis"] == "peak" and exact["required"]["bytes"] == exact["peak"]["total"]
    assert exact["peak"]["total"] > exact["sum_of_parts"]


def test_hub_cache_lookup_follows_huggingface_hubs_layout_and_settings(tmp_path, monkeypatch):
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert sources.hf_cache_dir()[0] == tmp_path / "home" / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert sources.hf_cache_dir() == (tmp_path / "hf" / "hub", "$HF_HOME/hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert sources.hf_cache_dir() == (tmp_path / "hub", "$HF_HUB_CACHE")
    folder = fake_hub_cache(tmp_path / "hub", commit="aaaa")
    write_config(folder / "snapshots" / "bbbb")
    (folder / "refs" / "v2").write_text("bbbb")
    assert sources.find_in_hf_cache("meta-llama/Llama-2-7b-hf")[0] == folder / "snapshots" / "aaaa" / "config.json"
    assert sources.find_in_hf_cache("meta-llama/Llama-2-7b-hf@v2")[0] == folder / "snapshots" / "bbbb" / "config.json"
    assert sources.find_in_hf_cache("meta-llama/Llama-2-7b-hf@bbbb")[0] == folder / "snapshots" / "bbbb" / "config.json"
    (folder / "refs" / "main").unlink()  # no ref: the newest snapshot holding a config.json
    os.utime(folder / "snapshots" / "aaaa" / "config.json", (1, 1))
    assert sources.find_in_hf_cache("meta-llama/Llama-2-7b-hf")[0] == folder / "snapshots" / "bbbb" / "config.json"
    assert sources.find_in_hf_cache("meta-llama/Llama-2-7b-hf@nope")[0] is None
    shape, info = sources.resolve_source("meta-llama/Llama-2-7b-hf")
    assert shape.n_params == LLAMA2_7B_PARAMS and info["source"] == "hugging face cache"
    assert shape.name == "meta-llama/Llama-2-7b-hf"



# ---- the command line's defects, each pinned ---------------------------------------------------------
@pytest.mark.parametrize("args", [["train", "gpt2", "--gpu", ""], ["train", "gpt2", "--gpu", " \t"],
                                  ["infer", "gpt2", "--gpu", ""], ["train", "gpt2", "--gpu-memory", ""],
                                  ["infer", "gpt2", "--gpu-memory", "  "]], ids=repr)
@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
def test_an_empty_gpu_is_refused_never_read_as_no_gpu(args, json_flag):
    # `memmath train gpt2 --gpu "$GPU"` with GPU unset exited 0 without a verdict, which a script reads as "fits".
    done = run(*args, *json_flag)
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout[:200])
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert f"{args[2]}: is empty" in done.stderr


def test_resolve_gpu_refuses_an_empty_name_given_through_the_api():
    class Args:
        gpu, gpu_memory = "", None

    with pytest.raises(Exception, match="is empty"):
        cli.resolve_gpu(Args)


LONG = "x" * 100_000
LONG_CASES = [[*prefix, option, value] for prefix, option in (
    *((["train", "gpt2"], o) for o in ("--method", "--rank", "--targets", "--precision", "--optimizer", "--batch",
                                        "--seq", "--attention", "--activations", "--gpus", "--zero-stage", "--gpu",
                                        "--gpu-memory", "--reserve", "--unit")),
    *((["infer", "gpt2"], o) for o in ("--context", "--weights", "--kv", "--gpu"))) for value in (LONG,)]
LONG_CASES += [["train", LONG], ["infer", "/tmp/" + LONG + ".json"], ["train", "it's" * 25_000], [LONG],
               ["train", "gpt2", LONG], ["train", "gpt2", "--" + LONG], ["train", "gpt2", "--gpu", "it's" * 25_000]]


@pytest.fixture(scope="module")
def long_results():
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda args: run(*args), LONG_CASES))


@pytest.mark.parametrize("index", range(len(LONG_CASES)),
                         ids=[" ".join(a[:-1] + [a[-1][:8] + "..."]) for a in LONG_CASES])
def test_a_100000_character_value_is_quoted_short(long_results, index):
    # A value echoed whole made a 100,000-character error line; each is cut as memmath.validate.describe cuts.
    done = long_results[index]
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and len(lines[0]) < 400, (len(done.stderr), done.stderr[:300])
    args = LONG_CASES[index]
    option = args[-2] if len(args) > 1 and args[-2].startswith("--") else None
    if option:
        assert f"{option}: " in lines[0]


def test_a_size_past_any_card_says_the_allowed_range_not_that_it_is_not_a_size():
    done = run("train", "gpt2", "--gpu-memory", "1e30GB", check_status=2)
    assert "not a size" not in done.stderr and "must be a size from 1 B to 1,024 PiB" in done.stderr
    assert "1,152,921,504,606,846,976 bytes" in done.stderr and "about 1e+39 bytes" in done.stderr
    # An exponent past any size is refused at once, never expanded into a number of a billion digits.
    for text in ("1e999999999GB", "1e-999999999GB"):
        done = run("train", "gpt2", "--reserve", text, check_status=2)
        assert len(done.stderr.splitlines()) == 1 and "--reserve" in done.stderr
    assert "more than 1e+308 bytes" in run("train", "gpt2", "--reserve", "1e400GB", check_status=2).stderr


def test_a_fraction_of_a_byte_is_refused_with_the_exact_bytes_and_a_whole_size_to_give():
    # memmath.parse_bytes rounds to the nearest byte; the command line refuses instead, saying what was given.
    done = run("train", "gpt2", "--reserve", "0.3B", check_status=2)
    assert "'0.3B' is 0.3 bytes, not a whole number of bytes" in done.stderr
    done = run("train", "gpt2", "--gpu-memory", "23.99GiB", check_status=2)
    assert "25,759,066,357.76 bytes" in done.stderr and "such as 25759066358B" in done.stderr
    # Whole sizes are taken exactly, in any unit and with thousands grouped; a comma that groups nothing is refused.
    report = run_json("train", "gpt2", "--seq", "64", "--gpu-memory", "25759066358B", "--reserve", "1.5GiB")
    assert report["gpu"]["memory_bytes"] == 25_759_066_358 and report["required"]["reserved_bytes"] == 3 * 2**29
    report = run_json("train", "gpt2", "--seq", "64", "--gpu-memory", "1,500,000,000B", "--reserve", "0")
    assert report["gpu"]["memory_bytes"] == 1_500_000_000
    assert "a comma groups thousands" in run("train", "gpt2", "--gpu-memory", "1,5GB", check_status=2).stderr


def test_version_prints_to_stdout():
    done = run("--version", check_status=0)
    assert done.stdout == f"memmath {cli._version()}\n" and done.stderr == ""


def _closed_pipe(*args):
    """The command with its stdout a pipe whose reader has already left (`memmath ... | head`, the worst case)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "memmath", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=environment, cwd=REPO)
    process.stdout.close()
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr.decode()


@pytest.mark.parametrize("args, status", [
    (["train", "llama-2-7b", "--seq", "512", "--gpu", "RTX 4090"], 1),
    (["train", "gpt2", "--seq", "128", "--gpu", "H200"], 0),
    (["train", "llama-2-7b", "--seq", "512", "--gpu", "RTX 4090", "--json"], 1),
    (["infer", "llama-3-8b", "--context", "131072", "--gpu", "RTX 4090"], 1),
    (["models"], 0), (["gpus", "--json"], 0), (["train", "--help"], 0), (["--version"], 0),
], ids=lambda value: " ".join(value) if isinstance(value, list) else str(value))
def test_a_reader_that_leaves_early_gets_the_computed_status_and_no_traceback(args, status):
    # Exit 1 on a broken pipe read as "does not fit"; the verdict was computed before the pipe broke.
    returncode, stderr = _closed_pipe(*args)
    assert returncode == status and stderr == "", (returncode, stderr[-500:])


def test_zero_on_one_gpu_is_said_in_text_and_json():
    text = " ".join(run("train", "gpt2", "--seq", "128", "--zero-stage", "3", check_status=0).stdout.split())
    assert "1 GPU, ZeRO stage 3." in text and "1 GPUs" not in text
    assert "ZeRO stage 3 on one GPU shards nothing: every part stays whole." in text
    report = run_json("train", "gpt2", "--seq", "128", "--zero-stage", "3")
    assert "ZeRO stage 3 on one GPU shards nothing: every part stays whole" in report["assumptions"]["notes"]
    assert not any("on one GPU" in note for note in run_json("train", "gpt2", "--seq", "128")["assumptions"]["notes"])


# ---- the serving planner (memmath/serving.py): a context past the trained one, a change's headroom ----------
def test_a_context_past_what_the_model_was_trained_on_gets_a_note():
    # llama-3-8b: max_position_embeddings 8,192 (meta-llama/Meta-Llama-3-8B config.json); gpt2: 1,024 learned positions.
    plan = mm.plan_serving("llama-3-8b", context_len=8193)
    assert [n.kind for n in plan.notes] == ["context_beyond_trained"] and "8,192" in str(plan.notes[0])
    assert mm.plan_serving("llama-3-8b", context_len=8192).notes == ()
    assert [n.kind for n in mm.plan_serving("gpt2", "T4", context_len=1025).notes] == ["context_beyond_positions"]
    assert mm.plan_serving("gpt2", "T4", context_len=1024).notes == ()
    report = run_json("infer", "llama-3-8b", "--context", "16384")
    assert any("longer than the 8,192 llama-3-8b was trained on" in n for n in report["assumptions"]["notes"])
    text = " ".join(run("infer", "gpt2", "--context", "2048", check_status=0).stdout.split())
    assert "2,048 tokens is more than gpt2's 1,024 learned positions: transformers cannot run it" in text
    assert "learned positions" not in run("infer", "gpt2", "--context", "1024", check_status=0).stdout


def test_a_serving_change_that_fits_leaves_the_fit_margin_free():
    # The longest context at the edge of the memory left +0.00 GB; each change is judged as the training
    # planner judges its own: 5% of its total free (memmath.FIT_MARGIN) beside the reserve.
    plan = mm.plan_serving("llama-3-8b", "RTX 4090", context_len=131072, weights_format="nf4")
    assert not plan.fit.fits and any(c.fits for c in plan.changes)
    for change in plan.changes:
        fit = mm.check_fit(change.total, "RTX 4090", margin=mm.FIT_MARGIN)
        assert change.fits == fit.fits and change.headroom_bytes == fit.headroom_bytes
        if change.fits:
            assert change.headroom_bytes >= mm.FIT_MARGIN * change.total
    context = next(c for c in plan.changes if c.change.startswith("context"))
    n = context.settings["context_len"]
    over = mm.inference_memory("llama-3-8b", weights_format="nf4", context_len=n + 1).total
    assert not mm.check_fit(over, "RTX 4090", margin=mm.FIT_MARGIN).fits  # the longest that keeps the margin
    assert n < plan.longest_context  # the memory's edge, with nothing to spare
    text = run("infer", "llama-3-8b", "--context", "131072", "--weights", "nf4", "--gpu", "RTX 4090",
               check_status=1).stdout
    rows = [line for line in text.splitlines() if re.match(r"\s+\d+\. ", line)]
    assert rows and not any(line.rstrip().endswith("+0.00") for line in rows), rows


# ---- memmath lessons -----------------------------------------------------------------------------
def test_lessons_path_is_the_folder_of_the_twelve_lessons_and_their_stylesheet():
    folder = Path(run("lessons", "--path", check_status=0).stdout.strip())
    assert sorted(p.name for p in folder.glob("[0-9][0-9]_*.py")) == sorted(
        p.name for p in (REPO / "notebooks").glob("[0-9][0-9]_*.py"))
    assert len(list(folder.glob("[0-9][0-9]_*.py"))) == 12  # 00-08 in the article's order, 09 notation, 10 problems, 11 many GPUs
    assert (folder / "memmath.css").is_file()


def test_lessons_help_names_the_extra_and_no_command_imports_marimo():
    done = run("lessons", "--help", check_status=0)
    assert 'pip install "memmath[workbook]"' in " ".join(done.stdout.split())
    code = ("import sys, io, contextlib, memmath.cli as c\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    c.main(['lessons', '--path']); c.main(['train', 'gpt2', '--seq', '64']); c.main(['models'])\n"
            "print(sorted(m for m in ('marimo', 'altair', 'pandas', 'anywidget', 'memmath_lessons') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


def test_lessons_without_the_workbook_extra_says_which_extra_to_install(monkeypatch, capsys):
    monkeypatch.setattr(cli, "WORKBOOK_MODULES", ("marimo", "no_such_module_for_memmath"))
    assert cli.main(["lessons"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1
    assert "missing: no_such_module_for_memmath" in captured.err and 'pip install "memmath[workbook]"' in captured.err


def test_lessons_static_reports_a_build_refusal_in_one_line(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    done = run("lessons", "--static", str(tmp_path / "link"), check_status=2)
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1 and "symbolic link" in done.stderr


@pytest.mark.parametrize("module", ["memmath_lessons", "memmath_site", "memmath_lessons.viz"])
def test_importing_a_workbook_module_without_the_extra_names_the_extra(module):
    code = f"import sys\nsys.modules['anywidget'] = None\nimport {module}"  # as if anywidget were not installed
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last.startswith("ModuleNotFoundError: ")
    assert "workbook extra (missing: anywidget)" in last and 'pip install "memmath[workbook]"' in last


def test_readme_install_section_and_the_cpu_index_for_torch():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    install = readme.split("## Install\n", 1)[1].split("\n## ", 1)[0]
    # memmath is not on PyPI yet: the install lines work from a clone or the repository's address.
    for command in ("pip install .\n", 'pip install ".[workbook]"', '"memmath[workbook] @ git+', "memmath lessons "):
        assert command in install, command
    cpu = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    assert cpu in " ".join(install.split())
    # In requirements-validate.txt the index is advice in a comment: an active --index-url would override the
    # index pip is configured with, which .ci/run relies on.
    lines = (REPO / "requirements-validate.txt").read_text().splitlines()
    assert any(cpu in line and line.lstrip().startswith("#") for line in lines)
    assert not any("index-url" in line for line in lines if not line.lstrip().startswith("#"))
    assert "torch==2.13.0" in lines
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and (REPO / "LICENSE").read_text().startswith("MIT License")


@pytest.mark.parametrize("args, seq", [
    (("phi-3-mini", "--method", "lora", "--rank", "16", "--targets", "all"), 2048),  # its window is 2,047
    (("mistral-7b", "--seq", "4096"), 4096),  # its window is 4,096
])
def test_sliding_window_models_at_their_usual_lengths_are_traced_not_refused(args, seq):
    # The exact model follows transformers' sliding-window masks (tests/test_sliding_window.py): the default run and
    # an explicit --activations transformers both answer with it, with the peak.
    report = run_json("train", *args)
    assert report["settings"]["activations"] == "transformers" and report["settings"]["seq_len"] == seq
    assert report["peak"] is not None
    run("train", *args, "--activations", "transformers", check_status=0)


def test_a_refused_attention_names_its_option_not_a_python_argument():
    # Gemma 2 has no SDPA in transformers 5.24 (Gemma2PreTrainedModel._supports_sdpa is False).
    done = run("train", "gemma-2-2b", "--attention", "sdpa", "--activations", "transformers", check_status=2)
    assert done.stderr.startswith("memmath train: error: --attention: 'sdpa' does not run here")
    assert "eager attention" in done.stderr and "attention=" not in done.stderr and "activations=" not in done.stderr


def test_the_method_options_are_the_methods_fields():
    # Each method field's option is written beside the field (memmath.flags.option) and generated: the method group
    # holds --method and those, nothing written by hand.
    from dataclasses import fields

    from memmath.cli import build_parser
    from memmath.cli.options import METHOD_CLASSES

    declared = {f.metadata["option"]["flag"] for cls in METHOD_CLASSES.values() for f in fields(cls)
                if "option" in f.metadata}
    train = build_parser("train")._subparsers._group_actions[0].choices["train"]
    group = next(g for g in train._action_groups if g.title.startswith("the method"))
    assert {flag for action in group._group_actions for flag in action.option_strings} == declared | {"--method"}
    assert {"--rank", "--targets", "--lora-dropout", "--quant-type", "--trainable-layers", "--bottleneck",
            "--dpo-base", "--vision"} <= declared
