"""What a sequence-to-sequence task is: its files, its prefix, its lengths and its metrics.

Plain data (pydantic, no torch) so that the config validator can load a user's spec
when an experiment file is read. Built-in tasks are specs below; a user's task is a YAML
file with the same keys, named in `finetune.task_specs` and then listed by its `name` in
`finetune.tasks`:

    name: iwslt_en_de
    kind: translation                    # or summarization: sets the default metrics
    prefix: "translate English to German: "
    source_lang: en
    target_lang: de
    splits:
      train: {source: mt/my/train.en, target: mt/my/train.de}      # aligned plain text
      dev:   {source: mt/my/dev.en, target: mt/my/dev.de}
      test:  {path: mt/my/test.jsonl, source_field: en, target_fields: [de, de_2]}  # or JSONL
    max_source_len: 64
    max_target_len: 64

Paths are relative to the experiment's data_dir (or absolute). A split with several
`target_fields` has several references per row; the first is the one trained on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, ValidationError, model_validator

from stages.section import Section
from stages.validation_errors import explain_validation_error
from stages.yaml_lines import load_yaml_with_lines

KINDS = ("translation", "summarization")
DEFAULT_METRICS = {"translation": ("bleu", "chrf"), "summarization": ("rouge",)}
ROUGE_SCORES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
KNOWN_METRICS = ("bleu", "chrf", "rouge", *ROUGE_SCORES)
SPLITS = ("train", "dev", "test")

# Why a BERT cannot take these tasks: said at config validation and by the task registry.
BERT_REFUSAL = ("a BERT model is an encoder only: it has no decoder to generate the target text, so it cannot "
                "fine-tune sequence-to-sequence tasks; pretrain a T5 (pretrain.model.family: t5, or variant: "
                "transformer for the original Transformer) or a GPT, or remove the task from finetune.tasks")


class SplitFiles(Section):
    """One split: two aligned plain-text files (`source`, `target`: line i of one is the
    translation of line i of the other), or one JSONL file (`path`) with a source field
    and one or more reference fields."""

    source: str | None = Field(None, description="plain-text source file, one example per line")
    target: str | None = Field(None, description="plain-text target file, aligned with source")
    path: str | None = Field(None, description="JSONL file, one example per line")
    source_field: str | None = Field(None, description="JSONL: the field holding the source text")
    target_fields: list[str] | None = Field(
        None, description="JSONL: the reference fields; the first is trained on, all are scored against")

    @model_validator(mode="after")
    def _one_layout(self) -> "SplitFiles":
        plain, jsonl = self.source is not None or self.target is not None, self.path is not None
        if plain and jsonl:
            raise ValueError("a split is either plain text (source: and target:) or JSONL (path:, source_field:, "
                             "target_fields:), not both")
        if plain and (self.source is None or self.target is None):
            raise ValueError("plain-text splits need both source: and target: (two aligned files)")
        if jsonl and (not self.source_field or not self.target_fields):
            raise ValueError("a JSONL split needs source_field: and target_fields: [field, ...]")
        if not plain and not jsonl:
            raise ValueError("give source: and target: (aligned plain text) or path: (JSONL)")
        return self

    def files(self) -> list[str]:
        return [self.path] if self.path is not None else [self.source, self.target]


class Seq2SeqSpec(Section):
    """A sequence-to-sequence task (translation or summarization)."""

    model_config = {**Section.model_config, "frozen": True}

    name: str = Field(description="the name finetune.tasks lists it by (and its output folder)")
    kind: Literal["translation", "summarization"] = Field(description="sets the default metrics")
    description: str = Field("", description="one line saying what the task asks")
    prefix: str = Field("", description="T5's task prefix before every source, e.g. 'translate English to German: '")
    separator: str = Field(
        " = ", description="GPT: the text between source and target (`source + separator + target`); the "
        "GPT-2 paper's translation prompt is 'english sentence = french sentence', its summaries follow 'TL;DR:'")
    source_lang: str | None = Field(None, description="translation direction: the source language (en)")
    target_lang: str | None = Field(None, description="translation direction: the target language (de)")
    splits: dict[Literal["train", "dev", "test"], SplitFiles] = Field(
        description="train, dev and test files; without train, the dev split is divided (dev_fraction)")
    dev_fraction: float = Field(
        0.2, gt=0, lt=1, description="without a train split: the seeded share of dev rows kept for scoring; "
        "the rest is trained on")
    max_source_len: int = Field(128, ge=4, description="source tokens kept (prefix included); longer sources are "
                                "cut, counted and reported")
    max_target_len: int = Field(64, ge=2, description="target tokens trained on (</s> included)")
    long_targets: Literal["cut", "error"] = Field(
        "cut", description="training targets longer than max_target_len: cut = train on their first "
        "max_target_len tokens, counted in metrics.json (train_targets_cut) and printed; error = refuse the task. "
        "References are never cut: they are scored whole")
    empty_lines: Literal["skip", "error"] = Field(
        "skip", description="pairs whose source or target is empty: skip = leave them out, counted in "
        "metrics.json (<split>_empty_pairs_skipped) and printed; error = refuse the task, naming the line")
    metrics: tuple[str, ...] = Field(
        (), description=f"scores to compute, the first ranks checkpoints: {', '.join(KNOWN_METRICS)} (rouge = "
        "rouge1, rouge2, rougeL, rougeLsum); empty = the kind's (translation: bleu, chrf; summarization: rouge)")
    file: str | None = Field(None, description="set by the loader: the spec file it came from", exclude=True)

    head: ClassVar[str] = "seq2seq"

    @model_validator(mode="before")
    @classmethod
    def _expand_metrics(cls, data):
        """metrics: the kind's default when empty; rouge -> its four scores (stages.text_metrics)."""
        if isinstance(data, dict) and isinstance(data.get("metrics", ()), (list, tuple)):
            names = list(data.get("metrics") or DEFAULT_METRICS.get(data.get("kind"), ()))
            expanded = [score for name in names for score in (ROUGE_SCORES if name == "rouge" else (name,))]
            data = {**data, "metrics": tuple(dict.fromkeys(expanded))}
        return data

    @model_validator(mode="after")
    def _check(self) -> "Seq2SeqSpec":
        missing = [split for split in ("dev", "test") if split not in self.splits]
        if missing:
            raise ValueError(f"[splits] needs {' and '.join(missing)} (dev is scored after every epoch, test at "
                             "the end; train may be left out: it is then carved from dev)")
        unknown = [m for m in self.metrics if m not in KNOWN_METRICS]
        if unknown:
            raise ValueError(f"[metrics] unknown metrics {unknown}; known: {', '.join(KNOWN_METRICS)}")
        return self

    @property
    def metric_groups(self) -> tuple[str, ...]:
        """The metrics as stages.text_metrics names them (bleu, chrf, rouge)."""
        return tuple(dict.fromkeys("rouge" if m in ROUGE_SCORES else m for m in self.metrics))

    @property
    def num_labels(self) -> int:
        """The generated ids' width with the default decoding length (source + 50): what a
        model rebuilt from head_config generates at most (`seq2seq.family`)."""
        return self.max_source_len + 50

    labels: ClassVar[None] = None  # no label words: head_config records None

    def data_path(self, data_dir: str | Path, relative: str) -> Path:
        return Path(data_dir) / relative  # an absolute `relative` stays as it is

    def required_paths(self, data_dir: str | Path) -> list[Path]:
        return [self.data_path(data_dir, name) for split in self.splits.values() for name in split.files()]

    def input_paths(self, data_dir: str | Path) -> list[Path]:
        """Every file the task reads, its spec file too (editing it re-trains the task)."""
        spec_file = [Path(self.file).resolve()] if self.file else []
        return [*self.required_paths(data_dir), *spec_file]


