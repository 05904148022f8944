"""A task spec: one YAML file says what is read, how prompts are built and what is scored.

Tasks are data: the built-in ones live in `stages/evaluate/tasks/<name>.yaml`, and a user
can point at their own file. Prompt keys are Jinja2 templates with lm-evaluation-harness's
meaning, forms included: a multiple_choice doc_to_text that gives an index is lm-eval's
multiple-input form (WinoGrande: the choices are contexts, doc_to_target the continuation;
see prompts.py), and an empty doc_to_text scores the choices whole (BLiMP). What lm-eval
does in Python (`!function`, process_docs, filters) has no equivalent here, and its task
keys that name something else here are refused with what to write instead (LM_EVAL_KEYS):

    name: piqa
    kind: multiple_choice               # perplexity | cloze | multiple_choice | generation
    splits:
      validation: {path: eval/piqa/valid.jsonl, format: jsonl, labels: eval/piqa/valid-labels.lst}
    eval_split: validation
    fewshot_split: validation           # default: eval_split (the evaluated row is never shown)
    doc_to_text: "Question: {{goal}}\\nAnswer:"
    doc_to_target: label                # a field name, or a template
    doc_to_choice: "{{[sol1, sol2]}}"   # a template rendering a list, a field, or a YAML list
    metrics: [acc, acc_norm]

A mistake raises SpecError naming the file, the line and the key (with the closest valid
key for a misspelling).
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Literal

import jinja2
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from stages.evaluate.templates import check_template
from stages.evaluate.text_generation_spec import TEXT_METRIC_NAMES, TextBaseline, check_text_generation
from stages.validation_errors import explain_validation_error, where_in_file
from stages.yaml_lines import load_yaml_with_lines

BUILTIN_DIR = Path(__file__).parent / "tasks"

Kind = Literal["perplexity", "cloze", "multiple_choice", "generation"]

METRICS_BY_KIND: dict[str, tuple[str, ...]] = {
    "perplexity": ("token_perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte"),
    "cloze": ("acc", "perplexity"),
    "multiple_choice": ("acc", "acc_norm", "acc_bytes", "f1", "mcc"),
    "generation": ("exact_match", "f1", *TEXT_METRIC_NAMES),  # bleu, chrf, rouge: text_generation_spec.py
}

# Keys that only mean something for one kind; setting them elsewhere is a mistake.
_KIND_ONLY_KEYS = {
    "stride": "perplexity", "count_text": "perplexity", "word_count": "perplexity",
    "doc_to_choice": "multiple_choice",
    "until": "generation", "max_new_tokens": "generation", "baseline": "generation",
}
_TEMPLATE_KEYS = ("description", "doc_to_text", "doc_to_target", "doc_to_choice", "count_text")

_SPLITS = "list the files under splits: and pick eval_split: / fewshot_split:"
_REMOVE = "lm-eval's bookkeeping, not used here: remove it"
# lm-eval task keys a copied YAML brings along: what each is, here (TaskConfig, 0.4.13).
LM_EVAL_KEYS = {
    "task": "write name: instead",
    "output_type": "write kind: instead (multiple_choice; loglikelihood is cloze; loglikelihood_rolling "
                   "is perplexity; generate_until is generation)",
    "dataset_path": "specs read local files: " + _SPLITS, "dataset_name": "specs read local files: " + _SPLITS,
    "dataset_kwargs": "specs read local files: " + _SPLITS,
    "training_split": _SPLITS, "validation_split": _SPLITS, "test_split": _SPLITS,
    "metric_list": "write metrics: [acc, acc_norm] instead",
    "num_fewshot": "shots are set per run: evaluate.shots in the experiment config",
    "fewshot_config": "write fewshot_split: and fewshot_sampler: instead",
    "generation_kwargs": "write until: and max_new_tokens: instead",
    "process_docs": "a Python function over the rows is not supported: prepare the data file, or do it "
                    "in the templates",
    "process_results": "a Python scoring function is not supported: pick metrics: of the task's kind",
    "filter_list": "answer-extraction filters are not supported",
    "use_prompt": "promptsource prompts are not supported: write the templates",
    "include": "not supported: copy the included file's keys into this one",
    "gen_prefix": "not supported", "doc_to_image": "not supported", "doc_to_audio": "not supported",
    "repeats": "not supported", "unsafe_code": "not supported",
    "should_decontaminate": _REMOVE, "doc_to_decontamination_query": _REMOVE, "metadata": _REMOVE,
    "tag": _REMOVE, "group": _REMOVE, "task_alias": _REMOVE,
}


class SpecError(ValueError):
    """A mistake in a task spec; the message names the file, line and key."""


class DataFile(BaseModel):
    """One split's file, relative to the data directory."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="file relative to data_dir, e.g. eval/piqa/valid.jsonl")
    format: Literal["jsonl", "json", "text", "tsv", "copa_xml", "parquet", "lines"] = Field(
        description="jsonl: one JSON object per line; json: the official SQuAD layout, one row per "
        "question (id, title, context, question, answers.text, answers.answer_start); text: plain "
        "text, one row {text} per document; tsv: tab-separated, no quoting (GLUE); copa_xml: the "
        "original COPA release (premise, choice1, choice2, question, label, idx); parquet: a file "
        "or a folder of *.parquet files (the ingest stage's shards: id, text, ...), one row per record; "
        "lines: one row per line (blank lines kept), {field: line} plus the same line of each aligned "
        "file (parallel text, stages/evaluate/aligned_lines.py)")
    field: str = Field("text", description="lines format: the field each line of path goes in (e.g. en)")
    aligned: dict[str, str] = Field(
        default_factory=dict, description="lines format: {field: file} read line by line beside path "
        "(relative to its folder), e.g. {de: newstest2014.de}")
    labels: str | None = Field(
        None, description="file with one label per line, same order as the rows (PIQA's .lst); "
        "stored in the field named by label_field (digits become integers)")
    label_field: str = "label"
    documents: Literal["file", "line", "paragraph", "wikitext_articles"] = Field(
        "file", description="text format: the whole file is one document, or one per non-blank "
        "line, or one per blank-line-separated paragraph, or one per WikiText article (split at "
        "' = Title = ' lines exactly as EleutherAI/wikitext_document_level does)")
    columns: list[str] | None = Field(
        None, description="tsv without a header row (CoLA): the column names")
    rename: dict[str, str] = Field(
        default_factory=dict, description="field renames applied to every row, {old: new}")
    rows: tuple[int, int] | None = Field(
        None, description="keep rows [start, stop) only (0-based, after reading)")

    @model_validator(mode="after")
    def _options_fit_format(self) -> DataFile:
        if self.format != "text" and "documents" in self.model_fields_set:
            raise ValueError("'documents' is for format: text only")
        if self.format != "tsv" and self.columns is not None:
            raise ValueError("'columns' is for format: tsv only")
        if self.format != "lines" and {"field", "aligned"} & self.model_fields_set:
            raise ValueError("'field' and 'aligned' are for format: lines only")
        if self.rows is not None and not 0 <= self.rows[0] < self.rows[1]:
            raise ValueError(f"rows must be [start, stop) with 0 <= start < stop, got {list(self.rows)}")
        return self


