"""Measure it yourself: two training steps of a small model on this machine, beside memmath's prediction.

Lesson 10's last section calls this module. The measurement is `memmath measure`'s (memmath.measure, installed with
the package, measuring as validation/measure.py recorded the measurements memmath is tested against): the model is built with
random weights from one of the small configs below, its two steps run on this machine's GPU when torch sees one,
else on its CPU (one thread, as the recordings), and each part is held to memmath's prediction for the same run as
tests/test_fidelity.py holds the recordings: parameters, gradients and optimizer states to the byte, saved
activations within 1%, each step's peak within 5%.

Nothing here imports torch until `measure(...)` is called (a button press in the lesson), so the lesson opens, and
the static site exports, without it. Without torch or transformers `measure` returns a message that says what to
install, never an exception.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass

from memmath.measure import TIMELINE

INSTALL_COMMAND = 'pip install "memmath[torch]"'
"""What the lesson tells a learner without torch (the extra pins torch, transformers and peft)."""
NEEDED = ("torch", "transformers")

# The models to pick from: config.json dicts of small widths (nothing is downloaded), each a recorded model type, so
# memmath's prediction shows before anything is measured.
MODELS = {
    # GPT-2 (validation/measure.py's "gpt2" shape): 3 blocks of width 64, 4 heads, MLP 256, a 1,000-token
    # vocabulary, 256 learned positions, tied head: 230,464 parameters.
    "gpt2": dict(model_type="gpt2", n_layer=3, n_embd=64, n_head=4, n_inner=256, vocab_size=1000,
                                   n_positions=256, tie_word_embeddings=True, resid_pdrop=0.0, embd_pdrop=0.0,
                                   attn_pdrop=0.0, use_cache=False, bos_token_id=0, eos_token_id=0,
                                   activation_function="gelu_new"),
    # LLaMA with grouped-query attention (2 key/value heads for 4 query heads), untied head: 266,688 parameters.
    "llama": dict(
        model_type="llama", num_hidden_layers=3, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=176, vocab_size=1000, tie_word_embeddings=False, attention_dropout=0.0,
        max_position_embeddings=256, use_cache=False, bos_token_id=0, eos_token_id=0, pad_token_id=0),
    # Qwen3 (q/k RMSNorm over each head), tied head.
    "qwen3": dict(
        model_type="qwen3", num_hidden_layers=3, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=176, vocab_size=1000, tie_word_embeddings=True, attention_dropout=0.0,
        max_position_embeddings=256, use_cache=False, bos_token_id=0, eos_token_id=0, pad_token_id=0),
}
DEFAULT_MODEL = "gpt2"
MODEL_LABELS = {"gpt2": "GPT-2 (230,464 parameters)", "llama": "LLaMA, grouped-query (266,688 parameters)",
                "qwen3": "Qwen3, q/k norms (202,784 parameters)"}

BATCH_RANGE = (1, 8)
SEQ_RANGE = (16, 256)  # GPT-2's learned positions stop at 256
PRECISIONS = ("fp32", "bf16")

# Each quantity, its key in memmath.measure's record, and how closely the recorded groups hold memmath to it
# (bytes: 0 = to the byte).
QUANTITIES = (
    ("Parameters", "param_bytes", 0.0),
    ("Gradients", "grad_bytes", 0.0),
    ("Optimizer states (AdamW)", "optimizer_state_bytes", 0.0),
    ("Saved activations", "saved_bytes", 0.01),
    ("Peak of step 1", "peak_step1_bytes", 0.05),
    ("Peak of step 2 (every later step)", "peak_step2_bytes", 0.05),
    # the step timeline: each phase's peak, as memmath.measure compares them
    *((f"Peak of step {step}'s {phase.replace('_', ' ')}", key, 0.05) for step, phase, key in TIMELINE),
)


@dataclass(frozen=True)
class Setup:
    """What the learner picks: the model, the batch, the sequence length, the precision and checkpointing."""

    batch_size: int = 2
    seq_len: int = 64
    precision: str = "bf16"
    checkpointing: bool = False
    model: str = DEFAULT_MODEL

    def __post_init__(self):
        from memmath import validate

        low, high = BATCH_RANGE
        object.__setattr__(self, "batch_size", validate.count("batch_size", self.batch_size, low=low, high=high,
                                                              scalar=True))
        low, high = SEQ_RANGE
        object.__setattr__(self, "seq_len", validate.count("seq_len", self.seq_len, low=low, high=high, scalar=True))
        validate.choice("precision", self.precision, PRECISIONS)
        object.__setattr__(self, "model", validate.choice("model", self.model, tuple(MODELS)))
        object.__setattr__(self, "checkpointing", validate.flag("checkpointing", self.checkpointing))

    def settings(self):
        """memmath.measure's settings for this setup: full finetuning with AdamW and SDPA."""
        from memmath.traced import TraceSettings

        return TraceSettings(precision=self.precision, optimizer="adamw", method="full", batch_size=self.batch_size,
                             seq_len=self.seq_len, checkpointing=self.checkpointing, attention="sdpa")


