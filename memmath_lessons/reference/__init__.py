"""What memmath is checked against: data with sources, no formulas.

- `literature`: figures the papers and model cards report (REPORTED, cite), each with its source.
- `published`: the training recipes that published estimates assume, and their bytes per parameter.
- `paper_setups`: the setups of the LoRA and QLoRA papers' headline numbers, as memmath calls.
- `measured`: the PyTorch measurements recorded by validation/measure.py (data/*.json) and the
  functions that replay a recorded case through memmath.
"""

from . import literature, paper_setups, published
from .measured import load_measured, measured_metadata, predict_case, predict_peak_case, predicted_saved_per_layer

__all__ = ["literature", "load_measured", "measured_metadata", "paper_setups", "predict_case", "predict_peak_case",
           "predicted_saved_per_layer", "published"]
