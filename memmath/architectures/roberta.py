"""RoBERTa (transformers 5.24 configuration_roberta.py, modeling_roberta.py): BERT's layers, position ids from
the token ids, and RobertaClassificationHead (dense + out_proj, no pooler) for sequence classification."""

from . import _encoder, bert
from .record import Architecture

ARCHITECTURE = Architecture(
    model_type="roberta", family="bert", title="RoBERTa", source="configuration_roberta.py, modeling_roberta.py",
    fields=dict(bert.FIELDS, architectures="RobertaForSequenceClassification adds its classification head "
                                          "(dense + out_proj) instead of the pooler"),
    # RobertaConfig's type_vocab_size default is 2, as BertConfig's (roberta-base's config.json says 1)
    defaults={"type_vocab_size": 2}, activations=("gelu",),
    dropout_fields={"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1},
    refused_flags=("is_decoder", "add_cross_attention"),
    embedding="word_embeddings", final_norm="layer", classifier="classification_head",
    houlsby_placed=True,  # BERT's layers, where validation/houlsby.py placed the adapters
    **_encoder.RECORD,
)