@dataclass(frozen=True)
class Measurement:
    """A measurement's outcome: `measured` (memmath.measure's record), the prediction for the device it ran on,
    and the device; or `message` (why there is none)."""

    measured: dict | None = None
    message: str = ""
    predicted: dict | None = None
    device: str = ""


def missing_packages() -> list[str]:
    """The packages of NEEDED that Python cannot find, without importing any of them (import torch takes seconds)."""
    missing = []
    for name in NEEDED:
        if name in sys.modules:
            if sys.modules[name] is None:  # an import that is known to fail (what the tests set to simulate it)
                missing.append(name)
            continue
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def install_message(missing) -> str:
    """Markdown for a learner without torch: what is missing and the one command that installs it."""
    return (f"**Measuring needs {' and '.join(missing)}**, which this Python does not have. Install them "
            f"(`{INSTALL_COMMAND}`; on a machine without a GPU take torch's CPU wheel first: `pip install "
            f"torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu`), restart the workbook and press "
            "the button again. memmath's prediction above needs neither.")


def predicted(setup: Setup, device: str = "cpu") -> dict:
    """memmath's prediction for the setup on `device`, by memmath.measure's keys (integer bytes); no torch needed."""
    from memmath.measure import predict

    prediction, _ = predict(MODELS[setup.model], setup.settings(), device)
    return prediction


def measure(setup: Setup) -> Measurement:
    """Two training steps of the setup on this machine (its GPU, else its CPU), by memmath.measure; or why not."""
    missing = missing_packages()
    if missing:
        return Measurement(message=install_message(missing))
    from memmath.measure import measure_run
    from memmath.traced import TorchMissing

    try:
        comparison = measure_run(MODELS[setup.model], setup.settings())
    except TorchMissing as error:  # found but broken (a partial install)
        return Measurement(message=install_message([getattr(error, "name", None) or "torch"]))
    return Measurement(measured=comparison.measured, predicted=comparison.predicted, device=comparison.device)


def within(predicted_bytes: int, measured_bytes: int, tolerance: float) -> bool:
    """Whether a prediction is as close as the recorded groups require (tolerance 0: to the byte)."""
    return abs(predicted_bytes - measured_bytes) <= tolerance * measured_bytes


def comparison_frame(prediction: dict, measured: dict | None = None):
    """One row per quantity: memmath's bytes, the measured bytes, the difference and the project's tolerance."""
    import pandas as pd

    rows = []
    for label, key, tolerance in QUANTITIES:
        row = {"quantity": label, "memmath (bytes)": prediction[key]}
        if measured is not None:
            got = int(measured[key])
            row["measured (bytes)"] = got
            row["difference"] = f"{(prediction[key] - got) / got:+.2%}" if got else "0"
            row["held to"] = "the byte" if tolerance == 0 else f"{tolerance:.0%}"
            row["agrees"] = "yes" if within(prediction[key], got, tolerance) else "no"
        rows.append(row)
    return pd.DataFrame(rows)
