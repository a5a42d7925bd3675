"""How long `import memmath` takes, side by side with `import numpy`, in one run.

    .venv/bin/python benchmarks/import_speed.py [--repeats 21]

Each repeat starts a fresh interpreter per statement, in turn (numpy, memmath, memmath and its first
number), and times the statement alone inside it (interpreter start-up is the same for all and is
left out). Prints the median of each and its ratio to numpy's (target for `import memmath`: at most
1.3x), and which of altair, marimo and pandas the import loaded (target: none). No assertion.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

STATEMENTS = {
    "import numpy": "import numpy",
    "import memmath": "import memmath",
    "import memmath + first number": "import memmath; memmath.training_memory('llama-2-7b', seq_len=2048).total",
}
TIMER = ("import sys, time; t = time.perf_counter(); exec({stmt!r}); dt = time.perf_counter() - t; "
         "print(dt, ' '.join(m for m in ('altair', 'marimo', 'pandas') if m in sys.modules))")


def time_once(statement: str) -> tuple[float, str]:
    out = subprocess.run([sys.executable, "-c", TIMER.format(stmt=statement)], capture_output=True, text=True,
                         check=True).stdout.split(maxsplit=1)
    return float(out[0]), (out[1].strip() if len(out) > 1 else "")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args(argv)
    times = {label: [] for label in STATEMENTS}
    heavy = {}
    for label, statement in STATEMENTS.items():  # warm the .pyc caches first
        time_once(statement)
    for _ in range(args.repeats):
        for label, statement in STATEMENTS.items():
            seconds, loaded = time_once(statement)
            times[label].append(seconds)
            heavy[label] = loaded
    base = statistics.median(times["import numpy"])
    print(f"{'statement':<32} {'median ms':>10} {'vs numpy':>9}  heavy modules loaded")
    for label, values in times.items():
        median = statistics.median(values)
        print(f"{label:<32} {median * 1000:>10.1f} {median / base:>8.2f}x  {heavy[label] or 'none'}")
    print(f"target: import memmath <= 1.30x import numpy, with none of altair, marimo, pandas ({args.repeats} repeats)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
