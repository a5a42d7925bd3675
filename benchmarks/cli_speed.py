"""How fast `memmath train` answers, side by side with vramcalc 0.1.2 on the same question.

Both read the same config.json (Llama-3-8B's shape, written to a temporary folder: vramcalc would
otherwise try the network) and answer "LoRA rank 8, batch 4 x 2048 tokens, on an RTX 4090?"; a
second question asks the same of full finetuning. Each command runs as a fresh process, the
commands interleaved round by round, and the median wall time of each is printed with its ratio
to vramcalc's, beside the median CPU time (user + system) of each process, which other work on a shared
machine inflates far less than the wall time. Target: memmath at most 1.5x vramcalc's wall time. It also counts the modules of memmath
one training question imports (the fewer, the faster it starts).

Runs this checkout's memmath (PYTHONPATH) with the bytecode cache on (as an installed package has it), as `python -m memmath` and through the console script
(the `memmath` next to this Python when installed, else the launcher pip writes, run with -c).
With --importtime it also prints what dominates memmath's start (python -X importtime).

    python benchmarks/cli_speed.py [--rounds 11] [--importtime]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = 1.5  # memmath's wall time at most this many times vramcalc's
# meta-llama/Meta-Llama-3-8B's config.json, the fields both tools read.
LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "attention_bias": False, "mlp_bias": False, "head_dim": 128,
}
# The launcher pip writes for a console script `memmath = "memmath.cli:main"`.
LAUNCHER = "import re, sys; from memmath.cli import main; sys.argv[0] = 'memmath'; sys.exit(main())"


def vramcalc_command() -> list[str] | None:
    for candidate in (Path(sys.executable).parent / "vramcalc", shutil.which("vramcalc")):
        if candidate and Path(candidate).is_file():
            return [str(candidate)]
    return None


def memmath_script() -> tuple[list[str], str]:
    script = Path(sys.executable).parent / "memmath"
    if script.is_file():
        return [str(script)], "console script"
    return [sys.executable, "-c", LAUNCHER], "console script, emulated"


def cpu_seconds() -> float:
    """User and system time of the finished child processes so far."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def run(command, env, cwd) -> tuple[float, float, int, str]:
    """(wall seconds, CPU seconds, exit status, output) of one command; commands run one at a time."""
    cpu, start = cpu_seconds(), time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=cwd)
    return time.perf_counter() - start, cpu_seconds() - cpu, done.returncode, done.stdout + done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11, help="runs of each command, interleaved (default 11)")
    parser.add_argument("--importtime", action="store_true", help="also print memmath's slowest imports")
    parser.add_argument("--pythonpath", default=str(REPO), help="where memmath is imported from (default: this "
                        "checkout)")
    args = parser.parse_args()

    vramcalc = vramcalc_command()
    if vramcalc is None:
        print("vramcalc is not installed: pip install vramcalc==0.1.2", file=sys.stderr)
        return 2
    env = {**os.environ, "PYTHONPATH": args.pythonpath, "NO_COLOR": "1", "HF_HUB_OFFLINE": "1"}
    # As installed for a user: Python caches compiled modules (__pycache__), as it has for vramcalc's
    # wheel. Where PYTHONDONTWRITEBYTECODE is set, memmath would be compiled again on every run.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    script, script_label = memmath_script()
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "config.json"
        config.write_text(json.dumps(LLAMA3_8B))
        question = ["--batch", "4", "--seq", "2048", "--gpu", "RTX 4090"]
        commands = {
            "vramcalc estimate CONFIG --train --lora 8": vramcalc + ["estimate", str(config), "--train", "--lora", "8",
                                                                     *question],
            "python -m memmath train CONFIG --method lora": [sys.executable, "-m", "memmath", "train", str(config),
                                                             "--method", "lora", "--rank", "8", *question],
            f"memmath train CONFIG --method lora [{script_label}]": script + ["train", str(config), "--method",
                                                                              "lora", "--rank", "8", *question],
            "vramcalc estimate CONFIG --train (full)": vramcalc + ["estimate", str(config), "--train", *question],
            "python -m memmath train CONFIG (full)": [sys.executable, "-m", "memmath", "train", str(config),
                                                      *question],
            "python -c pass (interpreter start)": [sys.executable, "-c", "pass"],
            "python -c 'import numpy' (not loaded for one run)": [sys.executable, "-c", "import numpy"],
            "python -c 'import memmath'": [sys.executable, "-c", "import memmath"],
        }
        times = {name: [] for name in commands}  # each run in the temporary folder: cwd is first on sys.path
        cpu_times = {name: [] for name in commands}
        for name, command in commands.items():  # warm the file cache and check each answers
            _, _, status, output = run(command, env, folder)
            if status not in (0, 1):
                print(f"{name} failed with status {status}:\n{output}", file=sys.stderr)
                return 2
        for _ in range(args.rounds):
            for name, command in commands.items():
                wall, cpu, _, _ = run(command, env, folder)
                times[name].append(wall)
                cpu_times[name].append(cpu)

    medians = {name: statistics.median(values) for name, values in times.items()}
    cpu_medians = {name: statistics.median(values) for name, values in cpu_times.items()}
    if "emulated" in script_label:
        print("no `memmath` console script next to this Python: the console-script row runs the launcher pip "
              "writes, with -c")
    print(f"median wall time and CPU time of {args.rounds} runs each, interleaved (Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end)")
    pairs = {"python -m memmath train CONFIG --method lora": "vramcalc estimate CONFIG --train --lora 8",
             f"memmath train CONFIG --method lora [{script_label}]": "vramcalc estimate CONFIG --train --lora 8",
             "python -m memmath train CONFIG (full)": "vramcalc estimate CONFIG --train (full)"}
    worst = 0.0
    for name, median in medians.items():
        line = f"  {name:<58} {median * 1000:6.0f} ms  (CPU {cpu_medians[name] * 1000:4.0f} ms)"
        if name in pairs:
            ratio = median / medians[pairs[name]]
            worst = max(worst, ratio)
            line += f"  {ratio:4.2f}x vramcalc (CPU {cpu_medians[name] / cpu_medians[pairs[name]]:4.2f}x)"
        print(line)
    verdict = "meets" if worst <= TARGET else "misses"
    print(f"slowest memmath command: {worst:.2f}x vramcalc ({verdict} the target of at most {TARGET:g}x)")
    start = medians["python -c 'import memmath'"] - medians["python -c pass (interpreter start)"]
    numpy = medians["python -c 'import numpy' (not loaded for one run)"] - medians["python -c pass (interpreter start)"]
    print(f"of which `import memmath` alone takes {start * 1000:.0f} ms after the interpreter's own start; numpy, "
          f"which a question about one run never imports (memmath/arrays.py), would add {numpy * 1000:.0f} ms")
    count = ("import sys, io, contextlib, pathlib, memmath, memmath.cli as c\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             "    c.main(['train', 'llama-3-8b', '--method', 'lora', '--gpu', 'RTX 4090'])\n"
             "package = pathlib.Path(memmath.__file__).parent\n"
             "print(sum(m.startswith('memmath.') or m == 'memmath' for m in sys.modules), "
             "len([p for p in package.rglob('*.py') if p.name != '__main__.py']))")
    done = subprocess.run([sys.executable, "-c", count], env=env, capture_output=True, text=True,
                          cwd=tempfile.gettempdir())
    loaded, modules = done.stdout.split()
    print(f"one training question (llama-3-8b, LoRA, RTX 4090) imports {loaded} of memmath's {modules} modules")
    if args.importtime:
        done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import memmath.cli"], env=env,
                              capture_output=True, text=True, cwd=tempfile.gettempdir())
        rows = []
        for line in done.stderr.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[1].strip().isdigit():
                rows.append((int(parts[1]), parts[2].rstrip()))
        print("slowest imports (cumulative microseconds, python -X importtime -c 'import memmath.cli'):")
        for cumulative, module in sorted(rows, reverse=True)[:10]:
            print(f"  {cumulative:>9,}  {module}")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
