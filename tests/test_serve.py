"""memmath.Serve: one value for a serving question, and plan_serving's verdict and changes read from the plan."""

import pytest

import memmath as mm

# nvidia-smi on an RTX 4090 reports 24,564 MiB; the CUDA context reserve is an Ada card's, 426 MiB (an RTX 6000 Ada's).
RTX_4090 = 24_564 * 2**20
RESERVE = 426 * 2**20  # an RTX 4090 (Ada): the context measured on an RTX 6000 Ada, unslothai/unsloth-zoo pull request 1053
# meta-llama/Llama-2-13b-hf config.json: 40 layers, 40 heads of 128 (no grouped-query attention), 13,015,864,320
# parameters (the safetensors index's total_size / 2 B).
LLAMA_2_13B_PARAMS = 13_015_864_320
KV_PER_TOKEN_13B = 2 * 40 * 40 * 128 * 2  # key and value x layers x kv heads x head dim x 2 B (bf16)


def test_a_serve_holds_the_defaults_and_names_each_setting():
    serve = mm.Serve("llama-2-13b")
    assert serve.settings() == {"weights_format": "bf16", "kv_format": "bf16", "batch_size": 1, "context_len": 2048,
                                "attention": "sdpa"}
    assert serve.model == mm.PRESETS["llama-2-13b"]
    # Spellings get_format reads are one format: the same question is the same (hashable) value.
    assert mm.Serve("llama-2-13b", weights_format="bfloat16") == serve and len({serve, mm.Serve("llama-2-13b")}) == 1
    assert serve.replace(context_len=8192).context_len == 8192 and serve.context_len == 2048
    assert repr(serve).startswith("Serve(model='llama-2-13b', weights_format='bf16'")


@pytest.mark.parametrize("settings, field", [
    (dict(context_len=0), "context_len"), (dict(batch_size=10**12), "batch_size"), (dict(attention="flash"), "attention"),
    (dict(kv_format="fp7"), "fp7"), (dict(context_len=[1, 2]), "context_len")])
def test_a_bad_serving_setting_is_refused_by_name(settings, field):
    with pytest.raises(ValueError, match=field):
        mm.Serve("gpt2", **settings)


def test_an_unknown_setting_is_refused_by_name():
    with pytest.raises(TypeError, match="seq_len is not a serving setting"):
        mm.Serve("gpt2").replace(seq_len=100)
    with pytest.raises(TypeError, match="not both"):
        mm.plan_serving(mm.Serve("gpt2"), "T4", context_len=100)


def test_the_plan_of_a_serve_is_the_plan_of_its_keywords():
    serve = mm.Serve("llama-2-13b", context_len=8192)
    plan, keywords = mm.plan_serving(serve, "RTX 4090"), mm.plan_serving("llama-2-13b", "RTX 4090", context_len=8192)
    assert plan.serve == serve and plan.memory == keywords.memory and plan.changes == keywords.changes
    assert plan.fit == keywords.fit and plan.longest_context == keywords.longest_context
    assert mm.serving.serving_changes(serve, "RTX 4090") == list(keywords.changes)
    longest = mm.serving.longest_context_that_fits
    assert longest(mm.Serve("llama-2-7b"), "RTX 4090") == longest("llama-2-7b", "RTX 4090")


def test_plan_fit_and_plan_instead_answer_the_lessons_question():
    # Llama-2-13B in bf16 at 8,192 tokens: 2 B x 13,015,864,320 weights + 8,192 tokens of 819,200 B of cache,
    # more than the 24,564 MiB less 426 MiB an RTX 4090 leaves.
    plan = mm.plan_serving(mm.Serve("llama-2-13b", context_len=8192), "RTX 4090")
    assert plan.memory.weights == 2 * LLAMA_2_13B_PARAMS and plan.memory.kv_cache == 8192 * KV_PER_TOKEN_13B
    assert plan.fits is False and plan.fit.available_bytes == RTX_4090 - RESERVE
    # instead: the changes that fit on their own, each leaving 5% of its total free beside the reserve.
    assert [c.change for c in plan.instead] == ["weights in nf4", "weights in int8"]
    for change in plan.instead:
        assert change.total * (1 + mm.FIT_MARGIN) <= RTX_4090 - RESERVE
        assert change.serve == plan.serve.replace(**{k: v for k, v in change.settings.items()
                                                      if v != plan.settings[k]})
        assert mm.plan_serving(change.serve, "RTX 4090").memory.total == change.total
    assert all(not c.fits for c in plan.changes if c not in plan.instead)
    # A setup that fits needs nothing instead; without a card there is no verdict.
    fits = mm.plan_serving(mm.Serve("gpt2"), "H200")
    assert fits.fits is True and fits.instead == ()
    assert mm.plan_serving(mm.Serve("gpt2")).fits is None and mm.plan_serving(mm.Serve("gpt2")).instead == ()
