"""The one search the planners share (memmath.search), and the serving planner (memmath.serving)."""

import pytest

import memmath as mm
from memmath.search import fewest_where, largest_where


@pytest.mark.parametrize("edge", [1, 2, 7, 64, 1000, 2**20])
@pytest.mark.parametrize("grow", [False, True])
def test_largest_where_finds_the_edge_of_a_monotone_test(edge, grow):
    calls = []

    def holds(n):
        calls.append(n)
        return n <= edge

    assert largest_where(holds, 1, 2**20, grow=grow) == edge
    assert len(calls) <= 2 * 21 + 2  # a bisection (or a doubling then one), never a scan
    assert largest_where(lambda n: n <= edge, edge + 1, 2**20) is None  # fails at low: none
    assert largest_where(lambda n: True, 5, 4) is None  # an empty range


@pytest.mark.parametrize("edge", [1, 3, 8, 1024])
def test_fewest_where_finds_the_first_n_that_holds(edge):
    assert fewest_where(lambda n: n >= edge, 1, 1024) == edge
    assert fewest_where(lambda n: n >= 2000, 1, 1024) is None


def test_the_longest_context_is_the_edge_of_the_fit():
    # The total grows with the context; the longest that fits fits and one more token does not.
    gpu = mm.get_gpu("RTX 4090")
    longest = mm.serving.longest_context_that_fits("llama-2-7b", gpu)
    fits = lambda n: mm.check_fit(mm.inference_memory("llama-2-7b", context_len=n).total, gpu).fits  # noqa: E731
    assert longest > 0 and fits(longest) and not fits(longest + 1)
    # Llama-2-13B in bf16 (26.03 GB of weights) leaves nothing for any context on a 24 GB card.
    assert mm.serving.longest_context_that_fits("llama-2-13b", gpu) == 0


def test_serving_changes_are_single_changes_ranked_by_saving_and_judged_with_the_reserve():
    # Llama-2-13B at 8,192 tokens in bf16 does not fit an RTX 4090: weights alone are 2 x 13,015,864,320 B.
    plan = mm.plan_serving("llama-2-13b", "RTX 4090", context_len=8192)
    assert not plan.fit.fits and plan.longest_context == 0
    assert [c.change for c in plan.changes][:2] == ["weights in nf4", "weights in int8"]
    assert [c.saved for c in plan.changes] == sorted((c.saved for c in plan.changes), reverse=True)
    before = mm.inference_memory("llama-2-13b", context_len=8192).total
    for change in plan.changes:
        total = mm.inference_memory("llama-2-13b", **change.settings).total
        assert change.total == total and change.saved == before - total
        assert change.fits == mm.check_fit(total, "RTX 4090").fits
    # A setup that fits has no changes; without a GPU there is no verdict.
    assert mm.plan_serving("gpt2", "H200").changes == () and mm.plan_serving("gpt2").fit is None


def test_serving_settings_are_checked_by_name():
    with pytest.raises(TypeError, match="not a serving setting"):
        mm.plan_serving("gpt2", "T4", seq_len=100)
    with pytest.raises(ValueError, match="context_len"):
        mm.serving.serving_changes("gpt2", "T4", context_len=[1, 2])


def test_a_context_past_what_a_config_says_the_model_was_trained_on_gets_a_note():
    # meta-llama/Meta-Llama-3-8B's config.json: max_position_embeddings 8,192 (rotary: no tensor depends on it).
    from validation.published_configs import PUBLISHED_CONFIGS

    shape = mm.from_hf_config(PUBLISHED_CONFIGS["Meta-Llama-3-8B"])
    assert mm.planner.trained_context(shape) == 8192 and shape == mm.PRESETS["llama-3-8b"].with_changes(name=shape.name)
    assert any("8,192" in str(n) for n in mm.plan_serving(shape, "H200", context_len=16384).notes)
    assert not mm.plan_serving(shape, "H200", context_len=8192).notes
