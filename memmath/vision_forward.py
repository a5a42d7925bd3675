"""The working memory of a frozen vision tower's forward: the most it allocates at one moment over what was alive when
it began, for the towers whose forward memmath models (Gemma 3's SigLIP, LLaVA's CLIP, Qwen2-VL's, Qwen2.5-VL's,
Pixtral under Mistral3 and LLaVA).

A frozen tower and projector (requires_grad False) given pixels that need no gradient record nothing for backward,
so each intermediate dies when its last Python reference does, as under no_grad. Each moment below lists what
transformers 5.24's modeling code holds at it (modeling_siglip.py, modeling_gemma3.py get_image_features,
modeling_qwen2_vl.py), in the tower's element size `e` (its weights'):

SigLIP (I images of n patches, width h, MLP width f, H heads):
    patches    a copy of the pixels in the tower's dtype (SiglipVisionEmbeddings: pixel_values.to(weight dtype), none
               in fp32), the convolution's unfolded input on the CPU (im2col: the pixels' size again, in e) and its
               output, I n h
    attention  the embeddings' output (held by the vision transformer while its encoder runs), the block's input,
               layer_norm1's output, q, k and v: 6 I n h; eager adds the scores over every image at once,
               I H n^2 x (e + 4, plus 4 for the fp32 copy softmax(dtype=float32) makes of a 16-bit input); SDPA
               adds its output and the contiguous transpose or out_proj's output (2 I n h) and the log-sum-exp
               (I H n, fp32)
    MLP        the embeddings' output, the block's input, the residual after attention, layer_norm2's output:
               4 I n h (3 in the first block, whose input is the embeddings' output); fc1's and the GELU's outputs,
               2 I n f; under eager also the probabilities the attention returned (I H n^2 x e), which the
               layer holds until it returns
CLIP under LLaVA (as SigLIP, over N = I (n + 1) tokens with the class token; the projector reads the second-to-last
layer's patches, LlavaConfig's default):
    patches    as SigLIP's; then the patches, the class token joined to them (N h), the position rows ((n + 1) h)
               and their sum (N h)
    attention  as SigLIP's, pre_layrnorm's output in place of the embeddings' output
    MLP        as SigLIP's with quick_gelu (fc1's output, 1.702 x and its sigmoid: 3 N f)
    projector  the tower's last and selected layers (2 N h), its pooled class tokens (I h), linear_1's and
               the GELU's outputs (2 I n x the text width)
Qwen2-VL (N patches in images of n_1..n_k patches, width c, MLP width f, H heads of width d, pixel rows of R values,
merge m):
    held       the pixels in the tower's dtype (get_image_features: pixel_values.type(visual.dtype); none in fp32),
               the position ids (N x 2, int64), rotary cos and sin (N x d each, fp32), cu_seqlens, and the block's
               input N c (the vision model's loop holds it while the block runs)
    patches    the pixels' copy, the Conv3d's unfolded input on the CPU (N R in e) and its output N c
    rotary     norm1's output and qkv (4 N c), apply_rotary_pos_emb_vision's fp32 q and k (2 N c x 4, none in fp32)
               and four fp32 temporaries of N c
    attention  norm1's output, qkv, the rotated q and k (6 N c); each image apart (no mask, one chunk at a time):
               eager adds the chunk's scores H n^2 x (e + 4, plus 4 from a 16-bit input), SDPA its output and
               log-sum-exp; the earlier chunks' outputs wait for the concatenation; the chunk lengths (int32); at
               proj, the chunks' outputs, their concatenation and proj's output (3 N c; found by a held-out case)
    MLP        the residual after attention and norm2's output (2 N c), fc1's output, 1.702 x and its sigmoid
               (quick_gelu): 3 N f
    merger     ln_q's output N c, then mlp.0's and the GELU's outputs (2 N c) or the GELU's and mlp.2's
               (N c + N / m^2 x out)
Qwen2.5-VL (modeling_qwen2_5_vl.py Qwen2_5_VisionTransformerPretrainedModel.forward, vision_utils.py; as Qwen2-VL's
with M = N / m^2 merged patches and windows of w = window_size // m // patch_size merged patches a side):
    held       as Qwen2-VL's, and get_vision_window_index's window_index (M, int64) and cu_window_seqlens (int32:
               torch.unique_consecutive's output keeps the storage of its input, one entry per window, empty ones too
               (each side padded by w - (side % w)), and one)
    patches    the pixels' copy, the Conv3d's unfolded input (N R in e) and its output N c; then
               permute_input_for_window_attn's copy of it (2 N c)
    rotary     as Qwen2-VL's (Qwen2_5_VLVisionAttention: qkv, apply_rotary_pos_emb_vision's fp32 q and k)
    attention  as Qwen2-VL's, chunk by chunk: the images (t frames each) in fullatt_block_indexes' blocks, the
               non-empty windows in the others (cu_window_seqlens), their lengths (int32) held; eager's scores as
               _scores gives them (in fp32 the scaling's moment, 12 B over softmax's: found by a held-out Pixtral
               case, and the same code here)
    MLP        the residual after attention and norm2's output (2 N c); Qwen2_5_VLMLP: silu(gate_proj), up_proj and
               their product, 3 N f (gate_proj's output dies with the silu)
    merger     torch.argsort(window_index)'s M int64 held from here; ln_q (Qwen2_5_VLRMSNorm) in fp32: its input's
               fp32 copy (none in fp32), x^2 or x * rsqrt, its variance and rsqrt (N, fp32) and its output; ln_q's
               output stays alive through the merger's mlp (nn.Sequential's argument), with mlp.0's and the GELU's
               outputs (3 N c) or the GELU's and mlp.2's (N c + M out); then mlp.2's output and its re-ordered copy
               (2 M out)
    RMSNorm's fp32 moments inside the blocks (norm1, norm2) are below the rotary moment's (4 N c e + 4 N c x 4 over
    the same held tensors), and the rotary tables' (4 N d fp32 at most) below the attention's.
Pixtral under Mistral3 (modeling_pixtral.py PixtralVisionModel.forward, modeling_mistral3.py get_image_features and
Mistral3MultiModalProjector; B images of h_i x w_i patches padded to the largest, N patches in all, width c, MLP width
f, H heads of width d, L layers, merge m, text width t; the projector reads the last layer, vision_feature_layer -1):
    patches    the pixels' copy in e (none in fp32) and the Conv2d's unfolded input over the padded batch, and its
               output B c h_max w_max, held through the tower (patch_embeds_list's views of it); the flattened images
               (a copy of each image not contiguous in the padded output) and their concatenation N c; ln_pre
               (PixtralRMSNorm) over it
    held       ln_pre's output N c, the position ids (N x 2, int64), the last image's aranges (the loop's meshgrid
               variables, int64), cos and sin (N x d each, in e: the rotary embedding casts them) and the
               block-diagonal mask N^2 in e (generate_block_attention_mask; expand makes no copy); from the second
               layer on, the layer's input N c
    rotary     attention_norm's output, q, k and v, and apply_rotary_pos_emb's q_embed and k's four temporaries in e:
               8 N c
    attention  the norm's output, q_embed, k_embed and v (4 N c); eager adds the scores over every image at once
               (H N^2 x (e + 4, plus 4 from a 16-bit input), or in fp32 the scaling's moment, 12 B more: _scores),
               then the output and its transpose's copy or o_proj's
               (2 N c) beside the probabilities, which the layer holds (`_`) until it returns (H N^2 e); SDPA (torch's
               CPU flash-attention kernel, which takes the mask) its output N c, log-sum-exp H N fp32 and the
               kernel's scratch (_cpu_flash_scratch; on a GPU its kernels' workspace differs)
    MLP        the residual and ffn_norm's output (2 N c; ffn_norm's own moment too) and act(gate_proj), up_proj and
               their product (3 N f); eager's probabilities
    projector  the last layer's output N c: Mistral3RMSNorm over it; then its output, the patch merger's image sizes
               (three 0-dim int64 an image), the unfolded grids (m^2 c a token, held in their list), their
               concatenation and merging_layer's output T c (T tokens); then linear_1's, the GELU's and linear_2's
               outputs, two at a time (2 T t), beside merging_layer's
Pixtral under LLaVA (modeling_llava.py get_image_features, LlavaMultiModalProjector): the same tower over images of
the config's size, then the last layer's output and the selected one where it is another (hidden_states keeps it),
and linear_1's, the GELU's and linear_2's outputs two at a time over every patch ("default" crops the first of the
whole batch's sequence); the bound takes each patch as an image token (vision_feature_select_strategy "full").
Measured on the CPU by validation/vision_forward.py (the cases it holds out were recorded after this model).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from . import validate

MODELLED_TOWERS = ("siglip_vision_model", "clip_vision_model", "qwen2_vl_vision", "qwen2_5_vl_vision", "pixtral")
FIXED_SIZE = ("siglip_vision_model", "clip_vision_model")  # every image the config's image_size
INT64, FP32 = 8, 4


def _shape(tensors, suffix: str) -> tuple:
    return next(t.shape for t in tensors if t.name.endswith(suffix))


def _softmax_bytes(e: int) -> int:
    """Bytes per attention score at eager's softmax: the scaled scores (e), softmax's fp32 output, and the fp32 copy
    softmax(dtype=float32) makes of a 16-bit input first."""
    return e + FP32 + (FP32 if e != FP32 else 0)


def siglip_forward(parts, images: int, e: int, attention: str) -> int:
    """Working bytes of a SigLIP tower's forward over `images` images (each its position table's patches)."""
    images = validate.count("images", images, low=0)
    if images == 0:
        return 0
    h, c, p, _ = _shape(parts.embeddings, "patch_embedding.weight")
    n = _shape(parts.embeddings, "position_embedding.weight")[0]
    f = _shape(parts.block, "mlp.fc1.weight")[0]
    pixels = images * c * n * p * p  # (I, c, S, S) with S = sqrt(n) p
    tokens = images * n
    patches = (pixels * e if e != FP32 else 0) + pixels * e + tokens * h * e
    if attention == "eager":
        attn = 6 * tokens * h * e + images * parts.heads * n * n * _softmax_bytes(e)
    else:
        attn = 8 * tokens * h * e + images * parts.heads * n * FP32
    # eager's probabilities, which SiglipAttention returns and the encoder layer holds (`_`) until it returns
    held = images * parts.heads * n * n * e if attention == "eager" else 0
    mlp = (4 if parts.n_blocks > 1 else 3) * tokens * h * e + 2 * tokens * f * e + held
    return max(patches, attn, mlp)


def clip_forward(parts, images: int, e: int, attention: str) -> int:
    """Working bytes of LLaVA's CLIP tower and projector over `images` images (each its position table's patches and
    the class token), the projector reading the second-to-last layer's patches (LlavaConfig's defaults)."""
    images = validate.count("images", images, low=0)
    if images == 0:
        return 0
    h, c, p, _ = _shape(parts.embeddings, "patch_embedding.weight")
    n = _patches(parts)
    f = _shape(parts.block, "mlp.fc1.weight")[0]
    text = _shape(parts.projector, "linear_1.weight")[0]
    pixels = images * c * n * p * p
    tokens = images * (n + 1)
    patches = (pixels * e if e != FP32 else 0) + pixels * e + images * n * h * e
    # the patches, the class token joined to them, the position rows and their sum
    embeddings = images * n * h * e + 2 * tokens * h * e + (n + 1) * h * e
    scores = images * parts.heads * (n + 1) ** 2
    if attention == "eager":
        attn = 6 * tokens * h * e + scores * _softmax_bytes(e)
    else:
        attn = 8 * tokens * h * e + images * parts.heads * (n + 1) * FP32
    held = scores * e if attention == "eager" else 0
    mlp = (4 if parts.n_blocks > 1 else 3) * tokens * h * e + 3 * tokens * f * e + held
    # the tower's last and selected layers, its pooled class tokens, linear_1's and the GELU's outputs (linear_1
    # reads the selected patches, a strided view, without a copy: a held-out case measured it)
    projector = 2 * tokens * h * e + images * h * e + 2 * images * n * text * e
    return max(patches, embeddings, attn, mlp, projector)


def qwen2_vl_forward(parts, chunks, e: int, attention: str) -> int:
    """Working bytes of a Qwen2-VL tower's forward over images of `chunks` patches each."""
    chunks = [validate.count("patches", n, low=1) for n in chunks]
    if not chunks:
        return 0
    width, c, tp, p, _ = _shape(parts.embeddings, "patch_embed.proj.weight")
    f = _shape(parts.block, "mlp.fc1.weight")[0]
    merged = _shape(parts.projector, "mlp.0.weight")[0]
    out = _shape(parts.projector, "mlp.2.weight")[0]
    merge2 = merged // width
    d = width // parts.heads
    n_all, rows = sum(chunks), c * tp * p * p
    copy = n_all * rows * e if e != FP32 else 0
    held = copy + n_all * 2 * INT64 + 2 * n_all * d * FP32 + (len(chunks) + 1) * FP32 + n_all * width * e
    patches = copy + n_all * rows * e + n_all * width * e + n_all * 2 * INT64 + (len(chunks) + 1) * FP32
    rotary = held + 4 * n_all * width * e + n_all * width * FP32 * (4 + (2 if e != FP32 else 0))
    attn = held + 6 * n_all * width * e + len(chunks) * FP32 + max(  # the chunk lengths, then chunk by chunk
        (parts.heads * n * n * _softmax_bytes(e) if attention == "eager" else n * width * e + parts.heads * n * FP32)
        + sum(chunks[:k]) * width * e for k, n in enumerate(chunks))
    # then proj: the chunks' outputs (held in their list), their concatenation and proj's output, 3 N c
    attn = max(attn, held + 9 * n_all * width * e + len(chunks) * FP32)
    mlp = held + 2 * n_all * width * e + 3 * n_all * f * e
    merger = held + 2 * n_all * width * e + max(n_all * width, n_all // merge2 * out) * e
    return max(patches, rotary, attn, mlp, merger)


def windows(parts, grid) -> tuple[list, int]:
    """(the patches of each non-empty window of one image's grid (t, h, w), in attention order; the windows counted
    with the empty ones), as vision_utils.get_vision_window_index cuts a Qwen2.5-VL image."""
    t, h, w = grid
    m = _merge(parts)
    p = _shape(parts.embeddings, "patch_embed.proj.weight")[-1]
    side = parts.window // m // p
    rows, cols = h // m, w // m
    # each side padded by side - (rows % side): a whole empty window where the side divides it
    across, down = (cols + side - cols % side) // side, (rows + side - rows % side) // side
    sizes = [min(side, rows - i * side) * min(side, cols - j * side) * m * m
             for i in range(down) for j in range(across)]
    return [n for n in sizes if n > 0] * t, t * across * down


def qwen2_5_vl_forward(parts, grids, e: int, attention: str) -> int:
    """Working bytes of a Qwen2.5-VL tower's forward over images of the grids (t, h, w) (patches a side, as
    image_grid_thw gives them)."""
    grids = [tuple(validate.count("patches", n, low=1) for n in g) for g in grids]
    if not grids:
        return 0
    width, c, tp, p, _ = _shape(parts.embeddings, "patch_embed.proj.weight")
    f = _shape(parts.block, "mlp.gate_proj.weight")[0]
    merge2 = _shape(parts.projector, "mlp.0.weight")[0] // width
    out = _shape(parts.projector, "mlp.2.weight")[0]
    d = width // parts.heads
    shapes = set(grids)
    cut = {g: windows(parts, g) for g in shapes}
    n_all, rows = sum(t * h * w for t, h, w in grids), c * tp * p * p
    frames = sum(g[0] for g in grids)  # each frame its own chunk (get_vision_cu_seqlens)
    merged = n_all // merge2
    copy = n_all * rows * e if e != FP32 else 0
    # the pixels' copy, position ids, cu_seqlens, window_index and cu_window_seqlens
    index = copy + n_all * 2 * INT64 + (frames + 1) * FP32 + merged * INT64 + (sum(cut[g][1] for g in grids) + 1) * FP32
    patches = index + max(n_all * rows * e + n_all * width * e, 2 * n_all * width * e)
    held = index + 2 * n_all * d * FP32 + n_all * width * e  # the rotary tables and the block's input
    rotary = held + 4 * n_all * width * e + n_all * width * FP32 * (4 + (2 if e != FP32 else 0))

    def fullest(chunks):  # (the most one image's chunks reach, each beside the image's earlier outputs; its patches)
        earlier = [0] + list(itertools.accumulate(chunks))
        return max((_scores(parts.heads, n, e) if attention == "eager" else
                    n * width * e + parts.heads * n * FP32) + earlier[k] * width * e
                   for k, n in enumerate(chunks)), earlier[-1]

    def attend(table, count):  # one block's attention (as Qwen2-VL's), the earlier images' outputs held too
        chunk = before = 0
        for g in grids:
            top, n = table[g]
            chunk, before = max(chunk, before * width * e + top), before + n
        return held + 6 * n_all * width * e + count * FP32 + max(chunk, 3 * n_all * width * e)

    blocks = set(range(parts.n_blocks))
    attn = []
    if blocks & set(parts.full_blocks):
        attn.append(attend({g: fullest([g[1] * g[2]] * g[0]) for g in shapes}, frames))
    if blocks - set(parts.full_blocks):
        attn.append(attend({g: fullest(cut[g][0]) for g in shapes}, sum(len(cut[g][0]) for g in grids)))
    attn = max(attn)
    mlp = held + 2 * n_all * width * e + 3 * n_all * f * e
    merger = held + merged * INT64 + max(_norm(n_all, width, e), 3 * n_all * width * e,
                                         2 * n_all * width * e + merged * out * e, 2 * merged * out * e)
    return max(patches, rotary, attn, mlp, merger)


def _scores(heads: int, n: int, e: int) -> int:
    """Bytes of eager attention's scores over n positions at their fullest: softmax's moment (_softmax_bytes), or
    `matmul(q, k^T) * scaling`'s, the product and its scaled copy beside the Python float wrapped as an 8 B tensor and
    its copy in e, which in fp32 ties softmax's two tensors and so passes it by 12 B (a held-out Pixtral case)."""
    return max(heads * n * n * _softmax_bytes(e), 2 * heads * n * n * e + INT64 + e)


def _norm(rows: int, width: int, e: int) -> int:
    """The most an RMSNorm over rows x width allocates beyond its input (Qwen2_5_VLRMSNorm, PixtralRMSNorm,
    Mistral3RMSNorm): in 16 bits, the fp32 copy, its variance, rsqrt and their product; in fp32 (no copy) the product,
    the variance and the output."""
    return 2 * rows * width * FP32 + (2 if e != FP32 else 1) * rows * FP32


def _cpu_flash_scratch(n: int, d: int, e: int) -> int:
    """The scratch of torch's CPU flash-attention kernel (ATen native/cpu/FlashAttentionKernel.cpp cpu_flash_attention,
    one thread as measured): per thread, qk, its max and sum and an output tile in fp32 (qSplit x kvSplit + 2 qSplit +
    qSplit x head width), and in 16 bits the qk tile in e; qSplit 32, 64 from 192 rows, 256 from 768, kvSplit 512, each
    at most n."""
    q = min(n, 256 if n >= 768 else 64 if n >= 192 else 32)
    kv = min(n, 512)
    return (q * kv + 2 * q + q * d) * FP32 + (q * kv * e if e != FP32 else 0)


def pixtral_forward(parts, sizes, e: int, attention: str) -> int:
    """Working bytes of a Pixtral tower and its projector over images of `sizes` (height, width) patches, padded to
    the largest in one batch of pixels (the processor's): Mistral3's, reading the last layer (vision_feature_layer
    -1), or LLaVA's (its vision_feature_layer and vision_feature_select_strategy)."""
    sizes = [tuple(validate.count("patches", n, low=1) for n in hw) for hw in sizes]
    if not sizes:
        return 0
    c, channels, p, _ = _shape(parts.embeddings, "patch_conv.weight")
    f = _shape(parts.block, "feed_forward.gate_proj.weight")[0]
    text = _shape(parts.projector, "linear_1.weight")[0]
    m = _merge(parts)
    d, heads = c // parts.heads, parts.heads
    images, tall, wide = len(sizes), max(h for h, _ in sizes), max(w for _, w in sizes)
    n = sum(h * w for h, w in sizes)
    conv = images * c * tall * wide * e  # held through the tower: patch_embeds_list's views of it
    pixels = images * channels * tall * p * wide * p
    patches = (pixels * e if e != FP32 else 0) + pixels * e + conv  # the pixels' copy, the unfolded input (im2col)
    # flatten(1) copies an image whose patches are not contiguous in the padded output, then the concatenation
    cat = conv + sum(h * w * c * e for h, w in sizes if w != wide and h > 1) + n * c * e
    ln_pre = conv + n * c * e + _norm(n, c, e)
    # ln_pre's output, the position ids, the last image's aranges (the loop's variables), cos and sin (in e) and the
    # block-diagonal mask over every image's patches
    base = conv + n * c * e + n * 2 * INT64 + (sizes[-1][0] + sizes[-1][1]) * INT64 + 2 * n * d * e + n * n * e
    probs = heads * n * n * e if attention == "eager" else 0  # the layer holds what the attention returns
    moments = [patches, cat, ln_pre]
    for k in range(parts.n_blocks):
        block = base + (n * c * e if k else 0)  # the layer's input, beside ln_pre's output
        moments.append(block + 8 * n * c * e)  # norm, q, k, v, and apply_rotary_pos_emb's q_embed and k's four
        if attention == "eager":
            moments.append(block + 4 * n * c * e + _scores(heads, n, e))
            moments.append(block + 6 * n * c * e + probs)  # the output, its transpose's copy or o_proj's
        else:
            moments.append(block + 5 * n * c * e + heads * n * FP32 + _cpu_flash_scratch(n, d, e))
        moments.append(block + probs + n * c * e + _norm(n, c, e))  # ffn_norm over the residual
        moments.append(block + probs + 2 * n * c * e + 3 * n * f * e)  # act(gate), up and their product
    # the projector: the last layer's output, Mistral3RMSNorm; the patch merger's image_sizes (three 0-dim int64
    # each), its unfolded grids (m^2 patches a token), their concatenation and merging_layer's output; linear_1,
    # the GELU and linear_2
    if parts.model_type == "llava":
        # LLaVA: the selected layer's output beside the last's where it is another (hidden_states keeps it), and
        # linear_1's, the GELU's and linear_2's outputs, two at a time, over its patches ("default" crops the first
        # of the whole sequence: Pixtral's batch is one sequence)
        selected = n * c * e if parts.feature_layer not in (-1, parts.n_blocks) else 0
        kept = n - 1 if parts.select == "default" else n
        return max(moments + [n * c * e + selected + 2 * kept * text * e])
    tokens = sum((h // m) * (w // m) for h, w in sizes)
    grids = tokens * m * m * c * e
    moments += [n * c * e + _norm(n, c, e),
                n * c * e + n * c * e + 2 * grids + tokens * c * e + 3 * INT64 * images,
                n * c * e + tokens * c * e + 2 * tokens * text * e]
    return max(moments)


def _patches(parts) -> int:
    """Patches of one image of a SigLIP or CLIP tower: its position table's rows (CLIP's has the class token's too)."""
    rows = _shape(parts.embeddings, "position_embedding.weight")[0]
    return rows - 1 if parts.tower == "clip_vision_model" else rows


def pixel_bytes(parts, images_or_chunks) -> int:
    """The processor's fp32 pixels for the tower's images (part of the batch; Pixtral's images all of one size, so
    none padded)."""
    if parts.tower in FIXED_SIZE:
        _, c, p, _ = _shape(parts.embeddings, "patch_embedding.weight")
        return images_or_chunks * c * _patches(parts) * p * p * FP32
    if parts.tower == "pixtral":
        _, c, p, _ = _shape(parts.embeddings, "patch_conv.weight")
        return sum(images_or_chunks) * c * p * p * FP32
    _, c, tp, p, _ = _shape(parts.embeddings, "patch_embed.proj.weight")
    return sum(images_or_chunks) * c * tp * p * p * FP32


def batch_extras(parts, batch: int, seq_len: int) -> int:
    """Bytes a vision-language step holds throughout beyond the text model's batch and buffers, at the most images
    the batch can hold (worst_images): the processor's fp32 pixels, its per-token type ids (Gemma 3's token_type_ids,
    int64; Qwen2-VL's mm_token_type_ids, int32) and Qwen2-VL's image grid rows (3 int64 each), and the tower's
    buffers (SigLIP's position_ids, int64 per patch; Qwen2-VL's rotary inv_freq and original_inv_freq, head_dim / 4
    fp32 each)."""
    images = worst_images(parts, batch, seq_len)
    tokens = batch * seq_len
    if parts.tower == "clip_vision_model":  # LLaVA: no type ids; CLIP's position_ids cover the class token too
        return pixel_bytes(parts, images) + _patches(parts) * INT64 + INT64
    if parts.tower == "siglip_vision_model":
        return pixel_bytes(parts, images) + tokens * INT64 + _patches(parts) * INT64
    if parts.tower == "pixtral":  # the processor's image_sizes (2 int64 an image); the rotary inv_freq and its original
        width = _shape(parts.embeddings, "patch_conv.weight")[0]
        return pixel_bytes(parts, images) + 2 * INT64 * len(images) + 2 * (width // parts.heads // 2) * FP32
    width = _shape(parts.embeddings, "patch_embed.proj.weight")[0]
    return (pixel_bytes(parts, images) + tokens * 4 + 3 * INT64 * len(images)
            + 2 * (width // parts.heads // 4) * FP32)


def worst_images(parts, batch: int, seq_len: int):
    """The images a batch of `batch` sequences of `seq_len` tokens can hold at most, where every token is an image
    token: Gemma 3's or LLaVA's whole images of image_tokens tokens (an int), or for Qwen2-VL one image per sequence of
    merge^2 x seq_len patches (its tokens are its patches over merge^2: the largest attention a sequence allows;
    Qwen2.5-VL's and Mistral3's too, whose [IMG_BREAK] and [IMG_END] tokens would only leave fewer)."""
    if parts.tower in FIXED_SIZE:
        return batch * (seq_len // parts.image_tokens)
    return [_merge(parts) ** 2 * seq_len] * batch


def images_known(parts) -> bool:
    """Whether memmath knows the pixels and buffers a batch holds for this tower's images (batch_extras): SigLIP under
    Gemma 3, CLIP under LLaVA, Qwen2-VL's and Qwen2.5-VL's towers (the same pixel rows, type ids and rotary tables),
    Pixtral under Mistral3 or LLaVA."""
    return (parts.model_type, parts.tower) in (("gemma3", "siglip_vision_model"), ("llava", "clip_vision_model"),
                                               ("qwen2_vl", "qwen2_vl_vision"), ("qwen2_5_vl", "qwen2_5_vl_vision"),
                                               ("mistral3", "pixtral"), ("llava", "pixtral"))


def modelled(parts) -> bool:
    """Whether memmath models this tower's forward (MODELLED_TOWERS, inside their wrappers: gemma3, llava, qwen2_vl,
    qwen2_5_vl, mistral3; LLaVA's projector reading one feature layer; Qwen2.5-VL's MLP with silu, its default, and a
    head width that its rotary tables cover, a multiple of 4; Pixtral as pixtral_unmeasured says)."""
    one_layer = parts.tower != "clip_vision_model" or (
        _shape(parts.projector, "linear_1.weight")[1] == _shape(parts.embeddings, "patch_embedding.weight")[0])
    qwen2_5 = parts.tower != "qwen2_5_vl_vision" or (
        parts.act == "silu" and parts.heads > 0
        and (_shape(parts.embeddings, "patch_embed.proj.weight")[0] // parts.heads) % 4 == 0)
    return images_known(parts) and parts.heads > 0 and one_layer and qwen2_5 and not pixtral_unmeasured(parts) \
        and parts.tower in MODELLED_TOWERS


def pixtral_unmeasured(parts) -> str:
    """What of a Pixtral tower its forward was not measured with, in words ("" for none, or another tower): gelu or
    silu in the tower's MLP (one tensor each), gelu in the projector (the defaults), the last layer's patches under
    Mistral3 (vision_feature_layer -1), the last or second-to-last under LLaVA with each patch a token
    ("full"), and a head width its 2D rotary tables cover (a multiple of 4)."""
    if parts.tower != "pixtral":
        return ""
    width = _shape(parts.embeddings, "patch_conv.weight")[0]
    why = [f"vision_config.hidden_act {parts.act!r} (gelu and silu are measured)"] * (parts.act not in ("gelu", "silu"))
    why += [f"projector_hidden_act {parts.projector_act!r} (gelu is measured)"] * (parts.projector_act != "gelu")
    if parts.model_type == "llava":  # -2 (LlavaConfig's) and -1 are measured
        why += ["a vision_feature_layer other than -1 or -2"] * (parts.feature_layer not in (-1, -2))
        # "default" crops the first patch of the whole batch (Pixtral's batch is one sequence), so image tokens are
        # not whole images' patches
        why += [f"vision_feature_select_strategy {parts.select!r} (\"full\" is modelled)"] * (parts.select != "full")
    else:
        why += ["a vision_feature_layer other than -1"] * (parts.feature_layer != -1)
    why += ["a head width not a multiple of 4"] * (not parts.heads or (width // parts.heads) % 4 != 0)
    return "; ".join(why)


def tower_forward(parts, batch: int, seq_len: int, e: int, attention: str) -> int:
    """Working bytes of the tower's forward at the most images the batch can hold (a tower that `modelled`)."""
    images = worst_images(parts, batch, seq_len)
    if parts.tower == "siglip_vision_model":
        return siglip_forward(parts, images, e, attention)
    if parts.tower == "clip_vision_model":
        return clip_forward(parts, images, e, attention)
    if parts.tower == "qwen2_5_vl_vision":
        return max(qwen2_5_vl_forward(parts, [grid] * batch, e, attention) for grid in worst_grids(parts, seq_len))
    if parts.tower == "pixtral":  # every other term is the same for any shape; a strip's aranges are the longest
        m = _merge(parts)
        return pixtral_forward(parts, [(m, m * seq_len)] * batch, e, attention)
    return qwen2_vl_forward(parts, images, e, attention)


def worst_grids(parts, seq_len: int) -> list:
    """Every grid (1, h, w) of one Qwen2.5-VL image of seq_len merged tokens ((h / m) (w / m) = seq_len): its window
    attention's chunks follow the image's shape, so the bound takes the largest over them."""
    m = _merge(parts)
    small = [a for a in range(1, int(seq_len ** 0.5) + 1) if seq_len % a == 0]
    return [(1, m * a, m * b) for a in small for b in {seq_len // a} for a, b in ((a, b), (b, a))]


def _merge(parts) -> int:
    """The spatial_merge_size m of Qwen2-VL's and Qwen2.5-VL's merger (its mlp.0 reads m^2 patches of the tower's
    width) or of Mistral3's patch merger (its merging_layer does)."""
    if parts.tower == "pixtral" and parts.model_type == "llava":
        return 1  # LLaVA's projector takes each patch as a token
    if parts.tower == "pixtral":
        merge2 = _shape(parts.projector, "merging_layer.weight")[1] // _shape(parts.embeddings, "patch_conv.weight")[0]
    else:
        merge2 = _shape(parts.projector, "mlp.0.weight")[0] // _shape(parts.embeddings, "patch_embed.proj.weight")[0]
    return int(round(merge2 ** 0.5))


# The towers whose projector's tensors projector_tensors counts (Gemma 3's SigLIP projector, Qwen2-VL's and
# Qwen2.5-VL's mergers, LLaVA's projector over CLIP or Pixtral, Mistral3's over Pixtral).
PROJECTOR_COUNTED = MODELLED_TOWERS  # every tower whose forward is modelled has its projector counted


def projector_tensors(parts, batch: int, seq_len: int, e: int) -> int:
    """Bytes of every tensor a trainable projector's forward makes, its input included, at the most images the batch
    can hold (worst_images), each counted once as if all were alive together: the most it can save for backward
    (transformers 5.24; e the element size, 4 for fp32 temporaries):

    Gemma 3 (modeling_gemma3.py Gemma3MultiModalProjector over I images of n patches of width c, T tokens an image,
    text width t): the tower's output I n c, its contiguous transposed copy I n c, AvgPool2d's output I T c;
    Gemma3RMSNorm in fp32: x.float() (a copy where e is not 4), x^2 and x * rsqrt (I T c each), the mean, its sum
    with eps and the rsqrt (I T each), 1 + weight.float() (2 c) and the scaled output I T c, its cast back (I T c e);
    the matmul with mm_input_projection_weight I T t.
    Qwen2-VL (modeling_qwen2_vl.py PatchMerger over N patches of width c, M = N / m^2 tokens of out): the last block's
    output N c, ln_q's output N c and its mean and rstd (N fp32 each), mlp.0's and the GELU's outputs (2 M m^2 c) and
    mlp.2's M out; then get_image_features' split views and the model's torch.cat of them (M out).
    Qwen2.5-VL (modeling_qwen2_5_vl.py Qwen2_5_VLPatchMerger, its vision model's forward): as Qwen2-VL's with ln_q a
    Qwen2_5_VLRMSNorm in fp32: its input's fp32 copy (none in fp32), x^2 and x * rsqrt (N c fp32 each), the mean, its
    sum with eps and the rsqrt (N fp32 each), the cast back and the weight's product (2 N c); and the merger's output
    re-ordered by reverse_indices (M out) before the model's torch.cat.
    LLaVA over CLIP (modeling_llava.py LlavaMultiModalProjector over I images of N = n + 1 tokens of width c, text
    width t): the selected layer's hidden states, which linear_1 saves through its view (I N c), a copy of that view
    (counted though a strided view may need none), linear_1's, the GELU's and linear_2's outputs and the model's
    torch.cat of the images' features (4 I N t; every token counted, the class token too); over Pixtral the same over
    its N patches (no class token).
    Mistral3 (modeling_mistral3.py Mistral3MultiModalProjector over N patches of width c in B images, T = N / m^2
    tokens, text width t): the last layer's output N c; Mistral3RMSNorm in fp32 as Qwen2.5-VL's ln_q; the patch
    merger's contiguous copy of each permuted grid, unfold's output and their concatenation (3 N c), the image sizes
    (three 0-dim int64 an image), merging_layer's output T c; linear_1's, the GELU's and linear_2's outputs and the
    model's torch.cat (4 T t)."""
    images = worst_images(parts, batch, seq_len)
    if parts.tower == "siglip_vision_model":
        if not images:
            return 0
        c, t = _shape(parts.projector, "mm_input_projection_weight")
        n, tokens = _patches(parts), images * parts.image_tokens
        fp32 = (tokens * c * FP32 if e != FP32 else 0) + 3 * tokens * c * FP32 + 3 * tokens * FP32 + 2 * c * FP32
        return 2 * images * n * c * e + tokens * c * e + fp32 + tokens * c * e + tokens * t * e
    if parts.tower == "qwen2_vl_vision":
        c = _shape(parts.embeddings, "patch_embed.proj.weight")[0]
        merged = _shape(parts.projector, "mlp.0.weight")[0]
        out = _shape(parts.projector, "mlp.2.weight")[0]
        n = sum(images)
        m_tokens = n * c // merged
        return 2 * n * c * e + 2 * n * FP32 + 2 * m_tokens * merged * e + 2 * m_tokens * out * e
    if parts.tower == "qwen2_5_vl_vision":
        c = _shape(parts.embeddings, "patch_embed.proj.weight")[0]
        out = _shape(parts.projector, "mlp.2.weight")[0]
        n = sum(images)
        m_tokens = n // _merge(parts) ** 2
        norm = (n * c * FP32 if e != FP32 else 0) + 2 * n * c * FP32 + 3 * n * FP32 + 2 * n * c * e
        return n * c * e + norm + 2 * n * c * e + 3 * m_tokens * out * e
    if parts.tower == "pixtral":
        c, t = _shape(parts.embeddings, "patch_conv.weight")[0], _shape(parts.projector, "linear_1.weight")[0]
        n = sum(images)
        if parts.model_type == "llava":
            return 2 * n * c * e + 4 * n * t * e
        tokens = n // _merge(parts) ** 2
        norm = (n * c * FP32 if e != FP32 else 0) + 2 * n * c * FP32 + 3 * n * FP32 + 2 * n * c * e
        return n * c * e + norm + 3 * n * c * e + 3 * INT64 * len(images) + tokens * c * e + 4 * tokens * t * e
    if parts.tower == "clip_vision_model":
        c, t = _shape(parts.embeddings, "patch_embedding.weight")[0], _shape(parts.projector, "linear_1.weight")[0]
        tokens = images * (_patches(parts) + 1)
        return 2 * tokens * c * e + 4 * tokens * t * e
    raise ValueError(f"projector_tensors counts the projectors of {', '.join(PROJECTOR_COUNTED)}, not {parts.tower}")


def siglip_tensors(parts, images: int, e: int, attention: str) -> int:
    """Bytes of every tensor a SigLIP tower that trains makes in its forward (Gemma 3's: no pooling head), each counted
    once as if all were alive together: the most it can save for backward (transformers 5.24 modeling_siglip.py; I
    images of n patches, width h, MLP width f, H heads of width d, L layers, T = I n):

    patches    the pixels in e (a copy where e is not 4; the convolution saves it: its weight needs a gradient), the
               unfolded input on the CPU (the pixels' size in e), the convolution's output, the position rows (n h)
               and their sum: 2 T h + n h
    each layer layer_norm1's output (T h) and its mean and rstd (2 T fp32); q, k and v (3 T h); eager: matmul(q, k^T),
               its scaled copy (and the scalar's 12 B), softmax's fp32 copy and output, their cast to e, and a
               dropout's output and mask (counted though attention_dropout 0 returns its input): I H n^2 x
               (3 e + 8 + 1) + 12, then the output and its contiguous transpose (2 T h); SDPA: its output, the
               log-sum-exp (I H n fp32), the CPU kernel's scratch (_cpu_flash_scratch) and the contiguous transpose
               (2 T h); out_proj's output and the residual (2 T h); layer_norm2's output, mean and rstd (T h + 2 T
               fp32); fc1's output and the activation's (3 T f: quick_gelu makes three); fc2's output and the residual
               (2 T h)
    post       post_layernorm's output, mean and rstd (T h + 2 T fp32)"""
    images = validate.count("images", images, low=0)
    if images == 0:
        return 0
    h, c, p, _ = _shape(parts.embeddings, "patch_embedding.weight")
    n = _shape(parts.embeddings, "position_embedding.weight")[0]
    f = _shape(parts.block, "mlp.fc1.weight")[0]
    heads, tokens = parts.heads, images * n
    pixels = images * c * n * p * p
    patches = (pixels * e if e != FP32 else 0) + pixels * e + 2 * tokens * h * e + n * h * e
    norm = tokens * h * e + 2 * tokens * FP32
    if attention == "eager":
        attn = images * heads * n * n * (3 * e + 2 * FP32 + 1) + 12 + 2 * tokens * h * e
    else:
        attn = 2 * tokens * h * e + images * heads * n * FP32 + _cpu_flash_scratch(n, h // heads, e)
    layer = norm + 3 * tokens * h * e + attn + 2 * tokens * h * e + norm + 3 * tokens * f * e + 2 * tokens * h * e
    return patches + parts.n_blocks * layer + norm


def siglip_saved(parts, images: int, e: int, attention: str, blocks: int | None = None) -> int:
    """Bytes a SigLIP tower that trains saves for backward over `images` images (its first `blocks` layers; every
    layer where None), each tensor once (transformers 5.24 modeling_siglip.py, autograd's saved tensors):

    patches    the convolution's input, the pixels in e (its weight needs a gradient)
    each layer layer_norm1's input, mean and rstd (T h, 2 T fp32); its output, which q_proj, k_proj and v_proj save
               (T h); q, k and v (3 T h); eager: softmax's fp32 output and its cast to e, which matmul(attn, v) saves
               (I H n^2 x (4 + e); dropout at p=0 returns its input); SDPA (the CPU flash kernel): its output and
               log-sum-exp (T h, I H n fp32); out_proj's input, the contiguous transpose (T h); layer_norm2's input,
               mean and rstd and its output (2 T h, 2 T fp32); fc1's output and the activation's, counted as three
               (3 T f: quick_gelu keeps x, its sigmoid and their product; gelu_pytorch_tanh, Gemma 3's, two)
    post       post_layernorm's input, mean and rstd (T h + 2 T fp32)"""
    images = validate.count("images", images, low=0)
    if images == 0:
        return 0
    h, c, p, _ = _shape(parts.embeddings, "patch_embedding.weight")
    n = _shape(parts.embeddings, "position_embedding.weight")[0]
    f = _shape(parts.block, "mlp.fc1.weight")[0]
    tokens = images * n
    norm = tokens * h * e + 2 * tokens * FP32
    attn = (images * parts.heads * n * n * (FP32 + e) if attention == "eager"
            else tokens * h * e + images * parts.heads * n * FP32)
    layer = 2 * norm + 4 * tokens * h * e + attn + tokens * h * e + tokens * h * e + 3 * tokens * f * e
    blocks = parts.n_blocks if blocks is None else blocks
    return images * c * n * p * p * e + blocks * layer + norm


def siglip_largest(parts, images: int, e: int, attention: str) -> int:
    """Bytes of the largest single tensor siglip_tensors counts: the pixels (or their unfolded copy) in e, fc1's
    output (T f), a layer's hidden states (T h), or under eager the fp32 scores over every image (I H n^2)."""
    images = validate.count("images", images, low=0)
    h, c, p, _ = _shape(parts.embeddings, "patch_embedding.weight")
    n = _shape(parts.embeddings, "position_embedding.weight")[0]
    f = _shape(parts.block, "mlp.fc1.weight")[0]
    scores = images * parts.heads * n * n * FP32 if attention == "eager" else 0
    return max(images * c * n * p * p * e, images * n * max(f, h) * e, scores)


def qwen2_vl_saved(parts, chunks, e: int, attention: str, blocks: int | None = None) -> int:
    """Bytes a Qwen2-VL tower that trains saves for backward over images of `chunks` patches (its first `blocks`
    blocks; every block where None), each tensor once, counted generously (transformers 5.24 modeling_qwen2_vl.py,
    autograd's saved tensors; N patches of width c, MLP width f, H heads, pixel rows of R values):

    patches    the Conv3d's input, the pixels in e, and its unfolded input on the CPU (N R e each; the second counted
               though the kernel may make it again in backward)
    each block norm1's input, mean and rstd and its output (2 N c, 2 N fp32); qkv's output, which v's view keeps
               (3 N c); q_embed and k_embed (2 N c; apply_rotary_pos_emb_vision's fp32 products save only cos and
               sin, held anyway); the attention's copies of each chunk's q, k and v (3 N c: matmul reshapes the
               transposed views); eager: each chunk's softmax output in fp32 and its cast (H n^2 x (4 + e)); SDPA:
               each chunk's output and log-sum-exp (N c, H N fp32); the chunks' concatenation, proj's input (N c);
               norm2's input, mean and rstd and its output (2 N c, 2 N fp32); fc1's output, quick_gelu's sigmoid and
               product (3 N f)"""
    chunks = [validate.count("patches", n, low=1) for n in chunks]
    if not chunks:
        return 0
    width, c, tp, p, _ = _shape(parts.embeddings, "patch_embed.proj.weight")
    f = _shape(parts.block, "mlp.fc1.weight")[0]
    n, heads = sum(chunks), parts.heads
    attn = (sum(heads * k * k for k in chunks) * (FP32 + e) if attention == "eager"
            else n * width * e + heads * n * FP32)
    block = 13 * n * width * e + 4 * n * FP32 + attn + 3 * n * f * e
    blocks = parts.n_blocks if blocks is None else blocks
    return 2 * n * c * tp * p * p * e + blocks * block


def qwen2_vl_block_extra(parts, chunks, e: int, attention: str) -> int:
    """The most a Qwen2-VL block that trains makes beside what it saves (qwen2_vl_saved), with the tables the tower
    holds throughout: q's and k's fp32 copies (none in fp32) and apply_rotary_pos_emb_vision's temporaries for each
    (rotate_half's negation and concatenation, the two products and their sum: 4.5 N c fp32); eager's scores, their
    scaled copy and the fp32 copy softmax makes over the largest chunk (and the scalar's 12 B), or SDPA's CPU kernel's
    scratch; the chunks' transposed outputs, proj's output, the residual sums and fc2's output (5 N c); the position
    ids (N x 2 int64), cos and sin (N x d fp32 each), cu_seqlens and the chunk lengths (int32)."""
    width = _shape(parts.embeddings, "patch_embed.proj.weight")[0]
    n, heads, d, big = sum(chunks), parts.heads, width // parts.heads, max(chunks)
    copies = 2 * n * width * FP32 if e != FP32 else 0
    rotary = copies + 2 * 9 * n * width * FP32 // 2
    attn = (heads * big * big * (2 * e + (FP32 if e != FP32 else 0)) + 12 if attention == "eager"
            else _cpu_flash_scratch(big, d, e))
    tables = n * 2 * INT64 + 2 * n * d * FP32 + (2 * len(chunks) + 1) * FP32
    return rotary + attn + 5 * n * width * e + tables


def tower_tensors(parts, batch: int, seq_len: int, e: int, attention: str) -> tuple[int, int, int, int]:
    """(S, the most its forward adds to S, the most its backward adds to S, one layer's share of S) for a SigLIP tower
    that trains (TOWER_COUNTED), at the most images the batch can hold (worst_images). S: siglip_saved. Its forward
    holds beside what it has saved at most every tensor one layer makes and every tensor the patches' stage makes
    (siglip_tensors of one layer, and of none). Its backward walks the layers one op at a
    time: beside the saved tensors, the gradient arriving at the op, the gradients it makes (two for a matmul of two
    inputs), the residual stream's gradient waiting at the block's input and the branch's other partial gradient
    (q's, k's and v's meet at layer_norm1's output), and an op's temporaries (softmax's backward in fp32, its casts):
    six tensors of the largest (siglip_largest) bound them; SDPA's CPU kernel adds its scratch (its backward's tiles
    and gradient tiles: twice the forward's, _cpu_flash_scratch)."""
    if parts.tower not in TOWER_COUNTED:
        raise ValueError(f"tower_tensors counts the towers of {', '.join(TOWER_COUNTED)}, not {parts.tower}")
    images = worst_images(parts, batch, seq_len)
    if parts.tower == "qwen2_vl_vision":
        return _qwen2_vl_tensors(parts, images, e, attention)
    h = _shape(parts.embeddings, "patch_embedding.weight")[0]
    scratch = 2 * _cpu_flash_scratch(_patches(parts), h // parts.heads, e) if attention != "eager" else 0
    one = replace(parts, n_blocks=1)
    saved = siglip_saved(parts, images, e, attention)
    layer = saved - siglip_saved(parts, images, e, attention, blocks=parts.n_blocks - 1) if parts.n_blocks else 0
    return (saved, siglip_tensors(one, images, e, attention),
            6 * siglip_largest(parts, images, e, attention) + scratch, layer)


def _qwen2_vl_tensors(parts, chunks, e: int, attention: str) -> tuple[int, int, int, int]:
    """tower_tensors for a Qwen2-VL tower: its backward's largest tensor is the pixels' rows (N R e), fc1's output
    (N f e), an fp32 rotary gradient (N c fp32) or eager's fp32 scores over the largest chunk (H n^2 fp32)."""
    width, c, tp, p, _ = _shape(parts.embeddings, "patch_embed.proj.weight")
    f = _shape(parts.block, "mlp.fc1.weight")[0]
    n, big = sum(chunks), max(chunks)
    largest = max(n * c * tp * p * p * e, n * f * e, n * width * FP32,
                  parts.heads * big * big * FP32 if attention == "eager" else 0)
    scratch = 2 * _cpu_flash_scratch(big, width // parts.heads, e) if attention != "eager" else 0
    saved = qwen2_vl_saved(parts, chunks, e, attention)
    layer = saved - qwen2_vl_saved(parts, chunks, e, attention, blocks=parts.n_blocks - 1) if parts.n_blocks else 0
    return saved, qwen2_vl_block_extra(parts, chunks, e, attention), 6 * largest + scratch, layer


# The towers whose tensors tower_tensors counts for a tower that trains (Gemma 3's SigLIP, without a pooling head;
# Qwen2-VL's).
TOWER_COUNTED = ("siglip_vision_model", "qwen2_vl_vision")
