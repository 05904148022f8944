"""SQuAD v1.1 / v2.0 on a span head: windows over long contexts, start/end logits decoded
into answers (`stages.finetune.squad`).

Writes into `<output_dir>/<task>/`:
    predictions.json        {question id: answer text} (the official scripts' input)
    nbest_predictions.json  {question id: [{text, probability, start_logit, end_logit}, ...]}
    null_odds.json          v2.0 only: {question id: null score - best span score}
    metrics.json            f1, exact_match (fractions; the official scripts print x100,
                            each version by its own script's rules), v2.0: also at
                            threshold 0 and the tuned threshold; each score's baseline
                            (always answering nothing) and 95% interval
                            (`stages.finetune.score_context`); run facts

Only the dev file is needed: without the train file, the dev file's articles are split
(seeded, finetune.squad_eval_fraction held out) and the held-out articles are scored.
A T5 answers as text to text (`families.text_to_text`), with the same metrics.json.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from stages.finetune.encode import EncodedSplit, load_task_tokenizer, pair_layout, raw_tokenizer
from stages.finetune.intervals import mean
from stages.finetune.prepared import PreparedTask
from stages.finetune.score_context import ScoreContext, as_metrics, proportion_context, resampled_context
from stages.finetune.squad.decode import Decoded, decode
from stages.finetune.squad.evaluate import best_threshold, per_question_scores, score_question, squad_scores
from stages.finetune.squad.reader import SquadExample, read_squad, split_by_article
from stages.finetune.squad.spec import SquadSpec
from stages.finetune.squad.windows import build_windows
from stages.finetune.task_family import TaskFamily, TaskRequest

AT_THRESHOLD_0 = "_at_threshold_0"  # v2.0: the scores with no-answer where null odds > 0


class SquadFamily(TaskFamily):
    name = "squad"
    spec_types = (SquadSpec,)

    def prepare(self, request: TaskRequest) -> PreparedTask:
        """Train and scored questions cut into windows; only the dev split is predicted."""
        spec, cfg = request.spec, request.cfg
        task_tokenizer = load_task_tokenizer(request.source.tokenizer, cfg.max_seq_len)
        layout, tokenizer = pair_layout(task_tokenizer), raw_tokenizer(task_tokenizer)
        train, dev, split_note = read_squad_questions(request)
        windows = {name: build_windows(tokenizer, layout, examples, max_seq_len=cfg.max_seq_len,
                                       doc_stride=cfg.doc_stride, max_query_len=cfg.max_query_len)
                   for name, examples in (("train", train), ("dev", dev))}
        return PreparedTask(
            encoded={name: EncodedSplit(w.input_ids, w.attention_mask, w.labels, w.token_type_ids)
                     for name, w in windows.items()},
            scorers={"dev": partial(dev_scores, dev, windows["dev"], n_best_size=cfg.n_best_size,
                                    max_answer_len=cfg.max_answer_len, version=spec.version)},
            predictors={"dev": partial(decode_outputs, dev, windows["dev"], n_best_size=cfg.n_best_size,
                                       max_answer_len=cfg.max_answer_len)},
            predict_splits=("dev",),
            data={"train": train, "dev": dev, "windows": windows, "split_note": split_note},
            description=f"{len(train)} train questions ({len(windows['train'])} windows), {len(dev)} scored "
                        f"({len(windows['dev'])} windows); {split_note}")

    def batch_labels(self, labels) -> dict[str, Any]:
        return {"start_positions": labels[:, 0], "end_positions": labels[:, 1]}  # labels (B, 2)

    def write_outputs(self, request: TaskRequest, prepared: PreparedTask, outputs: dict[str, np.ndarray],
                      task_dir: Path) -> dict[str, Any]:
        version = request.spec.version
        decoded = self.predict(prepared, outputs)["dev"]
        scores, predictions = score_decoded(decoded, prepared.data["dev"], version=version)
        write_json(task_dir / "predictions.json", predictions)
        write_json(task_dir / "nbest_predictions.json", decoded.n_best)
        scored = {"": predictions}
        if version == "2.0":
            write_json(task_dir / "null_odds.json", decoded.null_odds)
            scored[AT_THRESHOLD_0] = decoded.answers(0.0)
        windows = prepared.data["windows"]
        facts = {"train_windows": len(windows["train"]), "dev_windows": len(windows["dev"])}
        return squad_metrics(request, prepared, scores, facts, scored)

    def summary(self, spec, metrics: dict[str, Any]) -> str:
        return f"f1={metrics['f1']:.4f} exact_match={metrics['exact_match']:.4f}"


def squad_metrics(request: TaskRequest, prepared: PreparedTask, scores: dict[str, float], facts: dict[str, Any],
                  scored: dict[str, dict[str, str]]) -> dict[str, Any]:
    """A SQuAD task's part of metrics.json, for spans or generated answers: `scores`, the
    baseline and interval of each of `scored` ({metric name suffix: the predictions those
    scores are of}), example counts, the family's `facts` and how the questions were split."""
    train, dev = prepared.data["train"], prepared.data["dev"]
    gold = {e.id: [a.text for a in e.answers] for e in dev}
    contexts: dict[str, ScoreContext] = {}
    for suffix, predictions in scored.items():
        contexts.update(squad_contexts(predictions, gold, version=request.spec.version, seed=request.seed,
                                       suffix=suffix))
    return {**scores, **as_metrics(contexts), "train_examples": len(train), "dev_examples": len(dev), **facts,
            "split": prepared.data["split_note"]}


