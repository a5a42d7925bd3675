"""The GPU catalog and the fit check."""

import pytest

import memmath as mm
from memmath_lessons.reference.literature import REPORTED

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
    # By default the card's CUDA context is reserved: an RTX 4090 is an Ada card, whose context with lazy module
    # loading was measured at 426 MiB on an RTX 6000 Ada (unslothai/unsloth-zoo pull request 1053).
    assert mm.check_fit(1, "RTX 4090").available_bytes == (24564 - 426) * MIB
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
    assert all(g.capability and g.architecture for g in mm.GPUS.values())


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
    assert all(mm.gpus.recipe_warning("bf16", g) is None for g in mm.GPUS.values() if g.computes_bf16)
    # A card built by hand with no capability: nothing is claimed.
    custom = mm.gpus.GPU("custom", 16 * MIB * 1024, 10**11, 10.0, "datacenter", "16 GB")
    assert mm.gpus.recipe_warning("bf16", custom) is None


def test_planner_does_not_suggest_pure_bf16_to_a_t4():
    changes = [s.change for s in mm.planner.suggest_changes("gpt2-xl", "T4", precision="mixed", optimizer="adamw")]
    assert "pure bf16 recipe" not in changes
    assert "pure bf16 recipe" in [s.change for s in mm.planner.suggest_changes("gpt2-xl", "L4", precision="mixed",
                                                                       optimizer="adamw")]


