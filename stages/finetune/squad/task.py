"""One SQuAD task in the finetune stage: windows, training on the workers, decoding, files.

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

A T5 answers as text to text (`stages.finetune.text_to_text.squad`): predictions.json and
metrics.json as above (v2.0: an empty answer is the no-answer prediction, no threshold);
no nbest_predictions.json or null_odds.json, since greedy generation gives one answer
and no null score (metrics.json's `files_not_written` says so).
"""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from stages.finetune.best_checkpoint import best_epoch_facts
from stages.finetune.encode import EncodedSplit, load_task_tokenizer, pair_layout, raw_tokenizer
from stages.finetune.outputs import write_task_metrics
from stages.finetune.prepared import PreparedTask
from stages.finetune.squad.decode import decode
from stages.finetune.score_context import ScoreContext, as_metrics, proportion_context, resampled_context
from stages.finetune.squad.evaluate import best_threshold, per_question_scores, score_question, squad_scores
from stages.finetune.squad.reader import SquadExample, read_squad, split_by_article
from stages.finetune.squad.windows import build_windows
from stages.finetune.worker import OUTPUTS_NAME

AT_THRESHOLD_0 = "_at_threshold_0"  # v2.0: the scores with no-answer where null odds > 0


def finetune_squad(spec, cfg, *, seed: int, source: dict[str, Any], data_dir: Path, task_dir: Path,
                   storage_path: Path, metrics_log, tracking: dict[str, Any] | None = None) -> dict[str, Any]:
    from stages.finetune.run import train_prepared_task

    started = time.perf_counter()
    prepared = prepare_squad(spec, cfg, source=source, data_dir=data_dir, seed=seed)
    train, dev, windows = prepared.data["train"], prepared.data["dev"], prepared.data.get("windows")
    split_note = prepared.data["split_note"]
    print(f"[finetune] {spec.name}: {prepared.description}", flush=True)

    result = train_prepared_task(spec, cfg, seed=seed, source=source, prepared=prepared, task_dir=task_dir,
                                 storage_path=storage_path, metrics_log=metrics_log, tracking=tracking)
    with np.load(task_dir / OUTPUTS_NAME) as outputs:
        dev_outputs = outputs["dev"]
    if windows is None:  # a T5: generated answer texts
        scores, facts, scored = _text_results(prepared, dev_outputs, task_dir)
    else:
        scores, facts, scored = _span_results(spec, cfg, dev, windows, dev_outputs, task_dir)
    gold = {e.id: [a.text for a in e.answers] for e in dev}
    contexts: dict[str, ScoreContext] = {}
    for suffix, predictions in scored.items():
        contexts.update(squad_contexts(predictions, gold, version=spec.version, seed=seed, suffix=suffix))

    metrics = {**scores, **as_metrics(contexts), "train_examples": len(train), "dev_examples": len(dev), **facts,
               **best_epoch_facts(task_dir, cfg.keep_best),
               "epochs": cfg.epochs, "steps": int(result.metrics.get("step", 0)) if result.metrics else 0,
               "seconds": round(time.perf_counter() - started, 2)}
    write_task_metrics(task_dir, {"task": spec.name, "primary_metric": spec.metrics[0], "split": split_note,
                                  **metrics})
    print(f"[finetune] {spec.name}: f1={scores['f1']:.4f} exact_match={scores['exact_match']:.4f} "
          f"in {metrics['seconds']:.1f}s", flush=True)
    return metrics


def _span_results(spec, cfg, dev: list[SquadExample], windows, outputs: np.ndarray, task_dir: Path,
                  ) -> tuple[dict[str, float], dict[str, Any], dict[str, dict[str, str]]]:
    """(scores, run facts, {metric name suffix: the predictions those scores are of})."""
    start_logits, end_logits = np.split(outputs, 2, axis=1)  # 2 x (N, T)
    decoded = decode(dev, windows["dev"], start_logits, end_logits,
                     n_best_size=cfg.n_best_size, max_answer_len=cfg.max_answer_len)
    scores, predictions = score_decoded(decoded, dev, version=spec.version)
    _write_json(task_dir / "predictions.json", predictions)
    _write_json(task_dir / "nbest_predictions.json", decoded.n_best)
    scored = {"": predictions}
    if spec.version == "2.0":
        _write_json(task_dir / "null_odds.json", decoded.null_odds)
        scored[AT_THRESHOLD_0] = decoded.answers(0.0)
    return scores, {"train_windows": len(windows["train"]), "dev_windows": len(windows["dev"])}, scored


