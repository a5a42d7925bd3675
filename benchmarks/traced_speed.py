"""How long a traced answer (memmath/traced.py) takes for a 70B-class config, side by side with building the same
model on the meta device (what tools that count parameters with transformers do), in one run.

    .venv/bin/python benchmarks/traced_speed.py [--repeats 3]

Each repeat runs in a fresh interpreter, in turn: transformers building Llama-3-70B's shape on the meta device
(AutoModelForCausalLM.from_config under torch.device("meta")), then memmath.traced.traced_training on the same
config (full finetuning, bf16 AdamW, batch 1 x 2,048 tokens) with its cache off. Prints the median wall time of
each, the trace's ratio to the build, and the trace against the target: a 70B-class config answered in under 30 s
on two cores. No assertion. Needs the torch extra.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET_S = 30.0
# meta-llama/Meta-Llama-3-70B's config.json, the fields transformers reads for the shape.
LLAMA3_70B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
    "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "attention_bias": False, "mlp_bias": False,
}
BUILD = ("import json, sys, time; t = time.perf_counter(); import torch, transformers; "
         "config = transformers.AutoConfig.for_model(**json.load(open(sys.argv[1])));\n"
         "with torch.device('meta'): model = transformers.AutoModelForCausalLM.from_config(config)\n"
         "print(time.perf_counter() - t)")
TRACE = ("import sys, time; t = time.perf_counter(); from memmath.traced import traced_training; "
         "traced_training(sys.argv[1], cache=False, seq_len=2048); print(time.perf_counter() - t)")


def time_once(code: str, config: Path) -> float:
    done = subprocess.run([sys.executable, "-c", code, str(config)], capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "config.json"
        config.write_text(json.dumps({**LLAMA3_70B, "model_type": "llama"}))
        times = {"build on the meta device": [], "traced answer": []}
        for _ in range(args.repeats):
            times["build on the meta device"].append(time_once(BUILD, config))
            times["traced answer"].append(time_once(TRACE, config))
    build, trace = (statistics.median(times[k]) for k in times)
    print(f"Llama-3-70B (80 blocks), median of {args.repeats} fresh interpreters each, in turn:")
    print(f"  transformers builds it on the meta device   {build:7.2f} s")
    print(f"  memmath's traced answer (cache off)          {trace:7.2f} s  {trace / build:.1f}x the build")
    print(f"  target: under {TARGET_S:.0f} s on two cores: {'met' if trace < TARGET_S else 'MISSED'} "
          f"({trace / TARGET_S:.2f}x the target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
