"""Rank classification for a T5 (finetune.t5_scoring: rank): score every label word, pick the best.

Instead of generating text and reading it back, the model scores each of the task's
label words ("negative", "positive") as the target: the sum of the log-probabilities the
decoder gives its tokens, </s> included, given the encoder input. The prediction is the
word with the highest score (the T5 paper's "rank classification", and how
lm-evaluation-harness scores multiple choice). A small or barely trained T5 that cannot
yet spell a label word still ranks them, so its accuracy says what it learnt instead of
being 0 with every generation unreadable.

Outputs are (N, num_labels) log-likelihoods, like a classification head's logits: they
are scored and written by the heads' code (argmax), and are never unreadable. Training
is unchanged (teacher forcing on the gold label word). GLUE classification tasks only:
STS-B, SQuAD and CoNLL-2003 always generate.

Only the workers rank: the saved model/ predicts by generating unless its
`label_targets` are set (`enable_rank_scoring`).

The scoring itself (`text_to_text.model.label_log_likelihoods`) is one encoder pass and
one decoder pass (all label words of all rows at once) per batch, on every rank alike:
under ZeRO-3 each pass gathers parameters collectively, and every rank predicts the same
number of batches (`stages.finetune.batches.prediction_shard`).
"""

from __future__ import annotations

import numpy as np
import torch


def ranks_labels(spec, t5_scoring: str) -> bool:
    """Whether `spec` is predicted by ranking its label words under `t5_scoring`."""
    return t5_scoring == "rank" and hasattr(spec, "text_columns") and not spec.is_regression


def label_targets(spec, tokenizer_path: str) -> np.ndarray:
    """The task's label words as decoder targets (num_labels, MAX_TARGET_LEN), class-id order."""
    from stages.finetune.encode import load_task_tokenizer
    from stages.finetune.glue.text_to_text import MAX_TARGET_LEN, label_words
    from stages.finetune.text_to_text.pairs import target_ids

    # The source length is irrelevant here: targets are encoded without truncation or padding.
    return target_ids(load_task_tokenizer(tokenizer_path, MAX_TARGET_LEN), list(label_words(spec)), MAX_TARGET_LEN)


def enable_rank_scoring(model, spec, cfg, tokenizer_path: str) -> None:
    """Make a TextToTextModel predict by ranking `spec`'s label words when the config
    asks for it (the workers call this on the model they build)."""
    if ranks_labels(spec, cfg.t5_scoring):
        model.label_targets = torch.from_numpy(label_targets(spec, tokenizer_path))
