"""OLMo 2 (transformers 5.24 configuration_olmo2.py, modeling_olmo2.py): no norm before the sublayers, a norm
after each, q/k RMSNorm over all heads, norm weights kept in fp32."""

from .record import ATTENTION_BIAS, QK_NORM, Architecture, decoder_fields


def read_options(config, get):
    return {"qk_norm": "full", "norm_layout": "post"}


ARCHITECTURE = Architecture(
    model_type="olmo2", family="llama", title="OLMo 2", source="configuration_olmo2.py, modeling_olmo2.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, **QK_NORM}),
    read_options=read_options, block="olmo2", final_norm="rms_fp32_weight", amp_measured=True,
)
