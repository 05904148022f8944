"""CoNLL-2003 named entities on a token head: one label per word, on its first subword
(`stages.finetune.conll`).

Writes into `<output_dir>/<task>/`:
    dev_predictions.txt, test_predictions.txt   conlleval input: `word gold predicted` lines
    metrics.json   entity-level f1/precision/recall on valid.txt (micro, conlleval rules),
                   per type (PER/f1 ...), test_f1 etc. on test.txt, the baseline (0: tagging
                   nothing finds no entity) and 95% interval (bootstrap over sentences) of
                   f1 and test_f1 (`stages.finetune.score_context`), and run facts

The same writing serves a T5 tagging as text to text (`families.text_to_text`), whose
metrics.json also counts the generated pieces that could not be read back.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from stages.finetune.conll.encode import encode_sentences, word_predictions
from stages.finetune.conll.evaluate import entity_counts, entity_scores, write_conlleval
from stages.finetune.conll.reader import ConllSentences, read_conll
from stages.finetune.conll.spec import ConllSpec
from stages.finetune.encode import load_task_tokenizer
from stages.finetune.intervals import micro_f1
from stages.finetune.prepared import PreparedTask
from stages.finetune.score_context import as_metrics, resampled_context
from stages.finetune.task_family import TaskFamily, TaskRequest

SCORED_SPLITS = ("dev", "test")


class ConllFamily(TaskFamily):
    name = "conll"
    spec_types = (ConllSpec,)

    def prepare(self, request: TaskRequest) -> PreparedTask:
        """One label per word on its first subword; dev and test are scored."""
        spec, cfg = request.spec, request.cfg
        tokenizer = load_task_tokenizer(request.source.tokenizer, cfg.max_seq_len)
        sentences = read_conll_sentences(request)
        encoded, first_tokens = {}, {}
        for split, batch in sentences.items():
            encoded[split], first_tokens[split] = encode_sentences(tokenizer, batch, spec.labels)
        return PreparedTask(
            encoded=encoded,
            scorers={split: partial(split_scores, spec, sentences[split].tags, first_tokens[split], cfg.max_seq_len)
                     for split in SCORED_SPLITS},
            predictors={split: partial(token_head_tags, spec, first_tokens[split], cfg.max_seq_len)
                        for split in SCORED_SPLITS},
            predict_splits=SCORED_SPLITS,
            data={"sentences": sentences, "first_tokens": first_tokens},
            description=f"{len(sentences['train'])} train, {len(sentences['dev'])} dev, "
                        f"{len(sentences['test'])} test sentences")

    def write_outputs(self, request: TaskRequest, prepared: PreparedTask, outputs: dict[str, np.ndarray],
                      task_dir: Path) -> dict[str, Any]:
        sentences = prepared.data["sentences"]
        predicted = self.predict(prepared, outputs)
        scores: dict[str, float] = {}
        contexts = {}
        for split in SCORED_SPLITS:
            write_conlleval(task_dir / f"{split}_predictions.txt", sentences[split].words,
                            sentences[split].tags, predicted[split])
            prefix = "" if split == "dev" else "test_"
            scores.update({f"{prefix}{k}": v for k, v in prepared.scorers[split](outputs[split]).items()})
            contexts[f"{prefix}f1"] = f1_context(sentences[split].tags, predicted[split], request.spec.labels,
                                                 seed=request.seed)
        return {**scores, **as_metrics(contexts),
                "train_examples": len(sentences["train"]), "dev_examples": len(sentences["dev"]),
                "test_examples": len(sentences["test"])}

    def summary(self, spec, metrics: dict[str, Any]) -> str:
        return f"dev f1={metrics['f1']:.4f} test f1={metrics['test_f1']:.4f}"


def read_conll_sentences(request: TaskRequest) -> dict[str, ConllSentences]:
    """Seeded subsets of the three files (finetune.max_train_examples for train,
    max_eval_examples for dev and test), from the files or the Hub."""
    spec, cfg, seed = request.spec, request.cfg, request.seed
    if cfg.source == "hub":
        from stages.finetune.conll.hub import read_conll_splits

        sentences = read_conll_splits(spec)
    else:
        sentences = {split: read_conll(Path(request.data_dir) / spec.directory / name)
                     for split, name in spec.files.items()}
    sentences["train"] = sample_sentences(sentences["train"], cfg.max_train_examples, seed)
    for split in SCORED_SPLITS:
        sentences[split] = sample_sentences(sentences[split], cfg.max_eval_examples, seed)
    return sentences


def f1_context(gold: list[list[str]], predicted: list[list[str]], tags: tuple[str, ...], *, seed: int):
    """Entity F1's baseline and 95% interval (bootstrap over sentences). The baseline is
    the best F1 of a tagger that ignores its input and gives every word the same tag
    (all O finds nothing: 0; all I-PER makes each sentence one entity, right where a
    sentence is a name): near 0, but what a collapsed model really scores."""
    baseline, best_tag = max((micro_f1(*entity_counts(gold, [[tag] * len(s) for s in gold])), tag)
                             for tag in tags)
    return resampled_context(micro_f1, entity_counts(gold, predicted), float(baseline),
                             f"best constant tagger (every word {best_tag})", seed=seed)


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
