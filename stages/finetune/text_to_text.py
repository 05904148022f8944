"""T5 fine-tuning as text to text (Raffel et al. 2020, sec. 2.4): a task prefix in, a
label word out, decoded greedily (`stages.models.generation.generate_seq2seq`).

    "sst2 sentence: a gripping , funny film"                    -> "positive"
    "rte sentence1: The cat sat. sentence2: A cat is sitting."  -> "entailment"

GLUE classification tasks (not STS-B's regression, not SQuAD or CoNLL-2003 yet) with a
T5 pretrained by the pipeline. The label words are T5's where the GLUE files use 0/1;
word labels (RTE, QNLI, MNLI) are their own words. A generation that is none of the
task's words counts as wrong when scored (class -1, as in the T5 paper) and is written
as the first label in prediction files (the GLUE server needs a label on every row).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.nn as nn
from tokenizers import Tokenizer

from stages.finetune.encode import T5_SPECIALS, EncodedSplit
IGNORE_INDEX = -100
MAX_TARGET_LEN = 8  # tokens per label word, </s> included; longer ones are cut
# T5's label words for the GLUE tasks whose files hold 0/1 (class-id order).
LABEL_WORDS = {
    "cola": ("unacceptable", "acceptable"),
    "sst2": ("negative", "positive"),
    "mrpc": ("not_equivalent", "equivalent"),
    "qqp": ("not_duplicate", "duplicate"),
    "wnli": ("not_entailment", "entailment"),
}


def is_t5_tokenizer(tokenizer: Tokenizer) -> bool:
    return all(tokenizer.token_to_id(token) is not None for token in T5_SPECIALS)


def label_words(spec) -> tuple[str, ...]:
    if not hasattr(spec, "text_columns") or spec.is_regression:  # SQuAD, CoNLL; STS-B
        raise ValueError(
            f"task {spec.name}: a T5 model fine-tunes GLUE classification tasks only (text to text); "
            "remove it from finetune.tasks or fine-tune a GPT or BERT model")
    return LABEL_WORDS.get(spec.name, spec.labels)


def source_texts(spec, texts: list[tuple[str, ...]]) -> list[str]:
    """T5's input format: "<task> <column>: <text> <column>: <text>"."""
    return [" ".join([spec.name, *(f"{column}: {text}" for column, text in zip(spec.text_columns, row))])
            for row in texts]


def encode_text_to_text(tokenizer: Tokenizer, spec, texts: list[tuple[str, ...]],
                        labels: np.ndarray | None) -> EncodedSplit:
    """Sources truncated/padded to the tokenizer's length (its post-processor ends them
    with </s>); targets: the label word's ids and </s>, -100 after."""
    sources = tokenizer.encode_batch(source_texts(spec, texts))
    targets = None
    if labels is not None:
        words = label_words(spec)
        word_ids = [tokenizer.encode(word).ids[:MAX_TARGET_LEN] for word in words]  # ends with </s>
        targets = np.full((len(labels), MAX_TARGET_LEN), IGNORE_INDEX, dtype=np.int64)
        for row, label in enumerate(labels):
            ids = word_ids[int(label)]
            targets[row, :len(ids)] = ids
    return EncodedSplit(input_ids=np.asarray([e.ids for e in sources], dtype=np.int32),
                        attention_mask=np.asarray([e.attention_mask for e in sources], dtype=np.int8),
                        labels=targets)


def class_ids(spec, tokenizer_path: str, outputs: np.ndarray) -> np.ndarray:
    """Generated ids (N, MAX_TARGET_LEN) -> class ids, -1 where the text is no label word."""
    tokenizer = _tokenizer(tokenizer_path)
    words = {word: i for i, word in enumerate(label_words(spec))}
    texts = tokenizer.decode_batch([[int(t) for t in row if t >= 0] for row in outputs], skip_special_tokens=True)
    return np.asarray([words.get(text.strip(), -1) for text in texts], dtype=np.int64)


def text_to_text_scores(spec, tokenizer_path: str, labels: np.ndarray, outputs: np.ndarray) -> dict[str, float]:
    from stages.finetune.metrics import compute_metrics

    return compute_metrics(spec.metrics, class_ids(spec, tokenizer_path, outputs), labels)


def file_predictions(spec, tokenizer_path: str, outputs: np.ndarray) -> np.ndarray:
    """Class ids for prediction files: a generation that is no label word becomes class 0."""
    predicted = class_ids(spec, tokenizer_path, outputs)
    return np.where(predicted < 0, 0, predicted)


@lru_cache(maxsize=4)
def _tokenizer(path: str) -> Tokenizer:
    return Tokenizer.from_file(path)


class TextToTextModel(nn.Module):
    """A T5 trained on (source, target) pairs. With labels: (logits, loss) by teacher
    forcing. Without: the greedy generation, (ids (B, MAX_TARGET_LEN) as floats, -1
    after </s>, None), so that prediction handles it like any head's outputs."""

    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone  # the T5 (named like the other heads' backbones)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        if labels is not None:
            return self.backbone(input_ids, attention_mask, labels=labels)
        from stages.models.generation import generate_seq2seq

        config = self.backbone.config
        ids = generate_seq2seq(self.backbone, input_ids, attention_mask, max_new_tokens=MAX_TARGET_LEN,
                               eos_token_id=config.eos_token_id)[:, 1:]  # (B, n <= MAX_TARGET_LEN)
        # -1 after the first </s> (greedy decoding keeps emitting it for finished rows).
        after_eos = (ids == config.eos_token_id).long().cumsum(dim=1) - (ids == config.eos_token_id).long() > 0
        ids = ids.masked_fill(after_eos, -1)
        padded = torch.full((ids.size(0), MAX_TARGET_LEN), -1, dtype=torch.long, device=ids.device)
        padded[:, :ids.size(1)] = ids
        return padded.float(), None
