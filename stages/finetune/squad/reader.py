"""Read the official SQuAD JSON (v1.1 or v2.0) into flat examples, and split one file by
article when only one file exists (the shared data holds only dev-v1.1.json).

    examples = read_squad("squad/dev-v1.1.json")
    train, held_out = split_by_article(examples, eval_fraction=0.2, seed=0)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


class SquadDataError(ValueError):
    """A SQuAD file does not match the official format; the message names file and question id."""


@dataclass(frozen=True)
class Answer:
    text: str
    start: int  # character offset into the context


@dataclass(frozen=True)
class SquadExample:
    id: str
    title: str
    question: str
    context: str
    answers: list[Answer]  # empty for a v2.0 question without an answer
    is_impossible: bool = False
    plausible_answers: list[Answer] = field(default_factory=list)  # v2.0 only, for analysis


def read_squad(path: str | Path) -> list[SquadExample]:
    """Every question of the file, in file order. Raises SquadDataError when an answer's
    answer_start does not point at its text, naming the file and the question id."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; put the official SQuAD JSON (e.g. dev-v1.1.json) there")
    try:
        articles = json.loads(path.read_text(encoding="utf-8"))["data"]
    except (json.JSONDecodeError, KeyError) as error:
        raise SquadDataError(f"{path}: not an official SQuAD JSON file (top-level 'data' list): {error}") from None
    examples: list[SquadExample] = []
    for article in articles:
        title = article.get("title", "")
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                impossible = bool(qa.get("is_impossible", False))
                answers = [_answer(path, qa["id"], context, a) for a in qa.get("answers", [])]
                plausible = [_answer(path, qa["id"], context, a) for a in qa.get("plausible_answers", [])]
                if not answers and not impossible:
                    raise SquadDataError(
                        f"{path}: question id {qa['id']} has no answers and is not marked "
                        "is_impossible; add its answers or set \"is_impossible\": true (v2.0)")
                examples.append(SquadExample(id=qa["id"], title=title, question=qa["question"],
                                             context=context, answers=answers, is_impossible=impossible,
                                             plausible_answers=plausible))
    if not examples:
        raise SquadDataError(f"{path}: no questions found")
    return examples


def _answer(path: Path, qid: str, context: str, raw: dict) -> Answer:
    text, start = raw["text"], int(raw["answer_start"])
    found = context[start:start + len(text)]
    if found != text:
        raise SquadDataError(
            f"{path}: question id {qid}: answer_start={start} points at {found!r}, not at the answer "
            f"text {text!r}; fix answer_start (the text occurs at "
            f"{context.find(text) if text in context else 'no position'} in the context) or the text")
    return Answer(text=text, start=start)


def split_by_article(examples: list[SquadExample], *, eval_fraction: float, seed: int,
                     ) -> tuple[list[SquadExample], list[SquadExample]]:
    """(train, held_out): whole articles go to one side, so no held-out context was seen in
    training. A seeded shuffle of the titles; at least one article on each side."""
    titles = list(dict.fromkeys(e.title for e in examples))
    if len(titles) < 2:
        raise ValueError("splitting by article needs at least two articles")
    order = np.random.default_rng(seed).permutation(len(titles))
    num_eval = min(len(titles) - 1, max(1, round(eval_fraction * len(titles))))
    held_out = {titles[i] for i in order[:num_eval]}
    return ([e for e in examples if e.title not in held_out], [e for e in examples if e.title in held_out])
