"""The GLUE tasks as specs: files, columns, labels and metrics of the official release.

Layouts follow the `download_glue_data.py` tree (the one under `<data_dir>/glue_data/`).
Label strings are kept exactly as in the files because the GLUE server expects them back
in the submission (RTE wants "entailment", SST-2 wants "1").
"""

from __future__ import annotations

from stages.finetune.glue.spec import TaskSpec, TsvFile

_BINARY = ("0", "1")
_ENTAILMENT = ("entailment", "not_entailment")


def _splits(train: str = "train.tsv", dev: str = "dev.tsv", test: str = "test.tsv",
            headerless: tuple[str, ...] | None = None) -> dict[str, TsvFile]:
    """headerless: column names of train/dev when those files have no header (CoLA)."""
    return {
        "train": TsvFile(name=train, columns=headerless),
        "dev": TsvFile(name=dev, columns=headerless),
        "test": TsvFile(name=test),
    }


GLUE_TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in [
        TaskSpec(
            name="cola", directory="CoLA", submission_name="CoLA",
            description="grammatical acceptability of one sentence",
            files=_splits(headerless=("source", "label", "author_label", "sentence")),
            text_columns=("sentence",), label_column="label",
            labels=_BINARY, metrics=("matthews_corrcoef", "accuracy"),
        ),
        TaskSpec(
            name="sst2", directory="SST-2", submission_name="SST-2",
            description="sentiment of one movie-review sentence",
            files=_splits(),
            text_columns=("sentence",), label_column="label",
            labels=_BINARY, metrics=("accuracy",),
        ),
        TaskSpec(
            name="mrpc", directory="MRPC", submission_name="MRPC",
            description="are two news sentences paraphrases",
            files=_splits(),
            text_columns=("#1 String", "#2 String"), label_column="Quality",
            labels=_BINARY, metrics=("f1", "accuracy"),
        ),
        TaskSpec(
            name="stsb", directory="STS-B", submission_name="STS-B",
            description="similarity score 0-5 of a sentence pair (regression)",
            files=_splits(),
            text_columns=("sentence1", "sentence2"), label_column="score",
            labels=None, score_range=(0.0, 5.0), metrics=("pearson", "spearman"),
        ),
        TaskSpec(
            name="qqp", directory="QQP", submission_name="QQP",
            description="are two Quora questions duplicates",
            files=_splits(),
            text_columns=("question1", "question2"), label_column="is_duplicate", index_column="id",
            labels=_BINARY, metrics=("f1", "accuracy"),
        ),
        TaskSpec(
            name="mnli", directory="MNLI", submission_name="MNLI-m",
            description="entailment / neutral / contradiction, matched dev and test",
            files=_splits(dev="dev_matched.tsv", test="test_matched.tsv"),
            text_columns=("sentence1", "sentence2"), label_column="gold_label",
            labels=("contradiction", "entailment", "neutral"), metrics=("accuracy",),
        ),
        TaskSpec(
            name="mnli_mm", directory="MNLI", submission_name="MNLI-mm",
            description="MNLI trained the same way, scored on the mismatched genres",
            files=_splits(dev="dev_mismatched.tsv", test="test_mismatched.tsv"),
            text_columns=("sentence1", "sentence2"), label_column="gold_label",
            labels=("contradiction", "entailment", "neutral"), metrics=("accuracy",),
        ),
        TaskSpec(
            name="qnli", directory="QNLI", submission_name="QNLI",
            description="does the sentence answer the question",
            files=_splits(),
            text_columns=("question", "sentence"), label_column="label",
            labels=_ENTAILMENT, metrics=("accuracy",),
        ),
        TaskSpec(
            name="rte", directory="RTE", submission_name="RTE",
            description="textual entailment, two classes",
            files=_splits(),
            text_columns=("sentence1", "sentence2"), label_column="label",
            labels=_ENTAILMENT, metrics=("accuracy",),
        ),
        TaskSpec(
            name="wnli", directory="WNLI", submission_name="WNLI",
            description="pronoun resolution recast as entailment",
            files=_splits(),
            text_columns=("sentence1", "sentence2"), label_column="label",
            labels=_BINARY, metrics=("accuracy",),
        ),
    ]
}
