"""A small transformer block in numpy, with and without Houlsby adapters, and a fair timer.

The lessons use it to trace one input through the frozen base computation and the adapters, and
to measure what adapters cost at inference time on the learner's own CPU. Also the LoRA update
W + (alpha/r) B A, applied beside W or merged into it, to show that merging changes nothing.

The block is BERT's post-norm layout (Devlin et al. 2019) with adapters where Houlsby et al. 2019
(figure 2) put them: after the attention output projection and after the feed-forward output,
each before the residual addition and the layer norm. An adapter is down-projection h -> m,
a nonlinearity, up-projection m -> h, and its own skip connection.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import re
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from memmath import validate

MAX_TOY_WIDTH = 4096
MAX_TOY_SEQ = 4096


@dataclass(frozen=True)
class ToyBlock:
    """The frozen weights of one block: attention (q, k, v, o), a 4h MLP, two layer norms (fp32)."""

    width: int
    n_heads: int
    weights: dict


@dataclass(frozen=True)
class ToyAdapters:
    """Two adapters (after attention, after the MLP), each down (h x m), up (m x h) and two biases."""

    width: int
    bottleneck: int
    weights: dict

    @property
    def n_params(self) -> int:
        """Parameters in both adapters: 2 x (2*m*h + m + h) (Houlsby et al. 2019)."""
        return sum(int(w.size) for w in self.weights.values())


def make_block(width: int = 256, n_heads: int = 4, *, seed: int = 0) -> ToyBlock:
    """A block of the given width with random weights (normal, std 0.02, as BERT initialises them)."""
    h = validate.count("width", width, high=MAX_TOY_WIDTH)
    a = validate.count("n_heads", n_heads, high=h)
    if h % a:
        raise ValueError(f"n_heads ({a}) must divide width ({h})")
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return (0.02 * rng.standard_normal(shape)).astype(np.float32)

    weights = {"q": normal(h, h), "k": normal(h, h), "v": normal(h, h), "o": normal(h, h),
               "up": normal(h, 4 * h), "down": normal(4 * h, h),
               "ln1_gain": np.ones(h, np.float32), "ln1_bias": np.zeros(h, np.float32),
               "ln2_gain": np.ones(h, np.float32), "ln2_bias": np.zeros(h, np.float32)}
    return ToyBlock(h, a, weights)


def make_adapters(width: int, bottleneck: int, *, seed: int = 1, zero_up: bool = True) -> ToyAdapters:
    """Two adapters for a block of `width`. zero_up=True starts each as the identity (up = 0).

    Houlsby et al. 2019 initialise adapters near the identity so training starts from the
    pretrained model; with the up-projection exactly zero the block's output is unchanged.
    """
    h = validate.count("width", width, high=MAX_TOY_WIDTH)
    m = validate.count("bottleneck", bottleneck, high=MAX_TOY_WIDTH)
    rng = np.random.default_rng(seed)
    weights = {}
    for where in ("attn", "mlp"):
        weights[f"{where}_down"] = (0.02 * rng.standard_normal((h, m))).astype(np.float32)
        weights[f"{where}_down_bias"] = np.zeros(m, np.float32)
        up = np.zeros((m, h)) if zero_up else 0.02 * rng.standard_normal((m, h))
        weights[f"{where}_up"] = up.astype(np.float32)
        weights[f"{where}_up_bias"] = np.zeros(h, np.float32)
    return ToyAdapters(h, m, weights)


def make_input(seq_len: int, width: int, *, seed: int = 2) -> np.ndarray:
    """One sequence of seq_len token vectors (fp32, standard normal): the block's input."""
    s = validate.count("seq_len", seq_len, high=MAX_TOY_SEQ)
    h = validate.count("width", width, high=MAX_TOY_WIDTH)
    return np.random.default_rng(seed).standard_normal((s, h)).astype(np.float32)


def _layer_norm(x, gain, bias):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * gain + bias


