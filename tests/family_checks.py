"""What the family tests hold every model type to, the same way: peft's adapters beside memmath's, and one CPU
prefill's working set beside memmath's (counted as validation/inference_working_set.py counts it)."""

from __future__ import annotations

import memmath as mm
from validation import houlsby

HOULSBY_BOTTLENECK = 8  # the adapters' width m in stepped_model(method="houlsby")
PEFT_NAMES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
              "down": "down_proj"}


def adapter_shapes(peft, model, config: dict, targets: str, rank: int = 4) -> tuple[list, list]:
    """(peft's trainable tensor shapes in block 0, memmath's) for LoRA of `rank` on `targets` ("all-linear", or
    memmath's names joined by "+") of `model`, built from `config`."""
    modules = "all-linear" if targets == "all-linear" else [PEFT_NAMES[t] for t in targets.split("+")]
    lora = peft.get_peft_model(model, peft.LoraConfig(r=rank, target_modules=modules, lora_alpha=8))
    theirs = [tuple(p.shape) for n, p in lora.named_parameters() if p.requires_grad and ".layers.0." in n]
    ours = []
    for _, d_in, d_out, k in mm.from_hf_config(config).lora_adapters(
            "all" if targets == "all-linear" else tuple(targets.split("+"))):
        ours += [(k * rank, d_in), (d_out, k * rank)]
    return theirs, ours


def prefill_model(torch, transformers, fields: dict, attention: str):
    """(the bf16 model `fields` describe, in eval mode, with `attention`; the storages of its weights and buffers)."""
    config = transformers.AutoConfig.for_model(fields["model_type"], **{k: v for k, v in fields.items()
                                                                        if k != "model_type"})
    config._attn_implementation = attention
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16).eval()
    return model, [t.untyped_storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())]


def prefill_working_set(torch, model, weights, fields: dict, attention: str, seq_len: int, batch: int):
    """(measured, predicted) bytes of one prefill (logits_to_keep=1, as generate runs it) beyond the weights and
    the cache it fills: the peak LiveBytes sees less memmath's cache, beside memmath's working set."""
    from validation.inference_working_set import LiveBytes

    mode = LiveBytes(weights)
    with torch.no_grad(), mode:
        model(torch.randint(0, 32000, (batch, seq_len)), use_cache=True, logits_to_keep=1)
    shape = mm.from_hf_config(fields)
    measured = mode.peak - mm.kv_cache_bytes(shape, context_len=seq_len, batch_size=batch, after_prefill=True)
    return measured, mm.inference.working_set_bytes(shape, context_len=seq_len, batch_size=batch, attention=attention)


def assert_built_like_transformers(torch, model, config: dict) -> None:
    """memmath's count, bf16 bytes and tensor shapes of `config` equal those of `model`, transformers' build of it
    in bf16 on the meta device."""
    shape = mm.from_hf_config(config)
    params = list(model.parameters())
    assert shape.n_params == sum(p.numel() for p in params)
    assert {p.dtype for p in params} == {torch.bfloat16}
    assert sum(p.numel() * p.element_size() for p in params) == 2 * shape.n_params
    ours = sorted(tuple(t.shape) for _, t, copies in shape.tensor_copies(("embeddings", "layer", "final_norm", "head"))
                  for _ in range(copies))
    assert ours == sorted(tuple(p.shape) for p in params)


def stepped_model(torch, transformers, peft, config: dict, *, precision: str, method: str, attention: str,
                  checkpointing: bool = False, lora_modules=("q_proj", "v_proj")):
    """(the model `config` describes, its blocks) as memmath.stepping steps it on the CPU: in fp32 or bf16, in train
    mode, full, with LoRA r=4 on `lora_modules` or with Houlsby adapters of bottleneck 8 after each block's attention
    and MLP projections ("houlsby", validation/houlsby.py), as validation/measure.py builds the recorded families."""
    from validation.measure import configure_torch

    configure_torch()
    hf_config = transformers.AutoConfig.for_model(config["model_type"],
                                                  **{k: v for k, v in config.items() if k != "model_type"})
    hf_config._attn_implementation = attention
    torch.manual_seed(0)
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=dtype).train()
    if checkpointing:
        model.gradient_checkpointing_enable()
    layers = model.model.layers
    if method == "lora":
        model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=lora_modules if isinstance(lora_modules, str) else list(lora_modules)))
    elif method == "houlsby":
        houlsby.insert(model, layers, config["model_type"], config["hidden_size"], HOULSBY_BOTTLENECK, dtype)
    return model, layers


