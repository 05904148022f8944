"""Entity-level scores with seqeval (default mode: the conlleval script's rules) and
predictions in conlleval's input format."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def entity_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
    """{"precision", "recall", "f1"} micro over entities, plus "<TYPE>/precision" etc.
    per type and "<TYPE>/support" (gold entities). No entities at all scores 0."""
    from seqeval.metrics import classification_report

    if not any(t != "O" for tags in [*gold, *predicted] for t in tags):
        return {"precision": 0.0, "recall": 0.0, "f1": 0.0}  # seqeval would divide by zero
    report = classification_report(gold, predicted, output_dict=True, zero_division=0)
    scores = {name: float(report["micro avg"][key]) for name, key in
              (("precision", "precision"), ("recall", "recall"), ("f1", "f1-score"))}
    for kind, row in report.items():
        if kind.endswith(" avg"):
            continue
        scores.update({f"{kind}/precision": float(row["precision"]), f"{kind}/recall": float(row["recall"]),
                       f"{kind}/f1": float(row["f1-score"]), f"{kind}/support": int(row["support"])})
    return scores


def entity_counts(gold: list[list[str]], predicted: list[list[str]]) -> tuple[np.ndarray, ...]:
    """Per sentence: (correct entities, predicted entities, gold entities), with seqeval's
    entity reading (conlleval rules). Their sums give `entity_scores`' micro F1, so a
    bootstrap over sentences can recompute it on every resample
    (`stages.finetune.intervals.micro_f1`)."""
    from seqeval.metrics.sequence_labeling import get_entities

    counts = np.zeros((3, len(gold)), dtype=np.int64)
    for i, (gold_tags, predicted_tags) in enumerate(zip(gold, predicted)):
        gold_set, predicted_set = set(get_entities(gold_tags)), set(get_entities(predicted_tags))
        counts[:, i] = len(gold_set & predicted_set), len(predicted_set), len(gold_set)
    return counts[0], counts[1], counts[2]


def write_conlleval(path: str | Path, words: list[list[str]], gold: list[list[str]],
                    predicted: list[list[str]]) -> Path:
    """`word gold predicted` per line, a blank line after each sentence: what
    `conlleval < file` reads."""
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f:
        for sentence, gold_tags, predicted_tags in zip(words, gold, predicted):
            f.writelines(f"{w} {g} {p}\n" for w, g, p in zip(sentence, gold_tags, predicted_tags))
            f.write("\n")
    return path
