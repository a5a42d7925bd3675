"""memmath: the memory math of training and serving neural networks, in integer bytes.

The calculator only: numpy is its one dependency, and it is imported only when an array is in play
(a sweep; memmath/arrays.py), pandas only inside the functions that build a DataFrame. What it is checked
against (the recorded PyTorch measurements and the literature) lives in `memmath_lessons.reference`; the
workbook's charts and controls live in the separate `memmath_lessons` package.

    >>> import memmath
    >>> m = memmath.training_memory(memmath.uniform_model(7e9, 32), precision="bf16", optimizer="adam")
    >>> memmath.format_bytes(m.weights), memmath.format_bytes(m.without_activations)
    ('14.00 GB', '56.00 GB')

`memmath.X` names the few things most questions need (__all__); everything else is importable from the
module that defines it, and reachable as `memmath.<module>.X` (memmath.planner.largest_batch_that_fits).
"""

from __future__ import annotations

import importlib
import importlib.util


# Public name -> the module that defines it. Modules load on first use (PEP 562), so `import memmath`
# costs almost nothing (benchmarks/import_speed.py) and a command line pays only for what it uses.
_EXPORTS = {
    # a training run and what it needs
    "Run": "run", "Serve": "run", "training_memory": "memory", "peak_memory": "peak", "requirement": "decision",
    "step_timeline": "timeline", "plan_training": "planner",
    # serving
    "inference_memory": "inference", "kv_cache_bytes": "inference", "plan_serving": "serving",
    # the card
    "GPUS": "gpus", "get_gpu": "gpus", "check_fit": "gpus", "CUDA_CONTEXT_BYTES": "gpus", "FIT_MARGIN": "gpus",
    "cuda_context_bytes": "gpus",
    # the model
    "ModelShape": "models", "parameter_counts": "counts", "uniform_model": "models", "from_hf_config": "config_reader", "PRESETS": "presets",
    "resolve_model": "sources",
    # what trains, in which formats
    "Full": "methods", "Freeze": "methods", "LoRA": "methods", "QLoRA": "methods", "Adapters": "methods",
    "DPO": "preference", "RECIPES": "recipes", "OPTIMIZERS": "recipes", "FORMATS": "formats", "get_format": "formats",
    # bytes as people write them
    "UNITS": "units", "format_bytes": "units", "parse_bytes": "units", "to_unit": "units",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Load the module that defines a public name on first use, and keep the name here; a submodule's name
    (memmath.planner) loads that module."""
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'memmath' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