def squad_contexts(predictions: dict[str, str], gold: dict[str, list[str]], *, version: str, seed: int,
                   suffix: str = "") -> dict[str, ScoreContext]:
    """Baselines and 95% intervals of exact_match<suffix> (Wilson: a proportion) and
    f1<suffix> (bootstrap of the per-question mean). The baseline is the score of always
    answering nothing: the share of unanswerable questions on v2.0, 0 on v1.1 (but for
    gold answers like "." that an empty answer matches exactly)."""
    em, f1 = per_question_scores(predictions, gold, version=version)
    empty_em, empty_f1 = per_question_scores({qid: "" for qid in gold}, gold, version=version)
    rule = f"always answering nothing (SQuAD v{version} rules)"
    return {f"exact_match{suffix}": proportion_context(em, float(empty_em.mean()), rule),
            f"f1{suffix}": resampled_context(mean, (f1,), float(empty_f1.mean()), rule, seed=seed)}


def read_squad_questions(request: TaskRequest) -> tuple[list[SquadExample], list[SquadExample], str]:
    """(train, scored questions, how they were split): seeded subsets
    (finetune.max_train_examples, max_eval_examples), from the files or the Hub."""
    spec, cfg, seed = request.spec, request.cfg, request.seed
    if cfg.source == "hub":
        from stages.finetune.squad.hub import SQUAD_HUB, read_squad_splits

        (train, dev), split_note = read_squad_splits(spec), f"{SQUAD_HUB[spec.version]} from the Hub"
    else:
        train, dev, split_note = squad_splits(spec, Path(request.data_dir), cfg.squad_eval_fraction, seed)
    return sample(train, cfg.max_train_examples, seed), sample(dev, cfg.max_eval_examples, seed), split_note


def squad_splits(spec, data_dir: Path, eval_fraction: float, seed: int,
                 ) -> tuple[list[SquadExample], list[SquadExample], str]:
    dev = read_squad(data_dir / spec.directory / spec.dev_file)
    train_path = data_dir / spec.directory / spec.train_file
    if train_path.is_file():
        return read_squad(train_path), dev, f"trained on {spec.train_file}, scored on {spec.dev_file}"
    train, held_out = split_by_article(dev, eval_fraction=eval_fraction, seed=seed)
    num_articles = len({e.title for e in held_out})
    return train, held_out, (f"no {spec.train_file}: {spec.dev_file} split by article (seed {seed}), "
                             f"{num_articles} held-out articles scored")


def decode_outputs(examples: list[SquadExample], windows, outputs: np.ndarray, *, n_best_size: int,
                   max_answer_len: int) -> Decoded:
    """Head outputs (N windows, 2T) -> n-best answers and null odds per question."""
    start_logits, end_logits = np.split(outputs, 2, axis=1)  # 2 x (N, T)
    return decode(examples, windows, start_logits, end_logits, n_best_size=n_best_size,
                  max_answer_len=max_answer_len)


def dev_scores(examples: list[SquadExample], windows, outputs: np.ndarray, *, n_best_size: int,
               max_answer_len: int, version: str) -> dict[str, float]:
    """Head outputs (N windows, 2T) -> EM/F1 (and v2.0's threshold scores); what rank 0
    logs after every epoch. The driver decodes once more for the prediction files."""
    decoded = decode_outputs(examples, windows, outputs, n_best_size=n_best_size, max_answer_len=max_answer_len)
    return score_decoded(decoded, examples, version=version)[0]


def score_decoded(decoded: Decoded, examples: list[SquadExample], version: str,
                  ) -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, predictions written), scored by `version`'s official rules. v2.0: the
    null threshold is tuned for F1 on the scored questions (as evaluate-v2.0.py's
    best_f1); metrics also hold threshold 0."""
    gold = {e.id: [a.text for a in e.answers] for e in examples}
    if version != "2.0":
        predictions = decoded.answers(None)
        return squad_scores(predictions, gold, version=version), predictions
    per_question = {qid: score_question(decoded.best[qid], answers, version=version)
                    for qid, answers in gold.items()}
    has_answer = {e.id: bool(e.answers) for e in examples}
    _, threshold = best_threshold(decoded.best, {q: f for q, (_, f) in per_question.items()},
                                  decoded.null_odds, has_answer)
    predictions = decoded.answers(threshold)
    at_zero = squad_scores(decoded.answers(0.0), gold, version=version)
    return ({**squad_scores(predictions, gold, version=version), "null_threshold": float(threshold),
             "f1" + AT_THRESHOLD_0: at_zero["f1"], "exact_match" + AT_THRESHOLD_0: at_zero["exact_match"]},
            predictions)


def sample(examples: list, max_examples: int | None, seed: int) -> list:
    """A seeded subset in file order (None = all)."""
    if max_examples is None or max_examples >= len(examples):
        return examples
    keep = np.sort(np.random.default_rng(seed).choice(len(examples), size=max_examples, replace=False))
    return [examples[i] for i in keep]


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
