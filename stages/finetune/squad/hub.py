"""SQuAD from the Hugging Face Hub (`finetune.source: hub`), as `squad.reader` reads the JSON.

    train, dev = read_squad_splits(get_task("squad"))        # SquadExample lists
"""

from __future__ import annotations

from stages.finetune.hub import check_columns, load_split
from stages.finetune.squad.reader import Answer, SquadDataError, SquadExample
from stages.finetune.squad.spec import SquadSpec

SQUAD_HUB = {"1.1": "rajpurkar/squad", "2.0": "rajpurkar/squad_v2"}


def read_squad_splits(spec: SquadSpec) -> tuple[list[SquadExample], list[SquadExample]]:
    """(train, dev) of rajpurkar/squad or rajpurkar/squad_v2."""
    path = SQUAD_HUB[spec.version]
    return (squad_from_dataset(load_split(path, None, "train"), where=f"{path} train"),
            squad_from_dataset(load_split(path, None, "validation"), where=f"{path} validation"))


def squad_from_dataset(dataset, *, where: str) -> list[SquadExample]:
    """Rows {id, title, context, question, answers: {text: [...], answer_start: [...]}} ->
    SquadExamples; no answers = a v2.0 unanswerable question. answer_start is checked
    against the text as for the JSON files."""
    check_columns(dataset, ["id", "title", "context", "question", "answers"], where, SquadDataError)
    examples = []
    for row in dataset:
        answers = []
        for text, start in zip(row["answers"]["text"], row["answers"]["answer_start"]):
            found = row["context"][start:start + len(text)]
            if found != text:
                raise SquadDataError(f"{where}: question id {row['id']}: answer_start={start} points at "
                                     f"{found!r}, not at the answer text {text!r}")
            answers.append(Answer(text=text, start=int(start)))
        examples.append(SquadExample(id=row["id"], title=row["title"], question=row["question"],
                                     context=row["context"], answers=answers, is_impossible=not answers))
    if not examples:
        raise SquadDataError(f"{where}: no questions")
    return examples