def _gelu(x):
    # The tanh approximation of GELU (Hendrycks & Gimpel 2016), as BERT and GPT-2 use it.
    return 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def _attention(x, block: ToyBlock):
    w, a = block.weights, block.n_heads
    s, h = x.shape
    d = h // a
    q = (x @ w["q"]).reshape(s, a, d).transpose(1, 0, 2)
    k = (x @ w["k"]).reshape(s, a, d).transpose(1, 0, 2)
    v = (x @ w["v"]).reshape(s, a, d).transpose(1, 0, 2)
    scores = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(d))
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)
    context = (probs @ v).transpose(1, 0, 2).reshape(s, h)
    return context @ w["o"]


def _adapter(z, adapters: ToyAdapters, where: str):
    # Houlsby adapter: z + up(gelu(down(z))), the skip keeps it near the identity at initialisation.
    w = adapters.weights
    inner = _gelu(z @ w[f"{where}_down"] + w[f"{where}_down_bias"])
    return z + inner @ w[f"{where}_up"] + w[f"{where}_up_bias"]


def block_forward(x: np.ndarray, block: ToyBlock, adapters: ToyAdapters | None = None, *, trace: list | None = None):
    """The block's output for input x (seq_len x width); with adapters where Houlsby put them.

    trace: pass a list to receive one (step, shape, what it uses, trainable) tuple per step.
    """
    w = block.weights
    if x.ndim != 2 or x.shape[1] != block.width:
        raise ValueError(f"x must be seq_len x width ({block.width}); got shape {x.shape}")
    if adapters is not None and adapters.width != block.width:
        raise ValueError(f"adapters are {adapters.width} wide; the block is {block.width}")
    note = trace.append if trace is not None else (lambda step: None)
    note(("input", x.shape, "token vectors from the block below", False))
    attn = _attention(x, block)
    note(("multi-head attention + output projection", attn.shape, "q, k, v, o (frozen)", False))
    if adapters is not None:
        attn = _adapter(attn, adapters, "attn")
        note(("adapter 1: down, GELU, up, + skip", attn.shape,
              f"{block.width} -> {adapters.bottleneck} -> {block.width} (trainable)", True))
    x = _layer_norm(x + attn, w["ln1_gain"], w["ln1_bias"])
    note(("add residual + layer norm", x.shape, "layer norm 1 (frozen)", False))
    mlp = _gelu(x @ w["up"]) @ w["down"]
    note(("feed-forward (4h MLP)", mlp.shape, "up, down (frozen)", False))
    if adapters is not None:
        mlp = _adapter(mlp, adapters, "mlp")
        note(("adapter 2: down, GELU, up, + skip", mlp.shape,
              f"{block.width} -> {adapters.bottleneck} -> {block.width} (trainable)", True))
    out = _layer_norm(x + mlp, w["ln2_gain"], w["ln2_bias"])
    note(("add residual + layer norm: output", out.shape, "layer norm 2 (frozen)", False))
    return out


def trace_frame(x: np.ndarray, block: ToyBlock, adapters: ToyAdapters | None = None) -> pd.DataFrame:
    """One row per step of block_forward: step, tensor shape, the weights used, trainable or frozen."""
    steps: list = []
    block_forward(x, block, adapters, trace=steps)
    return pd.DataFrame([{"step": i + 1, "what happens": what, "tensor shape": " x ".join(map(str, shape)),
                          "weights used": uses, "trains?": "yes" if trainable else "no (frozen)"}
                         for i, (what, shape, uses, trainable) in enumerate(steps)])


def block_flops(seq_len, width):
    """Multiply-add FLOPs of one block's forward pass: 24*s*h^2 + 4*s^2*h (batch 1).

    Narayanan et al. 2021 (Megatron-LM at scale), section 5.1: q, k, v, o projections 8sh^2,
    the 4h MLP 16sh^2, scores and weighted values 4s^2h. Elementwise work is left out.
    """
    s, h = seq_len, width
    return 24 * s * h * h + 4 * s * s * h


def adapter_flops(seq_len, width, bottleneck):
    """FLOPs the two adapters of one block add: 2 x (2*s*h*m down + 2*s*m*h up) = 8*s*h*m."""
    return 8 * seq_len * width * bottleneck


def adapter_flop_overhead(seq_len, width, bottleneck) -> float:
    """Extra FLOPs from adapters as a fraction of the block's: 8shm / (24sh^2 + 4s^2h) = 2m / (6h + s)."""
    return adapter_flops(seq_len, width, bottleneck) / block_flops(seq_len, width)


