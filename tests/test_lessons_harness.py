"""The lesson harness's bad-text check: negative sizes, NaN and tracebacks, but not model names."""

import re

from lessons import _BAD_TEXT


def test_model_names_are_not_negative_sizes():
    assert _BAD_TEXT.findall("Llama-2-13B, llama-3-8b, gpt3-175b and mistral-7b") == []


def test_negative_sizes_nan_and_tracebacks_are_caught():
    assert _BAD_TEXT.findall("headroom -3.20 GB") == ["-3.20 GB"]
    assert _BAD_TEXT.findall("(-512 MiB)") == ["-512 MiB"]
    assert [m.lower() for m in _BAD_TEXT.findall("a NaN total")] == ["nan"]
    assert _BAD_TEXT.findall("Traceback (most recent call last)") == ["Traceback"]
