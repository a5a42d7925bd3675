"""One verdict rule: does a run fit one card, and by how much, said the same way everywhere.

The words, each named once here and read by the lessons, the static site and the command line:

- the requirement: what the GPU that needs the most must hold at once (memmath.requirement: the step's
  peak where memmath models it, else the sum of the parts), per GPU; the CUDA reserve is NOT in it;
- usable: the card's memory as the driver reports it, less the reserve kept back for the CUDA context
  (the card's, GPU.cuda_context_bytes, by default: memmath/cuda_context.py; 0 leaves it out);
- the margin: gpus.FIT_MARGIN (5%) of the requirement that must stay free as well, because the peak
  estimate is held to 5% of PyTorch's measured peak (tests/test_fidelity.py);
- fits: requirement + margin <= usable (gpus.Fit.fits, the same inequality);
- to spare: usable - requirement, what the card has left once the requirement is in (the margin is part of
  it), said when the run fits;
- short by: requirement + margin - usable, what must be freed (or added) before the run fits, said when it
  does not: the margin is always in it, so one shortfall means one thing;
- what fails: "the margin" when the requirement alone fits the usable memory but the margin does not,
  "the card" when the requirement alone is more than the usable memory, None when the run fits;
- no verdict: a requirement that is only a floor (memmath.decision: a model type whose activations are not
  checked against PyTorch) says "does not fit" when even the floor fails the rule above, and else refuses the
  verdict by name (fits is None, `refusal` says why and what would make it work): never "fits".
"""

from __future__ import annotations


from .gpus import FIT_MARGIN, check_fit
from .units import format_bytes
from .values import frozen

VERDICT_RULE = (f"A run fits a card when its requirement (the peak, per GPU) plus {FIT_MARGIN:.0%} of it kept free is at "
        "most the card's usable memory (its memory less the CUDA context's reserve). \"To spare\" is the usable memory "
        "less the requirement; \"short by\" is the requirement plus the margin less the usable memory.")


@frozen
class Verdict:
    """One card's verdict on one requirement; every figure in bytes (see the module's words)."""

    gpu_name: str
    required_bytes: int
    memory_bytes: int
    reserved_bytes: int
    margin_bytes: int
    margin_share: float
    refusal: str = ""  # why required_bytes is only a floor and no "fits" is said ("" for a requirement)
    left_out: str = "its activations"  # what a floor leaves out, in words (memmath.decision.Requirement.left_out)

    @property
    def usable_bytes(self) -> int:
        """The card's memory less the reserve kept back for the CUDA context."""
        return self.memory_bytes - self.reserved_bytes

    @property
    def fits(self) -> bool | None:
        """The requirement plus the margin is at most the usable memory; None (no verdict) where the requirement is
        only a floor (refusal) that passes it."""
        holds = self.required_bytes + self.margin_bytes <= self.usable_bytes
        return None if holds and self.refusal else holds

    @property
    def spare(self) -> int:
        """Usable memory less the requirement (0 when the requirement alone is more than the card)."""
        return max(0, self.usable_bytes - self.required_bytes)

    @property
    def short_by(self) -> int:
        """Requirement plus margin less the usable memory: what must be freed before the run fits (0 when it fits);
        for a floor, at least that."""
        return max(0, self.required_bytes + self.margin_bytes - self.usable_bytes)

    @property
    def what_fails(self) -> str | None:
        """"the margin" (the requirement alone fits, the margin does not), "the card", or None when it fits."""
        if self.fits is not False:
            return None
        return "the margin" if self.required_bytes <= self.usable_bytes else "the card"

    @property
    def with_reserve_bytes(self) -> int:
        """The requirement with the CUDA reserve added: what the whole card holds (name it so where shown)."""
        return self.required_bytes + self.reserved_bytes

    def sentence(self, unit="GB") -> str:
        """The verdict as a clause, no subject: "fits, with 3.64 GB to spare (...)" or "does not fit: short by ..."."""
        why = self.why(unit)
        return self.clause(unit) + (f" ({why[0].lower()}{why[1:-1]})" if why else "")

    def headline(self, unit="GB") -> str:
        """The verdict alone, as a sentence: "It fits, with 3.64 GB to spare." or "It does not fit: short by 0.61 GB."."""
        return f"It {self.clause(unit)}."

    def why(self, unit="GB") -> str:
        """The sentence after the headline: what the margin is and, when the run does not fit, what fails."""
        f = lambda n: format_bytes(n, unit)  # noqa: E731
        if self.fits is None:
            return f"No verdict: {self.refusal}."
        if not self.margin_bytes:
            return ""
        kept = f"{f(self.margin_bytes)}, {self.margin_share:.0%} of the requirement,"
        if self.fits:
            return f"More than the {kept} kept free."
        if self.what_fails == "the margin":
            return f"Only the margin fails: the requirement leaves {f(self.spare)}, less than the {kept} kept free."
        return (f"The requirement is {f(self.required_bytes - self.usable_bytes)} more than the usable memory, "
                f"and {kept} must stay free.")

    def clause(self, unit="GB") -> str:
        """The verdict alone, no subject: "fits, with 3.64 GB to spare" or "does not fit: short by 0.61 GB"; for a
        floor "does not fit: short by at least 0.61 GB" or "has no verdict: ...activations unchecked"."""
        f = lambda n: format_bytes(n, unit)  # noqa: E731
        if self.refusal:
            if self.fits is None:
                return (f"has no verdict: without {self.left_out} it needs {f(self.required_bytes)}, which leaves "
                        f"{f(self.spare)} for them")
            return f"does not fit: short by at least {f(self.short_by)}, even without {self.left_out}"
        return f"fits, with {f(self.spare)} to spare" if self.fits else f"does not fit: short by {f(self.short_by)}"


def verdict_of(required, gpu, *, reserved_bytes=None, margin=FIT_MARGIN) -> Verdict:
    """The Verdict of `required` (bytes, a Requirement, or anything with .bytes/.total) on `gpu` (a name or a
    GPU): the CUDA reserve and the margin by default, as the planner and the command line judge a run. A
    Requirement that is a floor (memmath.decision) gives its refusal: never "fits"."""
    refusal = required.reason if getattr(required, "basis", None) == "floor" else ""
    left_out = getattr(required, "left_out", "") or "its activations"
    required = getattr(required, "bytes", required)
    fit = check_fit(required, gpu, reserved_bytes=reserved_bytes, margin=margin)
    return verdict_of_fit(fit, margin, refusal, left_out)


def verdict_of_fit(fit, margin=FIT_MARGIN, refusal="", left_out="its activations") -> Verdict:
    """The Verdict of a gpus.Fit (check_fit's answer); `margin`: the share its margin_bytes stands for; refusal: why
    the fit's bytes are only a floor (a floor Requirement's reason), "" for a requirement."""
    return Verdict(gpu_name=fit.gpu.name, required_bytes=int(fit.required_bytes), memory_bytes=int(fit.gpu.memory_bytes),
                   reserved_bytes=int(fit.reserved_bytes), margin_bytes=int(fit.margin_bytes),
                   margin_share=float(margin) if fit.margin_bytes else 0.0, refusal=refusal, left_out=left_out)
