"""The vision tower and projector of a vision-language model as tensors: a part of a ModelShape (models.py reads
it; multimodal.py builds it from a wrapper's config)."""

from __future__ import annotations

import functools
from dataclasses import replace

from .architectures._parts import ParamTensor
from .values import frozen


@frozen
class VisionTensors:
    """The vision tower and the projector of a vision-language model, tensor by tensor (multimodal.VisionParts adds
    what its wrapper's tables say of them).

    model_type: the wrapper's (gemma3, llava, ...); tower: the vision config's model_type; text_type: the
    text_config's. The tower is `embeddings`, then `n_blocks` copies of `block` (its names hold "{i}", the
    block's index), then `post`; `projector` follows. Tensor names are transformers' parameter names without
    the leading "model." (the order of model.parameters()). Components: "vision_tower" and "projector".
    image_tokens: tokens one image puts into the language model's sequence where the config fixes it
    (Gemma 3's mm_tokens_per_image, LLaVA's image_seq_length), else None (it follows the image's size).
    heads: the tower's attention heads (its config's num_attention_heads or num_heads; 0 where not read).
    window, full_blocks: Qwen2.5-VL's window_size (pixels; 0 for other towers) and fullatt_block_indexes (the
    blocks that attend over whole images; the others attend within windows). act: the tower's hidden_act where its
    forward's memory depends on it ("" where not read). feature_layer, projector_act: Mistral3's vision_feature_layer
    (an int; None for a list or where not read) and projector_hidden_act, and LLaVA's too with its
    vision_feature_select_strategy (select) for a Pixtral tower. attention_dropout: a SigLIP tower's (0.0 where not
    read).
    """

    model_type: str
    tower: str
    text_type: str
    n_blocks: int
    embeddings: tuple
    block: tuple
    post: tuple
    projector: tuple
    image_tokens: int | None = None
    heads: int = 0
    window: int = 0
    full_blocks: tuple = ()
    act: str = ""
    feature_layer: int | None = None
    projector_act: str = ""
    select: str = ""
    attention_dropout: float = 0.0

    @functools.cached_property
    def tensor_list(self) -> tuple:
        """Every tensor of the tower then the projector, each block's named with its index."""
        blocks = tuple(replace(t, name=t.name.format(i=i)) for i in range(self.n_blocks) for t in self.block)
        return self.embeddings + blocks + self.post + self.projector

    def tensors(self) -> list[ParamTensor]:
        """The tower's and the projector's tensors, as a new list."""
        return list(self.tensor_list)

    @functools.cached_property
    def tower_params(self) -> int:
        """Parameters of the vision tower."""
        return (sum(t.numel for t in self.embeddings + self.post)
                + self.n_blocks * sum(t.numel for t in self.block))

    @functools.cached_property
    def projector_params(self) -> int:
        """Parameters of the projector (Qwen2-VL's merger, inside its `visual` module, counts as the projector)."""
        return sum(t.numel for t in self.projector)

    @property
    def n_params(self) -> int:
        """Parameters of the tower and the projector together."""
        return self.tower_params + self.projector_params