@dataclass(frozen=True)
class Seq2SeqDefaults:
    """finetune's lr / epochs / global batch where the config leaves them unset. No paper
    gives T5 fine-tuning rates for AdamW (T5 used Adafactor at a constant 1e-3); 3e-4 is
    the common AdamW choice for T5-small fine-tuning, and 3 epochs / 32 follow the GLUE ones."""

    lr: float = 3e-4
    epochs: int = 3
    batch_size: int = 32


def _multi30k(name: str, source: str, target: str, prefix: str, description: str) -> Seq2SeqSpec:
    folder = "mt/multi30k"
    return Seq2SeqSpec(
        name=name, kind="translation", prefix=prefix, source_lang=source, target_lang=target,
        description=description, max_source_len=64, max_target_len=64,
        splits={split: SplitFiles(source=f"{folder}/{stem}.{source}", target=f"{folder}/{stem}.{target}")
                for split, stem in (("train", "train"), ("dev", "val"), ("test", "test_2016_flickr"))})


BUILTIN_SEQ2SEQ: dict[str, Seq2SeqSpec] = {spec.name: spec for spec in [
    _multi30k("multi30k_en_de", "en", "de", "translate English to German: ",
              "Multi30k image captions, English to German (test2016, sacreBLEU's multi30k/2016)"),
    _multi30k("multi30k_de_en", "de", "en", "translate German to English: ",
              "Multi30k image captions, German to English (test2016)"),
    Seq2SeqSpec(
        name="dialogsum", kind="summarization", prefix="summarize: ", separator="\nTL;DR: ",
        description="DialogSum dialogue summaries: no train split here (over 4 MiB), so 80% of dev is trained "
                    "on; test has three references per dialogue",
        max_source_len=512, max_target_len=64,
        splits={"dev": SplitFiles(path="summarization/dialogsum/dialogsum.dev.jsonl", source_field="dialogue",
                                  target_fields=["summary"]),
                "test": SplitFiles(path="summarization/dialogsum/dialogsum.test.jsonl", source_field="dialogue",
                                   target_fields=["summary1", "summary2", "summary3"])}),
]}


class Seq2SeqSpecError(ValueError):
    """A spec file that cannot be used; the message names the file, line and key."""


def load_seq2seq_spec(path: str | Path) -> Seq2SeqSpec:
    """Read and validate a user's spec file: an unknown key names the closest valid one."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise Seq2SeqSpecError(f"finetune.task_specs: {path} does not exist; give the path of a sequence-to-sequence "
                               "task spec YAML (stages/finetune/seq2seq/spec.py shows its keys)")
    try:
        raw, lines = load_yaml_with_lines(path)
    except ValueError as error:
        raise Seq2SeqSpecError(str(error)) from None
    if not isinstance(raw, dict):
        raise Seq2SeqSpecError(f"{path}: a task spec is a mapping (name:, kind:, splits:, ...)")
    try:
        spec = Seq2SeqSpec.model_validate(raw)
    except ValidationError as error:
        raise Seq2SeqSpecError(explain_validation_error(error, path, lines, Seq2SeqSpec)) from None
    return spec.model_copy(update={"file": str(path.resolve())})
