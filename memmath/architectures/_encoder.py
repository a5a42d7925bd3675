"""The BERT encoder, once, for BERT and RoBERTa (transformers 5.24 modeling_bert.py, modeling_roberta.py): word,
position and token-type embeddings with a LayerNorm, post-norm blocks, a tanh pooler and classifier (RoBERTa's
classification head instead when its record says so); its tensors, peft target names and forward-pass trace."""

from __future__ import annotations

from ..trace import Tensor, Trace
from ._parts import ParamTensor, linear, norm
from ._steps import INT64, Pass, dims, houlsby

# BertLayer's adapted modules in parameters() order
MODULE_ORDER = ("query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense")
# The tensor-parallel split (BertConfig has no base_model_tp_plan; Megatron-LM's column- and row-parallel layers)
TP_PLAN = {"encoder.layer.*.attention.self.query": "colwise", "encoder.layer.*.attention.self.key": "colwise",
           "encoder.layer.*.attention.self.value": "colwise", "encoder.layer.*.attention.output.dense": "rowwise",
           "encoder.layer.*.intermediate.dense": "colwise", "encoder.layer.*.output.dense": "rowwise"}


def tensors(m, group: str) -> list:
    """BERT (Devlin et al. 2019; transformers BertModel + optional classifier): word, position and token-type
    embeddings with a LayerNorm, post-norm blocks, a tanh pooler."""
    h, inner = m.hidden_size, m.intermediate_size
    if group == "embeddings":
        out = [ParamTensor("word_embeddings", "embeddings", (m.vocab_size, h)),
               ParamTensor("position_embeddings", "embeddings", (m.max_positions, h))]
        if m.type_vocab_size:
            out.append(ParamTensor("token_type_embeddings", "embeddings", (m.type_vocab_size, h)))
        return out + norm("embeddings.LayerNorm", h, True)
    if group == "layer":
        return (linear("attention.self.query", "attention", h, h, True)
                + linear("attention.self.key", "attention", h, h, True)
                + linear("attention.self.value", "attention", h, h, True)
                + linear("attention.output.dense", "attention", h, h, True)
                + norm("attention.output.LayerNorm", h, True)
                + linear("intermediate.dense", "mlp", h, inner, True)
                + linear("output.dense", "mlp", inner, h, True) + norm("output.LayerNorm", h, True))
    if group == "final_norm":
        return []
    if m.num_labels and m.architecture.classifier == "classification_head":
        # RobertaForSequenceClassification: RobertaModel(add_pooling_layer=False) and a
        # RobertaClassificationHead (dense h x h, tanh, out_proj h -> labels) on the first token.
        return [ParamTensor("classifier.dense.weight", "head", (h, h), linear=True),
                ParamTensor("classifier.dense.bias", "head", (h,)),
                ParamTensor("classifier.out_proj.weight", "head", (m.num_labels, h)),
                ParamTensor("classifier.out_proj.bias", "head", (m.num_labels,))]
    head = [ParamTensor("pooler.dense.weight", "head", (h, h), linear=True),
            ParamTensor("pooler.dense.bias", "head", (h,))]
    if m.num_labels:
        head += [ParamTensor("classifier.weight", "head", (m.num_labels, h)),
                 ParamTensor("classifier.bias", "head", (m.num_labels,))]
    return head


def lora_modules(m):
    """peft's target names in a BERT layer (BertSelfAttention's query/key/value, the two output denses)."""
    h, inner = m.hidden_size, m.intermediate_size
    return {"q": ("query", h, h), "k": ("key", h, h), "v": ("value", h, h), "o": ("attention.output.dense", h, h),
            "up": ("intermediate.dense", h, inner), "down": ("output.dense", inner, h)}