# ---- today's cards: each figure from the source its entry cites -----------------------------------------------------
@pytest.mark.parametrize("name, memory_bytes", [
    # nvidia-smi on a B200 (driver 580.95.05): "183359MiB" total.
    ("B200", 183_359 * MIB),
    # rocm-smi on an MI300X: "VRAM Total Memory (B): 206141652992", which is 196,592 MiB exactly.
    ("MI300X", 206_141_652_992),
    # DGX Spark: nvidia-smi prints N/A; CUDA's total is MemTotal, 127,600,748 kB = 130,663,165,952 B,
    # rounded down to whole MiB: 124,610 MiB.
    ("DGX Spark", 127_600_748 * 1024 // MIB * MIB),
    # Datasheet sizes, read in binary units as HBM and GDDR7 are built: NVIDIA HGX B300 288 GB, GB200 NVL72
    # 372 GB per two-GPU superchip, RTX PRO 6000 Blackwell 96 GB, AMD MI325X 256 GB and MI355X 288 GB.
    ("B300", 288 * GIB), ("GB200", 372 * GIB // 2), ("RTX PRO 6000", 96 * GIB),
    ("MI325X", 256 * GIB), ("MI355X", 288 * GIB),
])
def test_todays_cards_hold_what_their_source_says(name, memory_bytes):
    assert mm.get_gpu(name).memory_bytes == memory_bytes


def test_the_datasheet_sizes_are_within_half_a_percent_of_what_a_driver_reports():
    # Where both are known the driver reports a little less than the binary size on the box: an H100 81,559 of
    # 81,920 MiB, a B200 183,359 of 180 x 1,024 = 184,320 MiB, an MI300X 196,592 of 196,608. The entries taken from
    # a datasheet can overstate by that much at most, a tenth of the planner's 5% margin.
    for reported, binary in ((81_559, 81_920), (183_359, 184_320), (196_592, 196_608)):
        assert 0.994 * binary < reported <= binary


@pytest.mark.parametrize("name, bandwidth, tflops", [
    # NVIDIA datasheets: DGX B200 64 TB/s over 8 GPUs; HGX B300 8 TB/s per GPU; GB200 16 TB/s per two GPUs;
    # RTX PRO 6000 1,792 GB/s; DGX Spark 273 GB/s. AMD: MI300X 5.3 TB/s, MI325X 6 TB/s, MI355X 8 TB/s.
    # Dense 16-bit TFLOP/s: B200 72 PFLOPS fp8 sparse / 8 GPUs / 2 (dense) / 2 (16-bit) = 2,250; HGX B300
    # 36 PFLOPS 16-bit sparse / 8 / 2 = 2,250; GB200 10 PFLOPS sparse per superchip / 2 GPUs / 2 = 2,500;
    # RTX PRO 6000 4,000 fp4 TOPS sparse / 2 / 2 / 2 = 500; DGX Spark 1,000 / 8 = 125; AMD's bf16 dense figures.
    ("B200", 64e12 / 8, 72e3 / 8 / 4), ("B300", 8e12, 36e3 / 8 / 2), ("GB200", 16e12 / 2, 10e3 / 2 / 2),
    ("RTX PRO 6000", 1792e9, 4000 / 8), ("DGX Spark", 273e9, 1000 / 8),
    ("MI300X", 5.3e12, 1307.4), ("MI325X", 6e12, 1307.4), ("MI355X", 8e12, 2516.6),
])
def test_todays_cards_bandwidth_and_throughput_from_their_datasheets(name, bandwidth, tflops):
    gpu = mm.get_gpu(name)
    assert gpu.bandwidth_bytes_per_s == bandwidth and gpu.bf16_tflops == pytest.approx(tflops)


@pytest.mark.parametrize("name, architecture, capability", [
    # NVIDIA's compute capabilities: B200 and GB200 10.0, B300 10.3, RTX PRO 6000 12.0, GB10 12.1 (Blackwell).
    ("B200", "Blackwell", "compute capability 10.0"), ("GB200", "Blackwell", "compute capability 10.0"),
    ("B300", "Blackwell", "compute capability 10.3"), ("RTX PRO 6000", "Blackwell", "compute capability 12.0"),
    ("DGX Spark", "Blackwell", "compute capability 12.1"),
    # AMD: MI300X and MI325X are gfx942 (CDNA 3), MI355X gfx950 (CDNA 4); all compute bf16 and fp8.
    ("MI300X", "CDNA 3", "gfx942"), ("MI325X", "CDNA 3", "gfx942"), ("MI355X", "CDNA 4", "gfx950"),
])
def test_todays_cards_compute_bf16_and_fp8(name, architecture, capability):
    gpu = mm.get_gpu(name)
    assert (gpu.architecture, gpu.capability) == (architecture, capability)
    assert gpu.compute_formats == ("fp16", "bf16", "fp8") and gpu.note == ""  # a note flags a card without bf16
    assert mm.gpus.recipe_warning("bf16", gpu) is None


def test_cards_without_bf16_are_still_flagged():
    flagged = {g.name for g in mm.GPUS.values() if g.note}
    assert flagged == {name for name, g in mm.GPUS.items() if not g.computes_bf16} == {"T4", "V100 32GB"}


def test_the_command_line_lists_and_judges_todays_cards(capsys):
    from memmath import cli

    assert cli.main(["gpus"]) == 0
    listing = capsys.readouterr().out
    for name in ("B200", "B300", "GB200", "RTX PRO 6000", "DGX Spark", "MI300X", "MI325X", "MI355X"):
        assert name in listing
    # A full finetune of GPT-2 (124M) fits an MI300X's 192 GB; the verdict names it.
    assert cli.main(["train", "gpt2", "--seq", "512", "--gpu", "mi300x"]) == 0
    assert "MI300X" in capsys.readouterr().out


def test_the_lessons_gpu_table_takes_todays_cards():
    table = mm.gpus.fit_table(100 * GB)
    fits = dict(zip(table["gpu"], table["fits"]))
    assert fits["B200"] and fits["MI355X"] and not fits["RTX 4090"]
    assert table["gpu"].iloc[-1] in ("B300", "MI355X")  # the two largest: 288 GiB each


# ---- the CUDA context reserve: by card family, CUDA version and module loading ----------------------------
def _reported_mib(key):
    figure = REPORTED[key]
    assert figure.unit == "MiB"
    return int(figure.value) * MIB


@pytest.mark.parametrize("name, key", [
    # Ada: measured on an RTX 6000 Ada (142 SMs, as many as any Ada card, so its context bounds the family's)
    ("RTX 4090", "cuda_context_rtx6000ada_lazy"), ("RTX 4080", "cuda_context_rtx6000ada_lazy"),
    ("L4", "cuda_context_rtx6000ada_lazy"), ("L40S", "cuda_context_rtx6000ada_lazy"),
    # Ampere GA10x (compute capability 8.6): measured on an RTX 3090
    ("RTX 3090", "cuda_context_rtx3090_lazy"), ("RTX 3060", "cuda_context_rtx3090_lazy"),
    ("A10G", "cuda_context_rtx3090_lazy"), ("RTX A6000", "cuda_context_rtx3090_lazy"),
    # no public lazy measurement: the V100's eager context, a conservative bound (Hugging Face, Model training anatomy)
    ("V100 32GB", "cuda_context_v100"), ("T4", "cuda_context_v100"), ("A100 80GB", "cuda_context_v100"),
    ("H100 80GB", "cuda_context_v100"), ("H200", "cuda_context_v100"), ("B300", "cuda_context_v100"),
    ("RTX 5090", "cuda_context_v100"), ("MI300X", "cuda_context_v100"),
    # B200 and GB200 (compute capability 10.0): measured on a B200
    ("B200", "cuda_context_b200_lazy"), ("GB200", "cuda_context_b200_lazy"),
])
def test_the_default_reserve_is_the_cards_measured_cuda_context(name, key):
    gpu = mm.get_gpu(name)
    assert gpu.cuda_context_bytes == _reported_mib(key)
    assert mm.check_fit(1, gpu).reserved_bytes == _reported_mib(key)
    assert mm.check_fit(1, gpu, reserved_bytes=0).reserved_bytes == 0  # still overridable


def test_eager_loading_or_a_cuda_before_lazy_loading_reserves_the_eager_context():
    cuda_context_bytes = mm.cuda_context_bytes

    # Lazy loading needs a CUDA 11.7 runtime (NVIDIA, CUDA C++ Programming Guide, Lazy Loading): before it, or with
    # CUDA_MODULE_LOADING=EAGER, every kernel is loaded. An RTX 3090's eager context: 1,687 MiB (pytorch issue 55277).
    first_lazy = REPORTED["cuda_lazy_loading_runtime"].value
    assert first_lazy == 11.7
    assert cuda_context_bytes("RTX 3090", cuda_version=(11, 6)) == _reported_mib("cuda_context_rtx3090_eager")
    assert cuda_context_bytes("RTX 3090", module_loading="eager") == _reported_mib("cuda_context_rtx3090_eager")
    assert cuda_context_bytes("RTX 3090", cuda_version=(11, 7)) == _reported_mib("cuda_context_rtx3090_lazy")
    assert cuda_context_bytes("RTX 3090", cuda_version=(12, 8), module_loading="LAZY") == \
        _reported_mib("cuda_context_rtx3090_lazy")
    # The V100's eager context is the one Hugging Face measured; a card with no eager measurement takes the largest
    # measured (the RTX 3090's), a conservative bound.
    assert cuda_context_bytes("V100 32GB", module_loading="eager") == _reported_mib("cuda_context_v100")
    assert cuda_context_bytes("H100 80GB", module_loading="eager") == _reported_mib("cuda_context_rtx3090_eager")
    # Lazy loading never reserves more than eager loading on the same card.
    for gpu in mm.GPUS.values():
        assert cuda_context_bytes(gpu) <= cuda_context_bytes(gpu, module_loading="eager"), gpu.name


def test_every_reserve_names_its_source():
    from memmath.gpus import cuda_context_source

    for gpu in mm.GPUS.values():
        for loading in ("lazy", "eager"):
            words = cuda_context_source(gpu, module_loading=loading)
            assert gpu.name in words and loading in words and "MiB" in words, words
    assert "unsloth-zoo pull request 1053" in cuda_context_source("RTX 4090")
    assert "conservative" in cuda_context_source("H100 80GB")


@pytest.mark.parametrize("kwargs, field", [
    (dict(module_loading="sometimes"), "module_loading"), (dict(cuda_version=(12,)), "cuda_version"),
    (dict(cuda_version="12.8"), "cuda_version"), (dict(cuda_version=(12, -1)), "cuda_version"),
])
def test_a_bad_cuda_setting_is_refused_by_name(kwargs, field):
    from memmath.gpus import cuda_context_bytes

    with pytest.raises(ValueError, match=field):
        cuda_context_bytes("RTX 4090", **kwargs)


def test_a_card_of_unknown_family_keeps_the_conservative_reserve():
    card = mm.gpus.GPU("my card", 24 * GIB, 10**12, 100.0, "custom", "24 GB")
    assert card.cuda_context_bytes == mm.CUDA_CONTEXT_BYTES == _reported_mib("cuda_context_v100")
