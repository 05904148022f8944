"""One task, end to end: rows -> requests -> a scorer's results -> scores and per-example records.

    report = evaluate_task(resolve_task_spec("piqa"), data_dir, scorer, shots=5, seed=1234)
    report.scores["acc"].value, report.scores["acc"].ci95, report.scores["acc"].baseline

Split across workers (every worker builds the same plan from the same inputs; the
demonstration draws are replayed over all examples, so a slice gets the draws it would
have had in one process):

    plan = plan_task(spec, data_dir, shots=5, seed=1234, max_examples=None)
    part = plan.shard(rank, world_size)                  # contiguous positions of the selection
    answered = run_requests(scorer, spec, plan.requests(part))    # on worker `rank`
    report = score_task(plan, merge_answered([answered_0, answered_1, ...]))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stages.evaluate import metrics
from stages.evaluate.fewshot import DEFAULT_SEED, draw_demonstrations, select_examples
from stages.evaluate.generation_task import score_text_generation, uses_text_metrics
from stages.evaluate.prompts import Request, doc_choices, doc_target, example_requests, gold_index
from stages.evaluate.readers import Rows, read_task_data
from stages.evaluate.requests import GenerationResult, LoglikelihoodResult, RollingResult, Scorer
from stages.evaluate.spec import TaskSpec
from stages.evaluate.templates import render_in_row

Result = LoglikelihoodResult | RollingResult | GenerationResult
Answered = list[tuple[Request, Result]]


@dataclass(frozen=True)
class TaskPlan:
    """Which rows are evaluated and with which demonstrations; requests on demand."""

    spec: TaskSpec
    data: dict[str, Rows]
    shots: int
    seed: int
    selection: list[int]                # evaluated row indices, ascending
    demonstrations: list[list[int]]     # per selected row: row indices in the demonstration split

    @property
    def eval_rows(self) -> Rows:
        return self.data[self.spec.eval_split]

    @property
    def demo_rows(self) -> Rows:
        return self.data[self.spec.demonstration_split]

    def shard(self, index: int, count: int) -> range:
        """Positions (into `selection`) of shard `index` of `count`: contiguous, sizes
        differing by at most one, together covering every position once."""
        if not 0 <= index < count:
            raise ValueError(f"shard index {index} is not in [0, {count})")
        size, extra = divmod(len(self.selection), count)
        start = index * size + min(index, extra)
        return range(start, start + size + (1 if index < extra else 0))

    def requests(self, positions: range | list[int] | None = None) -> list[Request]:
        """The requests of the selected rows at `positions` (default: all), in order."""
        positions = range(len(self.selection)) if positions is None else positions
        eval_rows, demo_rows = self.eval_rows, self.demo_rows
        out: list[Request] = []
        for position in positions:
            i = self.selection[position]
            demos = [(demo_rows.rows[j], demo_rows.where[j]) for j in self.demonstrations[position]]
            out.extend(example_requests(self.spec, i, eval_rows.rows[i], eval_rows.where[i], demos))
        return out


@dataclass
class TaskReport:
    task: str
    kind: str
    shots: int
    seed: int
    num_examples: int                   # examples scored
    num_truncated: int                  # examples whose prompt was cut from the left
    scores: dict[str, metrics.Score]
    examples: list[dict[str, Any]] = field(default_factory=list)   # one record per scored row
    num_skipped: int = 0                # selected examples not scored: a choice longer than the context

    def metrics(self) -> dict[str, float]:
        """Flat numbers for a manifest: {"acc": 0.71, "acc_ci95_low": ..., "acc_baseline": ...}."""
        flat: dict[str, float] = {"num_examples": self.num_examples, "num_truncated": self.num_truncated,
                                  "num_skipped": self.num_skipped}
        for name, score in self.scores.items():
            flat[name] = score.value
            if score.ci95 is not None:
                flat[f"{name}_ci95_low"], flat[f"{name}_ci95_high"] = score.ci95
            if score.baseline is not None:
                flat[f"{name}_baseline"] = score.baseline
        return flat

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "kind": self.kind, "shots": self.shots, "seed": self.seed,
                "num_examples": self.num_examples, "num_truncated": self.num_truncated,
                "num_skipped": self.num_skipped, "scores": {name: score.to_dict() for name, score in self.scores.items()}}


def plan_task(spec: TaskSpec, data_dir: str | Path, *, shots: int = 0, seed: int = DEFAULT_SEED,
              max_examples: int | None = None, data: dict[str, Rows] | None = None) -> TaskPlan:
    """Read the task's files (or reuse `data`, another plan's, for another shot count),
    pick the evaluated rows (all, or `max_examples` drawn with `seed`) and draw every
    row's demonstrations (lm-eval's sampler, `seed`)."""
    if spec.kind == "perplexity" and shots:
        raise ValueError(f"task {spec.name!r} is kind: perplexity; it takes no demonstrations (shots=0)")
    data = read_task_data(spec, data_dir) if data is None else data
    eval_rows, demo_rows = data[spec.eval_split], data[spec.demonstration_split]
    selection = select_examples(len(eval_rows), max_examples, seed)
    demonstrations = draw_demonstrations(eval_rows.rows, demo_rows.rows, selection, shots, seed,
                                         spec.fewshot_sampler)
    return TaskPlan(spec=spec, data=data, shots=shots, seed=seed, selection=selection,
                    demonstrations=demonstrations)


def run_requests(scorer: Scorer, spec: TaskSpec, requests: list[Request]) -> Answered:
    """Ask the scorer (one call for the whole list, so that it can batch)."""
    if spec.kind == "perplexity":
        results: list = scorer.loglikelihood_rolling(requests, stride=spec.stride)
    elif spec.kind == "generation":
        results = scorer.generate(requests)
    else:
        results = scorer.loglikelihood(requests)
    if len(results) != len(requests):
        raise RuntimeError(f"the scorer answered {len(results)} of {len(requests)} requests")
    return list(zip(requests, results))


def merge_answered(parts: list[Answered]) -> Answered:
    """Workers' answers in example order (then choice order), whatever order they came in."""
    merged = [pair for part in parts for pair in part]
    return sorted(merged, key=lambda pair: (pair[0].example, getattr(pair[0], "choice", 0)))


