"""The CoNLL-2003 task in the finetune stage: read, encode, train on the workers, score.

Writes into `<output_dir>/<task>/`:
    dev_predictions.txt, test_predictions.txt   conlleval input: `word gold predicted` lines
    metrics.json   entity-level f1/precision/recall on valid.txt (micro, conlleval rules),
                   per type (PER/f1 ...), test_f1 etc. on test.txt, the baseline (0: tagging
                   nothing finds no entity) and 95% interval (bootstrap over sentences) of
                   f1 and test_f1 (`stages.finetune.score_context`), and run facts

A T5 tags as text to text (`stages.finetune.text_to_text.ner`: "ner: <words>" ->
"EU [ORG] ; German [MISC]", parsed back into tags per word); the same files, and
metrics.json also counts the generated pieces that could not be read back
(malformed_pieces, unmatched_entities; test_ for test.txt).
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from stages.finetune.best_checkpoint import best_epoch_facts
from stages.finetune.conll.encode import encode_sentences, word_predictions
from stages.finetune.conll.evaluate import entity_counts, entity_scores, write_conlleval
from stages.finetune.conll.reader import read_conll
from stages.finetune.encode import load_task_tokenizer
from stages.finetune.outputs import write_task_metrics
from stages.finetune.prepared import PreparedTask
from stages.finetune.score_context import as_metrics, resampled_context
from stages.finetune.worker import OUTPUTS_NAME


def finetune_conll(spec, cfg, *, seed: int, source: dict[str, Any], data_dir: Path, task_dir: Path,
                   storage_path: Path, metrics_log, tracking: dict[str, Any] | None = None) -> dict[str, Any]:
    from stages.finetune.run import train_prepared_task

    started = time.perf_counter()
    prepared = prepare_conll(spec, cfg, source=source, data_dir=data_dir, seed=seed)
    sentences = prepared.data["sentences"]
    print(f"[finetune] {spec.name}: {prepared.description}", flush=True)

    result = train_prepared_task(spec, cfg, seed=seed, source=source, prepared=prepared, task_dir=task_dir,
                                 storage_path=storage_path, metrics_log=metrics_log, tracking=tracking)
    scores: dict[str, float] = {}
    contexts = {}
    with np.load(task_dir / OUTPUTS_NAME) as outputs:
        for split in ("dev", "test"):
            predicted = prepared.data["word_tags"][split](outputs[split])
            write_conlleval(task_dir / f"{split}_predictions.txt", sentences[split].words,
                            sentences[split].tags, predicted)
            split_scores = prepared.scorers[split](outputs[split])
            prefix = "" if split == "dev" else "test_"
            scores.update({f"{prefix}{k}": v for k, v in split_scores.items()})
            contexts[f"{prefix}f1"] = f1_context(sentences[split].tags, predicted, spec.labels, seed=seed)
    metrics = {**scores, **as_metrics(contexts),
               "train_examples": len(sentences["train"]), "dev_examples": len(sentences["dev"]),
               "test_examples": len(sentences["test"]), "epochs": cfg.epochs,
               **best_epoch_facts(task_dir, cfg.keep_best),
               "steps": int(result.metrics.get("step", 0)) if result.metrics else 0,
               "seconds": round(time.perf_counter() - started, 2)}
    write_task_metrics(task_dir, {"task": spec.name, "primary_metric": spec.metrics[0], **metrics})
    print(f"[finetune] {spec.name}: dev f1={scores['f1']:.4f} test f1={scores['test_f1']:.4f} "
          f"in {metrics['seconds']:.1f}s", flush=True)
    return metrics


def f1_context(gold: list[list[str]], predicted: list[list[str]], tags: tuple[str, ...], *, seed: int):
    """Entity F1's baseline and 95% interval (bootstrap over sentences). The baseline is
    the best F1 of a tagger that ignores its input and gives every word the same tag
    (all O finds nothing: 0; all I-PER makes each sentence one entity, right where a
    sentence is a name): near 0, but what a collapsed model really scores."""
    from stages.finetune.intervals import micro_f1

    baseline, best_tag = max((micro_f1(*entity_counts(gold, [[tag] * len(s) for s in gold])), tag)
                             for tag in tags)
    return resampled_context(micro_f1, entity_counts(gold, predicted), float(baseline),
                             f"best constant tagger (every word {best_tag})", seed=seed)


def prepare_conll(spec, cfg, *, source: dict[str, Any], data_dir: Path, seed: int) -> PreparedTask:
    """Seeded subsets of the three files, one label per word on its first subword (a T5:
    as text to text). data: {"sentences", "word_tags": split -> (outputs -> tags per
    sentence), and for the token head "first_tokens"}."""
    tokenizer = load_task_tokenizer(source["tokenizer"], cfg.max_seq_len)
    if cfg.source == "hub":
        from stages.finetune.hub import read_conll_splits

        sentences = read_conll_splits(spec)
    else:
        sentences = {split: read_conll(Path(data_dir) / spec.directory / name) for split, name in spec.files.items()}
    sentences["train"] = sample_sentences(sentences["train"], cfg.max_train_examples, seed)
    for split in ("dev", "test"):
        sentences[split] = sample_sentences(sentences[split], cfg.max_eval_examples, seed)
    if source.get("family") == "t5":
        from stages.finetune.text_to_text.ner import prepare_ner_text

        return prepare_ner_text(tokenizer, source["tokenizer"], sentences)
    encoded, first_tokens = {}, {}
    for split, batch in sentences.items():
        encoded[split], first_tokens[split] = encode_sentences(tokenizer, batch, spec.labels)
    return PreparedTask(
        encoded=encoded,
        scorers={split: partial(split_scores, spec, sentences[split].tags, first_tokens[split], cfg.max_seq_len)
                 for split in ("dev", "test")},
        predict_splits=("dev", "test"),
        data={"sentences": sentences, "first_tokens": first_tokens,
              "word_tags": {split: partial(token_head_tags, spec, first_tokens[split], cfg.max_seq_len)
                            for split in ("dev", "test")}},
        description=f"{len(sentences['train'])} train, {len(sentences['dev'])} dev, "
                    f"{len(sentences['test'])} test sentences")


def split_scores(spec, gold_tags: list[list[str]], first_tokens: list[list[int]], max_seq_len: int,
                 outputs: np.ndarray) -> dict[str, float]:
    """Head outputs (N, T * num_labels) -> entity-level scores; what rank 0 logs per
    evaluation (the driver also writes the conlleval files)."""
    return entity_scores(gold_tags, token_head_tags(spec, first_tokens, max_seq_len, outputs))


def token_head_tags(spec, first_tokens: list[list[int]], max_seq_len: int, outputs: np.ndarray) -> list[list[str]]:
    """Head outputs (N, T * num_labels) -> a tag per word."""
    logits = outputs.reshape(len(first_tokens), max_seq_len, spec.num_labels)
    return word_predictions(logits, first_tokens, spec.labels)


def sample_sentences(sentences, max_examples: int | None, seed: int):
    """A seeded subset in file order (None = all)."""
    if max_examples is None or max_examples >= len(sentences):
        return sentences
    return sentences.subset(np.sort(np.random.default_rng(seed).choice(len(sentences), max_examples, replace=False)))