class TaskSpec(BaseModel):
    """What one evaluation task reads, how it prompts, and what it scores."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: Kind
    source: str = Field("", description="where the prompts come from (e.g. an lm-eval task YAML)")
    splits: dict[str, DataFile] = Field(min_length=1)
    eval_split: str
    fewshot_split: str | None = Field(
        None, description="split the demonstrations come from; default: eval_split")
    fewshot_sampler: Literal["default", "first_n"] = Field(
        "default", description="default: lm-eval's seeded ContextSampler; first_n: the first k rows")
    description: str = Field("", description="template put before the demonstrations (lm-eval's "
                             "`description`, no separator added)")
    doc_to_text: str = Field("", description="prompt of one row: a template or a field name")
    doc_to_target: str | int = Field(
        description="answer of one row: for multiple_choice an index or one of the choices; "
        "for cloze the continuation scored; for generation the gold answer or a list of them "
        "(the first is shown in demonstrations); for perplexity the text scored")
    doc_to_choice: str | list[str] | None = Field(
        None, description="multiple_choice: a YAML list, a field holding a list, or a template "
        "that renders a Python list")
    target_delimiter: str = " "
    fewshot_delimiter: str = "\n\n"
    metrics: list[str] = Field(min_length=1)
    stride: int | None = Field(
        None, ge=1, description="perplexity: tokens a scoring window advances (default: the model's "
        "context length, lm-eval's disjoint windows)")
    count_text: str | None = Field(
        None, description="perplexity: template of the text whose words and bytes normalise "
        "word/byte perplexity (default: the scored text; lm-eval's wikitext counts the page "
        "before detokenizing)")
    word_count: Literal["lm_eval", "words_plus_lines"] = Field(
        "lm_eval", description="perplexity: lm_eval = len(re.split(r'\\s+', text)); "
        "words_plus_lines = whitespace words + one per line (Mikolov's PTB count, <eos> per line)")
    until: list[str] = Field(default_factory=lambda: ["\n"], description="generation: stop strings")
    max_new_tokens: int = Field(32, ge=1, description="generation: most tokens generated")
    baseline: TextBaseline | None = Field(
        None, description="generation scored with bleu/chrf/rouge: the output made without a model "
        "({output: template, name: text}), scored the same way")
    _file: str | None = PrivateAttr(None)  # set by load_task_spec; errors at run time name it

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not value or "/" in value or value.startswith("."):
            raise ValueError("must be a plain name (no '/', not starting with '.'), e.g. 'piqa'")
        return value

    @model_validator(mode="after")
    def _keys_fit_kind(self) -> TaskSpec:
        # Messages start with "[key] " so that the loader can point at that key's line.
        for key, kind in _KIND_ONLY_KEYS.items():
            if key in self.model_fields_set and self.kind != kind:
                raise ValueError(f"[{key}] is for kind: {kind} only (this task is kind: {self.kind})")
        if self.kind == "multiple_choice" and self.doc_to_choice is None:
            raise ValueError("[kind] multiple_choice needs doc_to_choice (a list, a field or a template)")
        # multiple_choice may leave it empty: the choices are then scored whole (BLiMP).
        if self.kind in ("cloze", "generation") and not self.doc_to_text:
            raise ValueError(f"[kind] {self.kind} needs doc_to_text (the prompt template)")
        check_text_generation(self)
        valid = METRICS_BY_KIND[self.kind]
        for metric in self.metrics:
            if metric not in valid:
                raise ValueError(f"[metrics] {metric!r} is not a metric of kind {self.kind} "
                                 f"({', '.join(valid)})")
        for key in ("eval_split", "fewshot_split"):
            split = getattr(self, key)
            if split is not None and split not in self.splits:
                raise ValueError(f"[{key}] {split!r} is not one of the splits ({', '.join(self.splits)})")
        return self

    @property
    def file(self) -> str:
        """The spec file this task was read from ("task spec" when built in memory)."""
        return self._file or "task spec"

    @property
    def demonstration_split(self) -> str:
        return self.fewshot_split or self.eval_split

    @property
    def has_classes(self) -> bool:
        """The choices are the same labels for every row (GLUE, BoolQ): a majority class exists."""
        return isinstance(self.doc_to_choice, list)


def load_task_spec(path: str | Path) -> TaskSpec:
    """Read and validate one spec file; templates are parsed here (never run: see
    templates.check_template) so a syntax error points at its line."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"task spec {path} does not exist; built-in tasks: {', '.join(builtin_task_names())}")
    try:
        raw, lines = load_yaml_with_lines(path)
    except ValueError as error:
        raise SpecError(_explain_function_tag(path) or str(error)) from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: a task spec is a mapping (name:, kind:, splits:, ...)")
    foreign = [f"{where_in_file(path, lines, (key,))}: '{key}' is an lm-eval task key; {LM_EVAL_KEYS[key]}"
               for key in raw if key in LM_EVAL_KEYS]
    if foreign:
        raise SpecError("\n".join(foreign))
    try:
        spec = TaskSpec.model_validate(raw)
    except ValidationError as error:
        raise SpecError(explain_validation_error(error, path, lines, TaskSpec)) from None
    for key in _TEMPLATE_KEYS:
        value = getattr(spec, key)
        if isinstance(value, str) and value:
            try:
                check_template(value)
            except jinja2.TemplateSyntaxError as error:
                raise SpecError(f"{where_in_file(path, lines, (key,))}: '{key}' is not a valid Jinja2 template: "
                                f"{error.message} ({value!r})") from None
    spec._file = str(path)
    return spec