def score_task(plan: TaskPlan, answered: Answered) -> TaskReport:
    """Scores and per-example records from the answers to every request of the plan."""
    by_example: dict[int, list[tuple[Request, Result]]] = {}
    for request, result in answered:
        by_example.setdefault(request.example, []).append((request, result))
    missing = [i for i in plan.selection if i not in by_example]
    if missing:
        raise ValueError(f"no answers for {len(missing)} evaluated examples (first: {missing[:5]}); "
                         "merge every worker's answers before scoring")
    spec, rows = plan.spec, plan.eval_rows
    # An example with a choice the model cannot read whole is left out, and counted, rather
    # than scored on a cut choice that would compete unfairly with its uncut siblings.
    scored = [i for i in plan.selection
              if not any(getattr(result, "too_long", False) for _, result in by_example[i])]
    if not scored:
        raise ValueError(
            f"task {spec.name!r}: none of its {len(plan.selection)} evaluated examples could be scored: "
            "each has a target longer than the model's context; evaluate it with a model of a longer "
            "context (dataset.seq_len) or drop it from the task list")
    pairs = [by_example[i] for i in scored]
    score = _SCORERS[spec.kind]
    scores, examples = score(spec, rows, scored, pairs, plan.seed)
    truncated = sum(any(getattr(result, "truncated", False) for _, result in pair) for pair in pairs)
    return TaskReport(task=spec.name, kind=spec.kind, shots=plan.shots, seed=plan.seed,
                      num_examples=len(scored), num_truncated=truncated, scores=scores,
                      examples=examples, num_skipped=len(plan.selection) - len(scored))


