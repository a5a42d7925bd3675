"""Notes: what a result left out or assumed, as a kind (for code) and a text (for readers).

A lesson or a command line that wants one kind of note picks it by `note.kind`, never by parsing
the text; `str(note)` (and an f-string) gives the text, for displays.
"""

from __future__ import annotations
from .values import frozen



@frozen
class Note:
    """One note on a result: kind, a short fixed identifier; text, the sentence shown to a reader."""

    kind: str
    text: str

    def __post_init__(self):
        for name in ("kind", "text"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise TypeError(f"{name} must be a non-empty string; got {type(getattr(self, name)).__name__}")

    def __str__(self) -> str:
        return self.text


def texts(notes) -> list[str]:
    """The texts of a sequence of notes, in order (for joining into one line)."""
    return [str(n) for n in notes]