def openblas_thread_calls():
    """numpy's OpenBLAS (set, get) thread-count functions, or None where they cannot be found.

    Looks the library up among those this process has loaded (Linux /proc/self/maps), as
    threadpoolctl does; on other systems or BLAS builds timing simply runs with the default threads.
    """
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = sorted(set(re.findall(r"(/\S*openblas\S*\.so\S*)", maps.read())))
        for path in paths:
            lib = ctypes.CDLL(path)
            for prefix, suffix in (("scipy_openblas", "64_"), ("scipy_openblas", ""), ("openblas", "64_"), ("openblas", "")):
                setter, getter = f"{prefix}_set_num_threads{suffix}", f"{prefix}_get_num_threads{suffix}"
                if hasattr(lib, setter) and hasattr(lib, getter):
                    return getattr(lib, setter), getattr(lib, getter)
    except OSError:
        pass
    return None


@contextlib.contextmanager
def blas_threads(n: int):
    """Run the block with n BLAS threads, then restore; yields the count in effect (None if unknown).

    On a shared machine several BLAS threads spin-wait for each other and the timings scatter
    wildly; one thread gives steady numbers.
    """
    n = validate.count("blas threads", n, high=1024)
    calls = openblas_thread_calls()
    if calls is None:
        yield None
        return
    setter, getter = calls
    before = getter()
    setter(n)
    try:
        yield getter()
    finally:
        setter(before)


def time_variants(variants: dict, *, repeats: int = 15, budget_s: float = 0.8, warmup: int = 1,
                  threads: int | None = 1, min_timing_s: float = 0.002) -> pd.DataFrame:
    """Seconds per call of each zero-argument function in `variants`, measured in interleaved rounds.

    Each round times every variant once, in an order that reverses every other round, so a slow
    moment of a shared machine hits all of them alike. A timing covers enough back-to-back calls
    to last about `min_timing_s` (as timeit does; seconds are reported per call), so the clock's
    resolution and tiny hiccups matter less. Stops after `repeats` rounds or once `budget_s`
    seconds have passed (at least 3 rounds), so a lesson stays responsive. threads: BLAS threads
    while timing (None leaves numpy's default). Returns a long table: run, variant, seconds;
    `.attrs["blas_threads"]` says how many BLAS threads ran (None: unknown), `.attrs["calls_per_timing"]`
    how many calls each timing covered.
    """
    repeats = validate.count("repeats", repeats, high=1000)
    budget_s = validate.real("budget_s", budget_s, low=0.0, high=600.0)
    warmup = validate.count("warmup", warmup, low=0, high=100)
    min_timing_s = validate.real("min_timing_s", min_timing_s, low=0.0, high=10.0)
    if not variants:
        raise ValueError("variants must name at least one function to time")
    names = list(variants)
    rows = []
    with (blas_threads(threads) if threads is not None else contextlib.nullcontext(None)) as in_effect:
        slowest = 0.0
        for _ in range(max(warmup, 1) if min_timing_s else warmup):
            for call in variants.values():
                t0 = time.perf_counter()
                call()
                slowest = max(slowest, time.perf_counter() - t0)
        number = max(1, min(1000, math.ceil(min_timing_s / slowest))) if min_timing_s and slowest > 0 else 1
        start = time.perf_counter()
        for run in range(repeats):
            for name in (names if run % 2 == 0 else names[::-1]):
                call = variants[name]
                t0 = time.perf_counter()
                for _ in range(number):
                    call()
                rows.append({"run": run + 1, "variant": name, "seconds": (time.perf_counter() - t0) / number})
            if run + 1 >= 3 and time.perf_counter() - start > budget_s:
                break
    times = pd.DataFrame(rows, columns=["run", "variant", "seconds"])
    times.attrs["blas_threads"] = in_effect
    times.attrs["calls_per_timing"] = number
    return times


