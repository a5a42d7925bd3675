"""memmath_lessons.step_slider without a browser: the step it stands on, what it refuses, what a move sends.

test_step_slider_browser.py checks the page: the thumb's step, a width move sending new steps to
the same slider, a learner's move re-running the lesson.
"""

from __future__ import annotations

import marimo as mo
import pytest

from memmath_lessons.step_slider import StepSlider, shown_step, step_slider

DIVISORS_OF_768 = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128]  # 768 = 2^8 x 3, divisors up to 128


@pytest.mark.parametrize("chosen, shown", [(12, 12), (13, 12), (100, 96), (1000, 128), (0, 1)])
def test_it_stands_on_the_largest_step_at_most_the_choice(chosen, shown):
    assert shown_step(DIVISORS_OF_768, chosen) == shown
    assert step_slider(DIVISORS_OF_768, value=chosen).shown == shown


def test_new_steps_keep_the_learners_choice():
    # 12 heads on a width of 768, then 832 = 2^6 x 13 (divisors up to 128: 1 2 4 8 13 16 26 32 52 64 104).
    heads = step_slider(DIVISORS_OF_768, value=12, label="Heads")
    heads.steps = [1, 2, 4, 8, 13, 16, 26, 32, 52, 64, 104]
    assert (heads.shown, heads.chosen) == (8, 12)
    heads.steps = DIVISORS_OF_768  # back to 768: 12 again
    assert heads.shown == 12


def test_it_is_a_marimo_ui_element_around_the_widget():
    heads = step_slider([1, 2], value=2, label="Heads")
    assert isinstance(heads, mo.ui.anywidget) and isinstance(heads.widget, StepSlider)
    assert heads.value["chosen"] == 2 and heads.value["steps"] == [1, 2] and heads.value["label"] == "Heads"


def test_equal_steps_send_nothing():
    widget, sent = StepSlider(steps=[1, 2, 4], chosen=2), []
    widget.observe(lambda change: sent.append(change["name"]), names=["steps"])
    widget.steps = [1, 2, 4]
    assert sent == []
    widget.steps = [1, 3]
    assert sent == ["steps"]


@pytest.mark.parametrize("steps, says", [([], "steps must hold at least one value"),
                                         ([1, 2.5], "steps must be whole numbers"),
                                         ([1, True], "steps must be whole numbers"),
                                         ([4, 2], "steps must increase strictly"),
                                         ([2, 2], "steps must increase strictly")])
def test_bad_steps_are_refused_by_name(steps, says):
    with pytest.raises(ValueError, match=says):
        step_slider(steps, value=1)
    widget = StepSlider(steps=[1, 2], chosen=1)
    with pytest.raises(ValueError, match=says):
        widget.steps = steps


@pytest.mark.parametrize("value, says", [(2.5, "value must be a whole number"), ("3", "value must be a whole number"),
                                         (None, "value must be a whole number")])
def test_a_bad_value_is_refused_by_name(value, says):
    with pytest.raises(ValueError, match=says):
        step_slider([1, 2], value=value)


def test_a_label_must_be_text():
    with pytest.raises(ValueError, match="label must be text"):
        step_slider([1, 2], value=1, label=3)


def test_it_is_frozen_in_a_static_export_only(monkeypatch):
    # The static site has no kernel: a slider that moved there would stand away from the numbers beside it.
    assert step_slider([1, 2], value=1).disabled is False
    monkeypatch.setenv("MEMMATH_STATIC_EXPORT", "1")
    assert step_slider([1, 2], value=1).disabled is True