def evaluate_task(spec: TaskSpec, data_dir: str | Path, scorer: Scorer, *, shots: int = 0,
                  seed: int = DEFAULT_SEED, max_examples: int | None = None) -> TaskReport:
    """Plan, score every request in one process, and report."""
    plan = plan_task(spec, data_dir, shots=shots, seed=seed, max_examples=max_examples)
    return score_task(plan, run_requests(scorer, spec, plan.requests()))


def _score_perplexity(spec, rows, selection, pairs, seed):
    records, ll, tokens, words, num_bytes = [], [], [], [], []
    for i, pair in zip(selection, pairs):
        (request, result), = pair
        counted = request.text if spec.count_text is None else render_in_row(
            spec.count_text, rows.rows[i], key="count_text", where=rows.where[i], spec_file=spec.file)
        n_words, n_bytes = metrics.count_words(counted, spec.word_count), len(counted.encode("utf-8"))
        ll.append(result.logprob); tokens.append(result.num_tokens); words.append(n_words); num_bytes.append(n_bytes)
        records.append({"example": i, "logprob": result.logprob, "num_tokens": result.num_tokens,
                        "num_words": n_words, "num_bytes": n_bytes})
    return metrics.perplexity_scores(ll, tokens, words, num_bytes, spec.metrics, seed), records


def _score_cloze(spec, rows, selection, pairs, seed):
    records = []
    for i, pair in zip(selection, pairs):
        (_, result), = pair
        records.append({"example": i, "logprob": result.logprob, "is_greedy": result.is_greedy,
                        "num_tokens": result.num_tokens, "truncated": result.truncated})
    scores = metrics.cloze_scores([r["logprob"] for r in records], [r["is_greedy"] for r in records],
                                  spec.metrics, seed)
    return scores, records


def _score_multiple_choice(spec, rows, selection, pairs, seed):
    records, predictions, golds, num_choices = [], [], [], []
    for i, pair in zip(selection, pairs):
        row, where = rows.rows[i], rows.where[i]
        choices = doc_choices(spec, row, where)
        gold = gold_index(spec, row, where, choices)
        logprobs = [result.logprob for _, result in pair]
        if len(logprobs) != len(choices):
            raise ValueError(f"{where}: {len(logprobs)} answers for {len(choices)} choices")
        predicted = metrics.choice_predictions(logprobs, choices)
        predictions.append(predicted); golds.append(gold); num_choices.append(len(choices))
        records.append({"example": i, "gold": gold, **predicted, "logprobs": logprobs,
                        "acc": int(predicted["pred"] == gold), "acc_norm": int(predicted["pred_norm"] == gold),
                        "truncated": any(result.truncated for _, result in pair)})
    scores = metrics.multiple_choice_scores(predictions, golds, num_choices, spec.has_classes,
                                            spec.metrics, seed)
    return scores, records


def _score_generation(spec, rows, selection, pairs, seed):
    if uses_text_metrics(spec):  # BLEU, chrF, ROUGE of whole outputs (generation_task.py)
        return score_text_generation(spec, rows, selection, pairs, seed)
    records, exact, f1 = [], [], []
    for i, pair in zip(selection, pairs):
        (_, result), = pair
        target = doc_target(spec, rows.rows[i], rows.where[i])
        answers = target if isinstance(target, list) else [target]
        em, f = metrics.squad_example_scores(result.text, answers)
        exact.append(em); f1.append(f)
        records.append({"example": i, "prediction": result.text, "answers": answers, "exact_match": em,
                        "f1": f, "truncated": result.truncated})
    return metrics.generation_scores(exact, f1, spec.metrics, seed), records


_SCORERS = {"perplexity": _score_perplexity, "cloze": _score_cloze,
            "multiple_choice": _score_multiple_choice, "generation": _score_generation}
