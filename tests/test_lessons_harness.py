"""The lesson harness's bad-text check: negative sizes, NaN and tracebacks, but not model names."""

import re

from lessons import BAD_TEXT


def test_model_names_are_not_negative_sizes():
    assert BAD_TEXT.findall("Llama-2-13B, llama-3-8b, gpt3-175b and mistral-7b") == []


def test_negative_sizes_nan_and_tracebacks_are_caught():
    assert BAD_TEXT.findall("headroom -3.20 GB") == ["-3.20 GB"]
    assert BAD_TEXT.findall("(-512 MiB)") == ["-512 MiB"]
    assert [m.lower() for m in BAD_TEXT.findall("a NaN total")] == ["nan"]
    assert BAD_TEXT.findall("Traceback (most recent call last)") == ["Traceback"]
