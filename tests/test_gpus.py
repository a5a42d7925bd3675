"""The GPU catalog and the fit check."""

import pytest

import memmath as mm

MIB, GIB, GB = 2**20, 2**30, 10**9


@pytest.mark.parametrize("name, mib", [
    # nvidia-smi reports an RTX 4090 as 24564 MiB and an A100 80GB as 81920 MiB.
    ("RTX 4090", 24564), ("A100 80GB", 81920),
    # Public nvidia-smi outputs: Tesla V100-SXM2/PCIE-32GB 32510 MiB, A100-SXM4-40GB 40960 MiB,
    # Tesla T4 15360 MiB, H200 143771 MiB.
    ("V100 32GB", 32510), ("A100 40GB", 40960), ("T4", 15360), ("H200", 143771),
])
def test_memory_as_the_driver_reports_it(name, mib):
    assert mm.get_gpu(name).memory_bytes == mib * MIB


def test_every_card_reports_a_little_less_than_its_binary_marketed_size():
    # "24 GB" cards are sold in binary sizes and the driver keeps a little back: each card reports
    # between 90% and 100% of its marketed size read as GiB.
    for gpu in mm.GPUS.values():
        marketed_gib = float(gpu.marketed.split()[0]) * GIB
        assert 0.9 * marketed_gib <= gpu.memory_bytes <= marketed_gib, gpu.name
        assert gpu.memory_bytes % MIB == 0 and gpu.bandwidth_bytes_per_s > 0 and gpu.bf16_tflops > 0


def test_fit_check_says_how_much_is_left_or_missing():
    # Llama-2-7B weights in bf16 (13,476,831,232 B) fit a 4090 with 25,757,220,864 - 13,476,831,232 left.
    fit = mm.check_fit(mm.inference_memory("llama-2-7b").weights, "RTX 4090", reserved_bytes=0)
    assert fit.fits and fit.headroom_bytes == 24564 * MIB - 13_476_831_232
    # By default the CUDA context is reserved: 1,343 MiB (a V100, Hugging Face's "Model training anatomy").
    assert mm.check_fit(1, "RTX 4090").available_bytes == (24564 - 1343) * MIB
    # The article's 56 GB do not fit an A100 40GB: 56e9 - 40 GiB = 13,050,327,040 B missing.
    training = mm.training_memory(mm.uniform_model(7e9, 32), optimizer="adam")
    fit = mm.check_fit(training, "A100 40GB", reserved_bytes=0)
    assert not fit.fits and -fit.headroom_bytes == 56 * GB - 40 * GIB == 13_050_327_040
    # A CUDA context held back (about 0.3-2 GiB; Hugging Face measured 1,343 MiB on a V100, transformers docs "Model training anatomy") reduces what is available.
    assert mm.check_fit(1, "RTX 4090", reserved_bytes=GIB).available_bytes == 24564 * MIB - GIB


def test_fit_table_lists_every_card_smallest_first_with_labelled_units():
    table = mm.gpus.fit_table(56 * GB)
    assert len(table) == len(mm.GPUS) and "memory (GiB)" in table and "headroom (GiB)" in table
    assert list(table["memory (GiB)"]) == sorted(table["memory (GiB)"])
    fits = dict(zip(table["gpu"], table["fits"]))
    assert fits["A100 80GB"] and fits["H200"] and not fits["RTX 4090"]
    assert "memory (GB)" in mm.gpus.fit_table(GB, unit="GB")


def test_names_are_case_insensitive():
    assert mm.get_gpu("rtx 4090") is mm.GPUS["RTX 4090"] and mm.get_gpu(mm.GPUS["H200"]) is mm.GPUS["H200"]


@pytest.mark.parametrize("name, cc, formats", [
    # NVIDIA's compute capabilities (developer.nvidia.com/cuda-gpus): bf16 tensor cores from Ampere (8.0),
    # fp8 from Ada (8.9) and Hopper (9.0) on; Turing (T4, 7.5) and Volta (V100, 7.0) compute in fp16.
    ("T4", (7, 5), ("fp16",)), ("V100 32GB", (7, 0), ("fp16",)),
    ("A100 80GB", (8, 0), ("fp16", "bf16")), ("RTX 3090", (8, 6), ("fp16", "bf16")),
    ("RTX 4090", (8, 9), ("fp16", "bf16", "fp8")), ("L4", (8, 9), ("fp16", "bf16", "fp8")),
    ("H100 80GB", (9, 0), ("fp16", "bf16", "fp8")),
])
def test_catalog_knows_which_formats_each_card_computes_in(name, cc, formats):
    gpu = mm.get_gpu(name)
    assert gpu.compute_capability == cc and gpu.compute_formats == formats


def test_every_catalog_card_has_an_architecture():
    assert all(g.compute_capability and g.architecture for g in mm.GPUS.values())


@pytest.mark.parametrize("name", ["T4", "V100 32GB"])
def test_pure_bf16_on_a_card_without_bf16_warns_and_names_fp16_mixed_precision(name):
    warning = mm.gpus.recipe_warning("bf16", name)
    assert warning is not None and warning.needs == "bf16" and warning.instead == "mixed"
    assert name in warning.message and "fp16 mixed precision" in warning.message
    # The recipe it names runs there: its 16-bit math in fp16 with an fp32 master copy.
    assert mm.gpus.recipe_warning(warning.instead, name) is None


@pytest.mark.parametrize("precision", ["fp32", "fp16", "amp", "mixed", "mixed_fp32_grads"])
def test_recipes_that_run_in_fp16_give_no_warning_on_a_t4(precision):
    assert mm.gpus.recipe_warning(precision, "T4") is None


def test_bf16_on_ampere_and_later_gives_no_warning():
    assert all(mm.gpus.recipe_warning("bf16", g) is None for g in mm.GPUS.values() if g.compute_capability >= (8, 0))
    # A card built by hand with no capability: nothing is claimed.
    custom = mm.gpus.GPU("custom", 16 * MIB * 1024, 10**11, 10.0, "datacenter", "16 GB")
    assert mm.gpus.recipe_warning("bf16", custom) is None


def test_planner_does_not_suggest_pure_bf16_to_a_t4():
    changes = [s.change for s in mm.planner.suggest_changes("gpt2-xl", "T4", precision="mixed", optimizer="adamw")]
    assert "pure bf16 recipe" not in changes
    assert "pure bf16 recipe" in [s.change for s in mm.planner.suggest_changes("gpt2-xl", "L4", precision="mixed",
                                                                       optimizer="adamw")]
