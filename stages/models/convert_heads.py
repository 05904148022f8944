"""Convert a fine-tuned task model (a head of heads.py on its backbone, or a
T5 fine-tuned as text to text) to the Hugging Face class that computes the same thing.
Torch only: transformers is needed to load the result, not to write it.

    config, state = task_model_to_hf(model, labels=("0", "1"))
        # config: config.json's dict (architectures, id2label / label2id, problem_type)
        # state:  the weights under that class's names, tied copies left out

    our model                          backbone          Hugging Face class
    BertForSequenceClassification      bert / albert     BertForSequenceClassification / Albert...
    ElectraForSequenceClassification   electra           ElectraForSequenceClassification
    GPTForSequenceClassification       gpt2 / llama      GPT2ForSequenceClassification / Llama...
    SpanExtractionModel                any of those      <Base>ForQuestionAnswering
    TokenClassificationModel           any of those      <Base>ForTokenClassification
    T5 (a text-to-text task's model)   t5                T5ForConditionalGeneration

Every mapping is exact, weight for weight: BERT and ALBERT classify from the tanh pooler
(HF's too); their span and token classes have no pooler (HF builds them with
add_pooling_layer=False), so it is left out; ELECTRA's classifier is HF's
ElectraClassificationHead (dense, GELU, out_proj); GPT and Llama pool the last real
token, HF the last token that is not `pad_token_id`, the same position as long as the
config's pad_token_id is the id the tokenizer pads with (the caller sets it,
`stages.finetune.hf_export`). The original Transformer (t5 variant transformer) has no
transformers class: `HfExportRefused` says so, as does any model this table lacks.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from stages.models.bert.model import Bert
from stages.models.gpt.model import GPT
from stages.models.heads import (
    BertForSequenceClassification, ElectraForSequenceClassification, GPTForSequenceClassification,
    SpanExtractionModel, TokenClassificationModel,
)
from stages.models.hf_export import _to_hf, has_hf_class
from stages.models.t5.model import T5

SEQUENCE, SPANS, TOKENS = "SequenceClassification", "QuestionAnswering", "TokenClassification"
_KINDS = {
    BertForSequenceClassification: SEQUENCE, ElectraForSequenceClassification: SEQUENCE,
    GPTForSequenceClassification: SEQUENCE, SpanExtractionModel: SPANS, TokenClassificationModel: TOKENS,
}
# config.json's model_type -> the HF base name its task classes start with
_BASES = {"gpt2": "GPT2", "llama": "Llama", "bert": "Bert", "albert": "Albert", "electra": "Electra"}
# HF base name -> the attribute its task classes keep the base model in (state dict prefix)
_PREFIXES = {"Bert": "bert", "Albert": "albert", "Electra": "electra", "GPT2": "transformer", "Llama": "model"}
# Llama's QA class keeps its model as `transformer` (transformers' backward compatibility)
_QA_PREFIXES = {"Llama": "transformer"}


class HfExportRefused(ValueError):
    """A model with no transformers class that computes the same thing; the message says why."""


def task_model_to_hf(model: nn.Module, labels: tuple[str, ...] | list[str] | None = None,
                     ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(config.json dict, state dict) of the Hugging Face task class for `model`.
    labels: the class names in id order (classification and tagging); None with one
    output is regression (STS-B)."""
    if isinstance(model, T5):
        return _seq2seq(model)
    if not has_hf_class(model):
        raise HfExportRefused(
            "the original Transformer (family t5, variant transformer) has no transformers class "
            "(T5ForConditionalGeneration has relative positions, RMSNorm and no biases); the "
            "pipeline's own model/ folder is the fine-tuned model")
    kind = _KINDS.get(type(model))
    backbone = getattr(model, "backbone", None)
    if kind is None or not isinstance(backbone, (Bert, GPT)):
        raise HfExportRefused(f"no transformers class is known for a {type(model).__name__} on a "
                              f"{type(backbone).__name__} (stages/models/convert_heads.py lists those there are)")
    base, config, state = _backbone(backbone)
    if kind == SEQUENCE and (base == "Electra") != isinstance(model, ElectraForSequenceClassification):
        raise HfExportRefused(f"a {type(model).__name__} on a variant {backbone.config.variant!r} BERT is no "
                              "transformers class: ELECTRA classifies through its own dense layer, BERT and "
                              "ALBERT through the pooler")
    prefix = _QA_PREFIXES.get(base, _PREFIXES[base]) if kind == SPANS else _PREFIXES[base]
    if kind != SEQUENCE:  # HF's span and token classes are built without the pooler
        state = {name: tensor for name, tensor in state.items() if not name.startswith("pooler")}
    state = {f"{prefix}.{name}": tensor for name, tensor in state.items()}
    state.update(_head_state(model, base, kind))
    config["architectures"] = [f"{base}For{kind}"]
    if kind != SPANS:
        config.update(_label_fields(model, kind, labels))
    dropout = getattr(model, "dropout", None)
    if isinstance(dropout, nn.Dropout):  # what HF's head applies in training, as ours did
        config["classifier_dropout"] = dropout.p
    return config, state


def _backbone(backbone: Bert | GPT) -> tuple[str, dict[str, Any], dict[str, torch.Tensor]]:
    """(HF base name, its config dict, its bare model's state: BertModel's names, GPT2Model's
    without the `transformer.` prefix, LlamaModel's without `model.`; no LM head)."""
    config, state, _ = _to_hf(backbone)
    base = _BASES[config["model_type"]]
    if isinstance(backbone, GPT):  # the causal LM's state: keep its bare model's
        stem = _PREFIXES[base] + "."
        state = {name.removeprefix(stem): tensor for name, tensor in state.items() if name.startswith(stem)}
    return base, config, state


def _head_state(model: nn.Module, base: str, kind: str) -> dict[str, torch.Tensor]:
    """The head's weights under the HF class's names (layouts are HF's: nn.Linear)."""
    if kind == SPANS:
        layers = {"qa_outputs": model.span_head}
    elif kind == TOKENS:
        layers = {"score" if base == "Llama" else "classifier": model.classifier}
    elif isinstance(model, ElectraForSequenceClassification):
        layers = {"classifier.dense": model.dense, "classifier.out_proj": model.classifier}
    elif isinstance(model, GPTForSequenceClassification):
        layers = {"score": model.score}
    else:
        layers = {"classifier": model.classifier}
    return {f"{name}.{key}": tensor.detach().clone() for name, layer in layers.items()
            for key, tensor in layer.state_dict().items()}


def _label_fields(model: nn.Module, kind: str, labels) -> dict[str, Any]:
    """num_labels, id2label / label2id and problem_type; HF reads num_labels from id2label."""
    num_labels = model.num_labels
    if kind == SEQUENCE and num_labels == 1 and labels is None:
        names = ["score"]  # what the regression head's one output is
        problem_type = "regression"
    else:
        if labels is None or len(labels) != num_labels:
            raise ValueError(f"labels {labels!r} must name the head's {num_labels} outputs in id order")
        names = [str(label) for label in labels]
        problem_type = "single_label_classification" if kind == SEQUENCE else None
    fields: dict[str, Any] = {"id2label": {str(i): name for i, name in enumerate(names)},
                              "label2id": {name: i for i, name in enumerate(names)}}
    if problem_type is not None:
        fields["problem_type"] = problem_type
    return fields


def _seq2seq(model: T5) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    config, state, tied = _to_hf(model)  # already T5ForConditionalGeneration
    return config, {name: tensor for name, tensor in state.items() if name not in tied}