def _explain_function_tag(path: Path) -> str | None:
    """For a YAML that failed to load: lm-eval's `key: !function module.name`, named with
    its line, or None."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    for number, line in enumerate(text.splitlines(), start=1):
        found = re.match(r"\s*([\w-]+)\s*:\s*!function\b\s*(\S*)", line)
        if found:
            key, target = found.groups()
            return (f"{path}:{number}: '{key}: !function {target}' is lm-eval's Python function; task specs "
                    f"run no Python: write '{key}' as a Jinja2 template (a field name, or e.g. "
                    "\"{{ sentence[:sentence.index('_')] }}\")")
    return None


def builtin_task_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def builtin_spec_path(name: str) -> Path:
    path = BUILTIN_DIR / f"{name}.yaml"
    if not path.is_file():
        close = difflib.get_close_matches(name, builtin_task_names(), n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'?" if close else f"built-in tasks: {', '.join(builtin_task_names())}"
        raise SpecError(f"no built-in evaluation task {name!r}; {hint} (or give the path of a spec YAML)")
    return path


def resolve_task_spec(name_or_path: str | Path) -> TaskSpec:
    """A built-in task by name ("piqa") or a spec file by path ("my_tasks/x.yaml")."""
    text = str(name_or_path)
    if text.endswith((".yaml", ".yml")) or "/" in text:
        return load_task_spec(text)
    return load_task_spec(builtin_spec_path(text))


def check_task_list(tasks: list[str]) -> list[str]:
    """A config's task list: no repeats, every entry a built-in name or a spec that loads
    (as ValueError, so pydantic reports it at the config key)."""
    if len(set(tasks)) != len(tasks):
        raise ValueError(f"a task is listed twice: {tasks}")
    for task in tasks:
        try:
            resolve_task_spec(task)
        except (SpecError, FileNotFoundError) as error:
            raise ValueError(str(error)) from None
    return tasks


