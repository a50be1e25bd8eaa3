"""The three built-in families, registered in ``famlab.families.registry`` when ``famlab.families`` is imported.

Each :class:`~famlab.families.registry.FamilySpec` names the network class, the faithful defaults
(``famlab.families.faithful``), the input format and the Hugging Face adapter; nothing else in famlab lists the
families (``tests/test_one_source.py`` and docs/architecture.md, "Adding a family").
"""

from __future__ import annotations

from famlab.families.bert import Bert
from famlab.families.config import FAMILIES
from famlab.families.faithful import FAITHFUL
from famlab.families.formats import DecoderFormat, EncoderDecoderFormat, EncoderFormat
from famlab.families.gpt import GPT
from famlab.families.hf import bert_lm_weight_map, gpt2_weight_map, t5_weight_map
from famlab.families.hf_classifier import bert_classifier, gpt2_classifier
from famlab.families.hf_settings import (
    bert_config,
    bert_config_to_hf,
    check_bert,
    check_gpt2,
    check_t5,
    gpt2_config_to_hf,
    gpt_config,
    t5_config,
    t5_config_to_hf,
)
from famlab.families.registry import FamilySpec, HFAdapter, register_family
from famlab.families.t5 import T5

BERT_SPEC = register_family(FamilySpec(
    name=Bert.family,
    network=Bert,
    defaults=FAITHFUL[Bert.family],
    input_format=EncoderFormat(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1"),
    hf=HFAdapter(
        lm_class="BertForMaskedLM", auto_class="AutoModelForMaskedLM",
        classes=("BertForMaskedLM", "BertForPreTraining", "BertModel"), bodies=("BertModel",),
        model_type="bert", pretrained_class="BertForPreTraining",
        config_from_hf=bert_config, check=check_bert, config_to_hf=bert_config_to_hf, weight_map=bert_lm_weight_map,
        classifier=bert_classifier, classifier_pooling="cls", body_pooler=True, rope_variant=True,
    ),
))  # fmt: skip

GPT_SPEC = register_family(FamilySpec(
    name=GPT.family,
    network=GPT,
    defaults=FAITHFUL[GPT.family],
    # a GPT language model continues raw text: only a classifier's exported tokenizer adds the template
    input_format=DecoderFormat(single="$A [EOS]", pair="$A [SEP] $B [EOS]", lm_template=False),
    hf=HFAdapter(
        lm_class="GPT2LMHeadModel", auto_class="AutoModelForCausalLM", classes=("GPT2LMHeadModel", "GPT2Model"),
        model_type="gpt2", pretrained_class="GPT2LMHeadModel",
        config_from_hf=gpt_config, check=check_gpt2, config_to_hf=gpt2_config_to_hf, weight_map=gpt2_weight_map,
        classifier=gpt2_classifier, classifier_pooling="last",
    ),
))  # fmt: skip

T5_SPEC = register_family(FamilySpec(
    name=T5.family,
    network=T5,
    defaults=FAITHFUL[T5.family],
    input_format=EncoderDecoderFormat(single="$A [EOS]", pair="$A [SEP] $B [EOS]"),
    hf=HFAdapter(
        lm_class="T5ForConditionalGeneration", auto_class="AutoModelForSeq2SeqLM",
        classes=("T5ForConditionalGeneration",), model_type="t5", pretrained_class="T5ForConditionalGeneration",
        config_from_hf=t5_config, check=check_t5, config_to_hf=t5_config_to_hf, weight_map=t5_weight_map,
        always_tied=True,  # transformers 5 re-ties T5's lm_head to the shared embedding
        encoder_class="T5EncoderModel", body_class="T5Model", tokenizer_max_length=512,
    ),
))  # fmt: skip
FAMILIES.seal()  # these three are built in: unregister_family refuses them, `famlab presets` lists others as added

__all__ = ["BERT_SPEC", "GPT_SPEC", "T5_SPEC"]
