"""Measure it yourself: two training steps of a tiny GPT-2 on this computer's CPU, beside memmath's prediction.

Lesson 10's last section calls this module. The measurement is the project's own: the model, the two
steps and the counting are `validation/measure.py`'s (its `Case`, `build`, `measure` and
`configure_torch`), run on its "gpt2" shape (3 blocks of width 64, 4 heads, a 1,000-token vocabulary:
230,464 parameters), and the prediction is `memmath_lessons.reference.predict_case` / `predict_peak_case` for
the same case, as `tests/test_fidelity_live.py` compares them: parameters, gradients and optimizer
states equal to the byte, saved activations within 1%, each step's peak within 5%.

Nothing here imports torch until `measure(...)` is called (a button press in the lesson), so the
lesson opens, and the static site exports, without it. Without torch or transformers, or without the
repository's `validation/` folder (an installed wheel does not carry it), `measure` returns a message
that says what to install or where to run it, never an exception.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

INSTALL_COMMAND = "pip install torch==2.13.0 transformers"
"""What the lesson tells a learner without torch (the CPU wheel: README's install section has the index)."""
SHAPE = "gpt2"
"""validation/measure.py's SHAPES key of the model measured: a GPT-2 of a few hundred thousand parameters."""
NEEDED = ("torch", "transformers")
REPO = Path(__file__).resolve().parent.parent

BATCH_RANGE = (1, 8)
SEQ_RANGE = (16, 256)  # the shape's n_positions is 256: GPT-2's learned positions stop there
PRECISIONS = ("fp32", "bf16")

# Each quantity, its key in validation/measure.py's result, and how closely tests/test_fidelity_live.py holds
# memmath to it (bytes: 0 = to the byte).
QUANTITIES = (
    ("Parameters", "param_bytes", 0.0),
    ("Gradients", "grad_bytes", 0.0),
    ("Optimizer states (AdamW)", "optimizer_state_bytes", 0.0),
    ("Saved activations", "saved_bytes", 0.01),
    ("Peak of step 1", "peak_step1_bytes", 0.05),
    ("Peak of step 2 (every later step)", "peak_step2_bytes", 0.05),
)


@dataclass(frozen=True)
class Setup:
    """What the learner picks: the batch, the sequence length, the precision and checkpointing."""

    batch_size: int = 2
    seq_len: int = 64
    precision: str = "bf16"
    checkpointing: bool = False

    def __post_init__(self):
        from memmath import validate

        low, high = BATCH_RANGE
        object.__setattr__(self, "batch_size", validate.count("batch_size", self.batch_size, low=low, high=high,
                                                              scalar=True))
        low, high = SEQ_RANGE
        object.__setattr__(self, "seq_len", validate.count("seq_len", self.seq_len, low=low, high=high, scalar=True))
        validate.choice("precision", self.precision, PRECISIONS)
        object.__setattr__(self, "checkpointing", validate.flag("checkpointing", self.checkpointing))


@dataclass(frozen=True)
class Measurement:
    """A measurement's outcome: `measured` (validation/measure.py's result) or `message` (why there is none)."""

    measured: dict | None = None
    message: str = ""


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


def load_measure():
    """validation/measure.py as a module (it imports torch only inside its functions), or None where the
    repository's validation/ folder is not here (an installed wheel)."""
    existing = sys.modules.get("validation.measure")
    if existing is not None:
        return existing
    folder = REPO / "validation"
    if not (folder / "measure.py").is_file():
        return None
    if "validation" not in sys.modules:  # the repository root need not be on sys.path (marimo run notebooks)
        spec = importlib.util.spec_from_file_location("validation", folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        package = importlib.util.module_from_spec(spec)
        sys.modules["validation"] = package
        spec.loader.exec_module(package)
    return importlib.import_module("validation.measure")


NO_VALIDATION = ("**The measurement reuses the repository's `validation/measure.py`**, which an installed "
                 "package does not carry: run the workbook from a clone of the repository "
                 "(`.venv/bin/marimo run notebooks --include-code`) to measure.")


def case_and_row(setup: Setup, measure_module=None):
    """(validation Case, the recorded-case row memmath_lessons.reference reads) for `setup` on the tiny GPT-2."""
    measure_module = measure_module or load_measure()
    if measure_module is None:
        raise LookupError(NO_VALIDATION)
    case = measure_module.Case(SHAPE, precision=setup.precision, optimizer="adamw", method="full",
                               attention="sdpa", dropout=False, checkpointing=setup.checkpointing,
                               batch_size=setup.batch_size, seq_len=setup.seq_len)
    config = case.config()
    row = {**{k: v for k, v in config.items() if k != "model"}, **config["model"]}  # as load_measured flattens it
    return case, row


def predicted(setup: Setup) -> dict:
    """memmath's prediction for the case, by validation/measure.py's result keys (integer bytes)."""
    import memmath_lessons.reference as reference

    _, row = case_and_row(setup)
    memory = reference.predict_case(row)
    return {"param_bytes": int(memory.weights), "grad_bytes": int(memory.gradients),
            "optimizer_state_bytes": int(memory.optimizer_states),
            "saved_bytes": int(memory.activation_detail.saved_by_forward),
            "peak_step1_bytes": int(reference.predict_peak_case(row, step="first").total),
            "peak_step2_bytes": int(reference.predict_peak_case(row, step="steady").total)}


def measure(setup: Setup) -> Measurement:
    """Two training steps of the case on this CPU, as validation/measure.py records them; or why not."""
    missing = missing_packages()
    if missing:
        return Measurement(message=install_message(missing))
    measure_module = load_measure()
    if measure_module is None:
        return Measurement(message=NO_VALIDATION)
    try:
        import torch
        import transformers
    except ImportError as error:  # found but broken (a partial install)
        return Measurement(message=install_message([getattr(error, "name", None) or "torch"]))
    import logging
    import warnings

    case, _ = case_and_row(setup, measure_module)
    threads, onednn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    verbosity = transformers.logging.get_verbosity()
    try:
        transformers.logging.set_verbosity_error()
        logging.getLogger("transformers").setLevel(logging.ERROR)
        measure_module.configure_torch()  # as the recording did: one thread, oneDNN off (its docstring says why)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            measured = measure_module.measure(case)
    finally:
        torch.set_num_threads(threads)
        torch.backends.mkldnn.enabled = onednn
        transformers.logging.set_verbosity(verbosity)
    return Measurement(measured=measured)


def within(predicted_bytes: int, measured_bytes: int, tolerance: float) -> bool:
    """Whether a prediction is as close as tests/test_fidelity_live.py requires (tolerance 0: to the byte)."""
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