def two_cpu_steps(torch, transformers, peft, config: dict, *, precision: str, method: str, attention: str,
                  checkpointing: bool = False) -> dict:
    """memmath.stepping's record of two AdamW steps, batch 2 x 64 tokens, of the model `config` describes on the CPU,
    trained in full or with LoRA r=4 on q and v (as validation/measure.py measures the recorded families)."""
    from memmath.stepping import step_twice
    from validation.measure import make_optimizer

    model, layers = stepped_model(torch, transformers, peft, config, precision=precision, method=method,
                                  attention=attention, checkpointing=checkpointing)
    params = [p for p in model.parameters() if p.requires_grad]
    ids = torch.randint(1, 512, (2, 64), generator=torch.Generator().manual_seed(1))
    return step_twice(model, make_optimizer(params, "adamw"), {"input_ids": ids, "labels": ids.clone()}, layers)


def _method(method: str):
    """memmath's method for stepped_model's `method`."""
    return {"full": mm.Full(), "lora": mm.LoRA(rank=4, targets=("q", "v")),
            "houlsby": mm.Adapters(bottleneck=HOULSBY_BOTTLENECK)}[method]


def predicted_step(shape, *, precision: str, method: str, attention: str, checkpointing: bool = False) -> tuple:
    """(the bytes memmath's exact trace saves for backward, its steady step's peak) for the two_cpu_steps run."""
    from memmath.hf_activations import activation_parts
    from memmath.recipes import get_recipe

    settings = dict(method=_method(method), seq_len=64,
                    batch_size=2, dropout=False, attention=attention, checkpointing=checkpointing, device="cpu")
    saved = activation_parts(shape, recipe=get_recipe(precision), **settings).estimate.total
    peak = mm.peak_memory(shape, precision=precision, optimizer="adamw", activations="transformers", **settings)
    return saved, peak.total


def held_for_backward(torch, transformers, peft, config: dict, *, precision: str, method: str, attention: str,
                      targets=("q_proj", "v_proj"), seq_len: int = 64) -> int:
    """Bytes autograd still holds for backward when the first forward of `config`'s model returns (b 2, s seq_len: 64
    as two_cpu_steps runs it; fp32 or bf16; LoRA r 4 on peft's target_modules `targets`): each storage a saved tensor
    keeps, once, parameters and buffers left out. Tensors autograd packs and frees before the forward returns (a
    router's group choice) are not counted, where memmath.stepping's recorder counts them as saved."""
    import itertools
    import weakref

    model, _ = stepped_model(torch, transformers, peft, config, precision=precision, method=method,
                             attention=attention, lora_modules=targets)
    excluded = {t.untyped_storage().data_ptr() for t in itertools.chain(model.parameters(), model.buffers())}
    saved = []

    def pack(t):
        saved.append(weakref.ref(t))
        return t

    ids = torch.randint(1, 512, (2, seq_len), generator=torch.Generator().manual_seed(1))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        output = model(input_ids=ids, labels=ids.clone())  # held, as a training step holds its loss
        held = {}
        for ref in saved:
            t = ref()
            if t is not None and t.untyped_storage().data_ptr() not in excluded:
                held[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    del output
    return sum(held.values())


def built_model(torch, transformers, config: dict, device: str = "meta"):
    """(transformers' config, its causal LM) of `config`, built by transformers in bf16: on the meta device, or on the
    CPU in eval mode (device="cpu", seeded)."""
    hf = transformers.AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items()
                                                                     if k != "model_type"})
    torch.manual_seed(0)
    if device == "meta":
        with torch.device("meta"):
            return hf, transformers.AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16)
    return hf, transformers.AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16).eval()


def cache_storage_bytes(torch, cache) -> int:
    """Bytes of the storages behind a filled cache's keys, values, conv states and recurrent states, each once."""
    storages = {}
    for layer in cache.layers:
        tensors = [getattr(layer, "keys", None), getattr(layer, "values", None)]
        for states in ("conv_states", "recurrent_states"):
            tensors += list((getattr(layer, states, None) or {}).values())
        storages.update({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors
                         if isinstance(t, torch.Tensor)})
    return sum(storages.values())