def _text_results(prepared: PreparedTask, outputs: np.ndarray, task_dir: Path,
                  ) -> tuple[dict[str, float], dict[str, Any], dict[str, dict[str, str]]]:
    answers = prepared.data["answers"](outputs)
    _write_json(task_dir / "predictions.json", answers)
    cut_off = prepared.data["answers_cut_off"]
    return prepared.scorers["dev"](outputs), {
        "train_answers_cut_off": cut_off["train"], "dev_answers_cut_off": cut_off["dev"],
        "files_not_written": "nbest_predictions.json and null_odds.json: a T5 generates one answer greedily, "
                             "with no n-best list and no null score (an empty answer is the no-answer prediction)"
    }, {"": answers}


def squad_contexts(predictions: dict[str, str], gold: dict[str, list[str]], *, version: str, seed: int,
                   suffix: str = "") -> dict[str, ScoreContext]:
    """Baselines and 95% intervals of exact_match<suffix> (Wilson: a proportion) and
    f1<suffix> (bootstrap of the per-question mean). The baseline is the score of always
    answering nothing: the share of unanswerable questions on v2.0, 0 on v1.1 (but for
    gold answers like "." that an empty answer matches exactly)."""
    from stages.finetune.intervals import mean

    em, f1 = per_question_scores(predictions, gold, version=version)
    empty_em, empty_f1 = per_question_scores({qid: "" for qid in gold}, gold, version=version)
    rule = f"always answering nothing (SQuAD v{version} rules)"
    return {f"exact_match{suffix}": proportion_context(em, float(empty_em.mean()), rule),
            f"f1{suffix}": resampled_context(mean, (f1,), float(empty_f1.mean()), rule, seed=seed)}


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


def prepare_squad(spec, cfg, *, source: dict[str, Any], data_dir: Path, seed: int) -> PreparedTask:
    """Train and scored questions (the dev file split by article when there is no train
    file), cut into windows (a T5: as text to text, the source cut at max_seq_len); only
    the dev split is predicted."""
    task_tokenizer = load_task_tokenizer(source["tokenizer"], cfg.max_seq_len)
    layout, tokenizer = pair_layout(task_tokenizer), raw_tokenizer(task_tokenizer)
    if cfg.source == "hub":
        from stages.finetune.hub import SQUAD_HUB, read_squad_splits

        (train, dev), split_note = read_squad_splits(spec), f"{SQUAD_HUB[spec.version]} from the Hub"
    else:
        train, dev, split_note = squad_splits(spec, Path(data_dir), cfg.squad_eval_fraction, seed)
    train, dev = sample(train, cfg.max_train_examples, seed), sample(dev, cfg.max_eval_examples, seed)
    if source.get("family") == "t5":
        from stages.finetune.text_to_text.squad import prepare_squad_text

        return prepare_squad_text(task_tokenizer, source["tokenizer"], train, dev, split_note, version=spec.version)
    windows = {name: build_windows(tokenizer, layout, examples, max_seq_len=cfg.max_seq_len,
                                   doc_stride=cfg.doc_stride, max_query_len=cfg.max_query_len)
               for name, examples in (("train", train), ("dev", dev))}
    return PreparedTask(
        encoded={name: EncodedSplit(w.input_ids, w.attention_mask, w.labels, w.token_type_ids)
                 for name, w in windows.items()},
        scorers={"dev": partial(dev_scores, dev, windows["dev"], n_best_size=cfg.n_best_size,
                                max_answer_len=cfg.max_answer_len, version=spec.version)},
        predict_splits=("dev",),
        data={"train": train, "dev": dev, "windows": windows, "split_note": split_note},
        description=f"{len(train)} train questions ({len(windows['train'])} windows), {len(dev)} scored "
                    f"({len(windows['dev'])} windows); {split_note}")


def dev_scores(examples: list[SquadExample], windows, outputs: np.ndarray, *, n_best_size: int,
               max_answer_len: int, version: str) -> dict[str, float]:
    """Head outputs (N windows, 2T) -> EM/F1 (and v2.0's threshold scores); what rank 0
    logs after every epoch. The driver decodes once more for the prediction files."""
    start_logits, end_logits = np.split(outputs, 2, axis=1)  # 2 x (N, T)
    decoded = decode(examples, windows, start_logits, end_logits,
                     n_best_size=n_best_size, max_answer_len=max_answer_len)
    return score_decoded(decoded, examples, version=version)[0]


def score_decoded(decoded, examples: list[SquadExample], version: str) -> tuple[dict[str, float], dict[str, str]]:
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


def _write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