def embeddings(tr: Trace, shape, trains: bool, *, dropout, input_grad_hook) -> Tensor:
    """BertEmbeddings (word + token type + position, LayerNorm, dropout); RobertaEmbeddings make their position and
    token-type ids per token."""
    t, s, h = tr.t, tr.s, shape.hidden_size
    ids = tr.new(t, INT64, batch=True)  # the batch's token ids
    x = tr.embedding(ids, t * h, trains, "word_embeddings")
    x.grad = x.grad or input_grad_hook
    if shape.architecture.classifier == "classification_head":
        # RobertaEmbeddings: position ids from the token ids (cumsum of ids != padding_idx, one per token,
        # new int64) and the token-type buffer gathered at them (b x s, new): each saved by its embedding.
        positions = tr.new(t, INT64)
        x = tr.add(x, tr.embedding(tr.new(t, INT64), t * h, trains, "token_type"))
        x = tr.add(x, tr.embedding(positions, t * h, trains, "position"))
        return tr.dropout(tr.layer_norm(x, trains, "embeddings LayerNorm"), dropout, "embedding")
    x = tr.add(x, tr.embedding(tr.new(s, INT64), t * h, trains, "token_type"))  # gathered from a buffer: new
    x = tr.add(x, tr.embedding(tr.new(s, INT64, existing=True), t * h, trains, "position"))  # a buffer slice
    return tr.dropout(tr.layer_norm(x, trains, "embeddings LayerNorm"), dropout, "embedding")


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """BertLayer: self-attention, its output dense, dropout and LayerNorm after the residual add; the
    intermediate dense with GELU, the output dense, dropout and LayerNorm."""
    dm, t = dims(shape), tr.t
    h, a, d, inner = dm["h"], dm["a"], dm["d"], dm["I"]
    lora, dropout = p.lora_of, p.dropout
    q = tr.linear(x, t * h, trainable, lora("query"), "query")
    k = tr.linear(x, t * h, trainable, lora("key"), "key")
    v = tr.linear(x, t * h, trainable, lora("value"), "value")
    ctx = tr.attention(q, k, v, heads=a, head_dim=d, kind=p.kind, dropout=dropout, softmax_fp32=False,
                       name="attention")
    out = houlsby(tr, tr.linear(ctx, t * h, trainable, lora("attention.output.dense"), "attention.output.dense"),
                  p, "attention")
    h1 = tr.layer_norm(tr.add(tr.dropout(out, dropout, "attention output"), x), trainable, "attention LayerNorm")
    act = tr.gelu(tr.linear(h1, t * inner, trainable, lora("intermediate.dense"), "intermediate.dense"), "GELU")
    out = tr.dropout(houlsby(tr, tr.linear(act, t * h, trainable, lora("output.dense"), "output.dense"), p, "MLP"),
                     dropout, "output")
    return tr.layer_norm(tr.add(out, h1), trainable, "output LayerNorm")


def head_and_loss(tr: Trace, shape, x: Tensor, *, final_norm_trains, head_trains, dropout):
    """The pooler (or RoBERTa's classification head), the classifier and its cross-entropy (region "loss"); each
    matmul reads one token a sequence (rows b)."""
    dm = dims(shape)
    first_token = Tensor(tr.b * dm["h"], tr.e, x.grad, x.storage)  # hidden[:, 0] keeps the whole storage
    if shape.architecture.classifier == "classification_head" and dm["labels"]:
        # RobertaClassificationHead: dropout, dense, tanh, dropout, out_proj on features[:, 0, :]
        # (no pooler); without dropout dense keeps the view, so the whole last hidden state.
        x0 = tr.dropout(first_token, dropout, "classifier input")
        act = tr.tanh(tr.linear(x0, tr.b * dm["h"], head_trains, None, "classifier.dense", rows=tr.b), "classifier")
        act = tr.dropout(act, dropout, "classifier")
        logits = tr.linear(act, tr.b * dm["labels"], head_trains, None, "classifier.out_proj", rows=tr.b)
    else:
        pooled = tr.tanh(tr.linear(first_token, tr.b * dm["h"], head_trains, None, "pooler dense", rows=tr.b), "pooler")
        pooled = tr.dropout(pooled, dropout, "classifier")
        logits = tr.linear(pooled, tr.b * dm["labels"], head_trains, None, "classifier", rows=tr.b)
    tr.region = "loss"
    if logits.grad:  # CrossEntropyLoss in the logits' dtype
        log_softmax = tr.new(tr.b * dm["labels"], tr.e)
        tr.use(logits)
        tr.save(log_softmax, "log-softmax output")
        tr.save(tr.new(tr.b, INT64, batch=True), "labels (int64)")
        tr.save(tr.new(1, tr.e), "loss total weight")


# The behaviour every encoder record names (bert.py, roberta.py: Architecture(..., **RECORD)).
RECORD = dict(tensors=tensors, lora_modules=lora_modules, trace_embeddings=embeddings, trace_block=block,
              trace_head=head_and_loss, module_order=MODULE_ORDER, tp_plan=TP_PLAN, causal=False, prefill_phases=None,
              traced_activations=(), rotary=False, position_id_buffers=True, norms_last=False,
              grouped_query=False)
