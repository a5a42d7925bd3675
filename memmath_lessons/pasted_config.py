"""A model from a preset or from a pasted config.json, for the lessons that take either (7 and 8).

`read_model(source, preset, text)` gives (shape, error): the preset's ModelShape, or the pasted text read
with `memmath.planner.config_from_text` (JSON only, never a path); a bad paste is an error message, never an
exception. `error_markdown(error)` is that message for a `mo.callout(..., kind="danger")`, with what to do;
`pasted_text` shows any text the learner pasted as the characters typed.
"""

from __future__ import annotations

import html
import re

import memmath as mm

SOURCES = ("preset", "paste config.json")  # the "Model from" radio's options, in this order


def read_model(source: str, preset: str, text: str):
    """(ModelShape, None) for the chosen preset or the pasted config.json, or (None, message) when the paste
    cannot be used (bad JSON, a missing field, an unsupported model_type: config_from_text's ValueError)."""
    if source == SOURCES[0]:
        return mm.PRESETS[preset], None
    try:
        return mm.planner.config_from_text(text), None
    except ValueError as error:
        return None, str(error)


def pasted_text(text) -> str:
    """Pasted text (a config's _name_or_path, a message quoting it) as plain text inside markdown: on one
    line, HTML escaped (html.escape), and markdown's and LaTeX's punctuation as character references (a
    backslash escape would turn \\[ ... \\] into math), so a pasted <img> or ![](...) shows as typed."""
    one_line = " ".join(str(text).split())
    return re.sub(r"[\\`*_{}\[\]()#+!|~$]", lambda m: f"&#{ord(m.group())};", html.escape(one_line, quote=False))


def error_markdown(error: str) -> str:
    """Markdown for a config.json that cannot be used: the reason, escaped, and what to do instead."""
    hints = {"not supported": "Relabelling its `model_type` as one of those counts that family's tensors, not yours, "
                              "so memmath refuses it rather than guess. Choose **preset** above to use one of the "
                              "built-in models instead.",
             "missing the field": "Paste the model's complete config.json, as published with its weights."}
    hint = next((h for k, h in hints.items() if k in error), "")
    why = pasted_text(error.replace("the pasted config.json", "the text", 1))
    return f"**This config.json cannot be used:** {why}. {hint}".strip()
