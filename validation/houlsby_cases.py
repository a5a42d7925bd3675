"""The held-out Houlsby adapter cases: measured after memmath's activation and peak model of them.

    python -m validation.houlsby_cases     # measure those not yet recorded, append them to adapter_cases

The adapter itself (the PyTorch module and where it goes) is validation/houlsby.py; the measurement
is validation/measure.py's.
"""

from __future__ import annotations


def held_out_grid():
    """Houlsby adapters at other widths, sizes, attention kinds, dropout and checkpointing (held out)."""
    from .measure import Case

    class HeldOutAdapterCase(Case):
        @property
        def held_out(self) -> bool:
            return True  # recorded after hf_activations traced Adapters(...)

    cases = []
    for i, shape in enumerate(("bert", "llama-mha", "llama-gqa", "bert-wide", "llama-wide")):
        for j, (bottleneck, attention, dropout, ckpt, b, s) in enumerate((
                (16, "eager", True, False, 1, 48), (64, "sdpa", False, True, 3, 32), (4, "sdpa", False, False, 4, 16))):
            cases.append(HeldOutAdapterCase(shape, precision=("fp32", "bf16")[(i + j) % 2],
                                            optimizer=("adamw", "sgd_momentum")[j % 2], method="houlsby",
                                            bottleneck=bottleneck, attention=attention, dropout=dropout,
                                            checkpointing=ckpt, batch_size=b, seq_len=s, group="Houlsby adapters"))
    return cases


def main():
    """python -m validation.houlsby_cases: measure the held-out adapter cases, append them to adapter_cases."""
    import json
    import logging
    import warnings

    from . import measure
    from .quantized import append

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    have = {r["config"]["case_id"] for r in json.loads(measure.DEFAULT_OUT.read_text()).get("adapter_cases", [])}
    records = measure.run([c for c in held_out_grid() if c.case_id not in have])
    print(f"appended {append(records, 'adapter_cases')} cases")


if __name__ == "__main__":
    main()
