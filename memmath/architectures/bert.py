"""BERT (transformers 5.24 configuration_bert.py, modeling_bert.py: BertModel with its pooler, plus
BertForSequenceClassification's classifier when `architectures` names it; a masked-LM head is not counted)."""

from . import _encoder
from .record import Architecture

FIELDS = {"num_hidden_layers": "blocks", "hidden_size": "width", "num_attention_heads": "heads",
          "intermediate_size": "MLP width", "vocab_size": "word rows", "max_position_embeddings": "position rows",
          "type_vocab_size": "token-type rows", "architectures": "...ForSequenceClassification adds a classifier",
          "num_labels": "classifier outputs", "id2label": "classifier outputs", "hidden_act": "gelu",
          "hidden_dropout_prob": "dropout_p", "attention_probs_dropout_prob": "dropout_p",
          "classifier_dropout": "dropout_p (None: hidden_dropout_prob)",
          "position_embedding_type": "absolute only (relative types add a distance embedding)",
          "is_decoder": "refused when true", "add_cross_attention": "refused when true",
          "torch_dtype": "checked: float32, bfloat16 or float16 (the step's precision is an argument)",
          "dtype": "as torch_dtype", "quantization_config": "refused: a pre-quantized checkpoint is not modelled"}


ARCHITECTURE = Architecture(
    model_type="bert", family="bert", title="BERT", source="configuration_bert.py, modeling_bert.py",
    fields=FIELDS, defaults={"type_vocab_size": 2}, activations=("gelu",),
    dropout_fields={"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1},
    refused_flags=("is_decoder", "add_cross_attention"),
    embedding="word_embeddings", final_norm="layer", amp_measured=True, houlsby_placed=True,
    **_encoder.RECORD,
)