def time_forward(x: np.ndarray, block: ToyBlock, adapters: ToyAdapters, *, repeats: int = 15,
                 budget_s: float = 0.8, warmup: int = 1, threads: int | None = 1,
                 min_timing_s: float = 0.002) -> pd.DataFrame:
    """Seconds per forward pass of the block without and with adapters ('base', 'with adapters').

    Interleaved pairs under a time budget, as time_variants measures them.
    """
    return time_variants({"base": lambda: block_forward(x, block),
                          "with adapters": lambda: block_forward(x, block, adapters)},
                         repeats=repeats, budget_s=budget_s, warmup=warmup, threads=threads,
                         min_timing_s=min_timing_s)


def timing_summary(times: pd.DataFrame) -> pd.DataFrame:
    """Per variant: runs, median, 25th and 75th percentile and min/max in milliseconds."""
    grouped = times.groupby("variant", sort=False)["seconds"]
    summary = pd.DataFrame({
        "runs": grouped.size(),
        "median (ms)": grouped.median() * 1e3,
        "25th pct (ms)": grouped.quantile(0.25) * 1e3,
        "75th pct (ms)": grouped.quantile(0.75) * 1e3,
        "fastest (ms)": grouped.min() * 1e3,
        "slowest (ms)": grouped.max() * 1e3,
    })
    return summary.reset_index()


def median_ratio(times: pd.DataFrame, variant: str = "with adapters", baseline: str = "base") -> float:
    """Median time of `variant` over median time of `baseline`: 1.10 means 10% slower."""
    medians = times.groupby("variant")["seconds"].median()
    return float(medians[variant] / medians[baseline])


def fastest_ratio(times: pd.DataFrame, variant: str = "with adapters", baseline: str = "base") -> float:
    """Fastest time of `variant` over fastest of `baseline`: the runs least disturbed by other work."""
    fastest = times.groupby("variant")["seconds"].min()
    return float(fastest[variant] / fastest[baseline])


# ---- LoRA in numpy -----------------------------------------------------------------------------
@dataclass(frozen=True)
class ToyLoRA:
    """A frozen d_out x d_in weight W and a LoRA update B (d_out x r) @ A (r x d_in), scaled alpha/r."""

    W: np.ndarray
    A: np.ndarray
    B: np.ndarray
    alpha: float

    @property
    def rank(self) -> int:
        """r: the rank of the update (rows of A)."""
        return self.A.shape[0]

    @property
    def scaling(self) -> float:
        """alpha / r, the factor Hu et al. 2021 (section 4.1) apply to B A x."""
        return self.alpha / self.rank

    @property
    def n_params(self) -> int:
        """Trainable parameters: r x (d_in + d_out)."""
        return int(self.A.size + self.B.size)


def make_lora(d_in: int, d_out: int, rank: int, *, alpha: float = 16.0, seed: int = 3, trained: bool = True) -> ToyLoRA:
    """A random frozen W with a LoRA update. trained=False gives B = 0, LoRA's initialisation.

    Hu et al. 2021 start A random and B at zero, so W + BA = W before training; trained=True fills
    B with random values, as if training had moved it.
    """
    d_in = validate.count("d_in", d_in, high=MAX_TOY_WIDTH)
    d_out = validate.count("d_out", d_out, high=MAX_TOY_WIDTH)
    r = validate.count("rank", rank, high=min(d_in, d_out))
    alpha = validate.real("alpha", alpha, low=1e-6, high=1e6)
    rng = np.random.default_rng(seed)
    W = (0.02 * rng.standard_normal((d_out, d_in))).astype(np.float32)
    A = (rng.standard_normal((r, d_in)) / np.sqrt(d_in)).astype(np.float32)
    B = (0.02 * rng.standard_normal((d_out, r)) if trained else np.zeros((d_out, r))).astype(np.float32)
    return ToyLoRA(W, A, B, alpha)


def lora_forward(x: np.ndarray, lora: ToyLoRA) -> np.ndarray:
    """W x plus the side path: x W^T + scaling * (x A^T) B^T (the adapter kept separate)."""
    return x @ lora.W.T + lora.scaling * ((x @ lora.A.T) @ lora.B.T)


def merge_lora(lora: ToyLoRA) -> np.ndarray:
    """The merged weight W + scaling * B A (Hu et al. 2021, section 4.1): one matrix, no side path."""
    return lora.W + lora.scaling * (lora.B @ lora.A)
