"""Start/end logits of every window -> the best answers of every question.

For each window, the n_best highest start and end logits inside the context give
candidate spans (end >= start, at most max_answer_len tokens); a span's score is
start logit + end logit, its text `context[offsets[start][0]:offsets[end][1]]`. The
null score of a question (v2.0) is the lowest start[0] + end[0] over its windows, as
in Google's run_squad.py; null_odds = null score - best span score, and the answer is
"" when null_odds > threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stages.finetune.squad.reader import SquadExample
from stages.finetune.squad.windows import SquadWindows


@dataclass
class Candidate:
    text: str
    score: float  # start logit + end logit
    start_logit: float
    end_logit: float


@dataclass
class Decoded:
    best: dict[str, str]  # question id -> best non-null answer text
    best_score: dict[str, float]
    n_best: dict[str, list[dict]]  # official-style n-best lists with probabilities
    null_odds: dict[str, float]  # null score - best span score (v2.0's na_prob input)

    def answers(self, threshold: float | None) -> dict[str, str]:
        """None: never predict no-answer (v1.1); else "" where null_odds > threshold."""
        if threshold is None:
            return dict(self.best)
        return {qid: "" if self.null_odds[qid] > threshold else text for qid, text in self.best.items()}


def decode(examples: list[SquadExample], windows: SquadWindows, start_logits: np.ndarray,
           end_logits: np.ndarray, *, n_best_size: int = 20, max_answer_len: int = 30) -> Decoded:
    """start_logits, end_logits: (N windows, T)."""
    by_example: dict[int, list[int]] = {}
    for row, index in enumerate(windows.example_index):
        by_example.setdefault(int(index), []).append(row)
    decoded = Decoded(best={}, best_score={}, n_best={}, null_odds={})
    for index, example in enumerate(examples):
        candidates: list[Candidate] = []
        null_score = np.inf
        for row in by_example.get(index, []):
            starts, ends, offsets = start_logits[row], end_logits[row], windows.offsets[row]
            null_score = min(null_score, float(starts[0] + ends[0]))
            candidates += _window_candidates(example.context, starts, ends, offsets, n_best_size, max_answer_len)
        candidates.sort(key=lambda c: c.score, reverse=True)
        candidates = _unique_texts(candidates)[:n_best_size] or [Candidate("", 0.0, 0.0, 0.0)]
        decoded.best[example.id] = candidates[0].text
        decoded.best_score[example.id] = candidates[0].score
        decoded.null_odds[example.id] = (null_score - candidates[0].score) if np.isfinite(null_score) else 0.0
        decoded.n_best[example.id] = _with_probabilities(candidates)
    return decoded


def _window_candidates(context: str, starts: np.ndarray, ends: np.ndarray, offsets: np.ndarray,
                       n_best_size: int, max_answer_len: int) -> list[Candidate]:
    in_context = offsets[:, 0] >= 0
    if not in_context.any():
        return []
    masked_starts = np.where(in_context, starts, -np.inf)
    masked_ends = np.where(in_context, ends, -np.inf)
    top_starts = np.argsort(-masked_starts)[:n_best_size]
    top_ends = np.argsort(-masked_ends)[:n_best_size]
    found = []
    for s in top_starts:
        for e in top_ends:
            if not (in_context[s] and in_context[e]) or e < s or e - s + 1 > max_answer_len:
                continue
            found.append(Candidate(text=context[offsets[s][0]:offsets[e][1]],
                                   score=float(starts[s] + ends[e]),
                                   start_logit=float(starts[s]), end_logit=float(ends[e])))
    return found


def _unique_texts(candidates: list[Candidate]) -> list[Candidate]:
    seen: set[str] = set()
    unique = []
    for candidate in candidates:  # best first: keep each text's best-scoring span
        if candidate.text not in seen:
            seen.add(candidate.text)
            unique.append(candidate)
    return unique


def _with_probabilities(candidates: list[Candidate]) -> list[dict]:
    scores = np.asarray([c.score for c in candidates])
    probabilities = np.exp(scores - scores.max())
    probabilities /= probabilities.sum()
    return [{"text": c.text, "probability": float(p), "start_logit": c.start_logit, "end_logit": c.end_logit}
            for c, p in zip(candidates, probabilities)]
