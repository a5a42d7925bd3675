"""viz.short_count: parameter counts for labels (expected strings written by hand)."""

from memmath_lessons import viz


def test_short_counts():
    assert viz.short_count(124_439_808) == "124M"
    assert viz.short_count(6_738_415_616) == "6.74B"
    assert viz.short_count(7_000_000_000) == "7B"
    assert viz.short_count(174_604_259_328) == "175B"
    assert viz.short_count(1_000_000_000_000) == "1T"
    assert viz.short_count(512) == "512"
