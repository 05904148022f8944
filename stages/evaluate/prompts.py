"""From a row to its prompt pieces, and from pieces to the requests a scorer answers.

The context is built exactly as lm-eval 0.4.13's `ConfigurableTask.fewshot_context` /
`build_qa_turn` do without a chat template:

    description
    + for each demonstration: text + target_delimiter + answer + fewshot_delimiter
    + text of the evaluated row                  (no delimiter after it)

and the continuations as its `construct_requests`: multiple_choice scores
target_delimiter + choice for each choice; cloze scores doc_to_target as it stands (the
LAMBADA spec puts the space in the target); generation generates after the context.
A demonstration whose answer is "" contributes its text alone (lm-eval's rule too).
"""

from __future__ import annotations

from typing import Any

from stages.evaluate.requests import GenerationRequest, LoglikelihoodRequest, RollingRequest
from stages.evaluate.spec import TaskSpec
from stages.evaluate.templates import TemplateRowError, as_literal, render_in_row

Request = LoglikelihoodRequest | RollingRequest | GenerationRequest


def doc_text(spec: TaskSpec, row: dict, where: str) -> str:
    return _as_text(render_in_row(spec.doc_to_text, row, key="doc_to_text", where=where,
                                  spec_file=spec.file),
                    "doc_to_text", where)


def doc_choices(spec: TaskSpec, row: dict, where: str) -> list[str]:
    """The choices of a multiple_choice row (lm-eval: a list, a field, or literal_eval of
    the rendered template)."""
    if isinstance(spec.doc_to_choice, list):
        return list(spec.doc_to_choice)
    value = render_in_row(spec.doc_to_choice, row, key="doc_to_choice", where=where, spec_file=spec.file)
    if isinstance(value, str):
        try:
            value = as_literal(value)
        except (ValueError, SyntaxError):
            raise TemplateRowError(f"{where}: 'doc_to_choice' rendered {value!r}, not a Python list "
                                   "literal; the template must render a list like ['a', 'b']") from None
    if not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value):
        raise TemplateRowError(f"{where}: 'doc_to_choice' gave {value!r}; it must be a non-empty list "
                               "of strings")
    return value


def doc_target(spec: TaskSpec, row: dict, where: str, choices: list[str] | None = None) -> Any:
    """The gold answer, read as lm-eval reads it: for multiple_choice an index into the
    choices (digits become an integer; a choice's text becomes its index); for generation
    a string or a list of strings (a rendered "[...]" is a list); otherwise a string."""
    if isinstance(spec.doc_to_target, int):
        value: Any = spec.doc_to_target
    else:
        value = render_in_row(spec.doc_to_target, row, key="doc_to_target", where=where, spec_file=spec.file)
    if choices is not None:
        return _choice_index(value, choices, where)
    if isinstance(value, str) and len(value) >= 2 and value[0] == "[" and value[-1] == "]":
        try:
            value = as_literal(value)
        except (ValueError, SyntaxError):
            pass
    if spec.kind == "generation" and isinstance(value, list):
        if not value or not all(isinstance(v, str) for v in value):
            raise TemplateRowError(f"{where}: 'doc_to_target' gave {value!r}; generation needs a string "
                                   "or a non-empty list of strings")
        return value
    return _as_text(value, "doc_to_target", where)


def _choice_index(value: Any, choices: list[str], where: str) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        hint = " (a boolean: write doc_to_target: \"{{ field|int }}\")" if isinstance(value, bool) else ""
        raise TemplateRowError(f"{where}: 'doc_to_target' gave {value!r}; multiple_choice needs an index "
                               f"or one of the choices {choices}{hint}")
    if isinstance(value, str):
        if value not in choices:
            raise TemplateRowError(f"{where}: 'doc_to_target' gave {value!r}, which is not one of the "
                                   f"choices {choices}")
        return choices.index(value)
    if not 0 <= value < len(choices):
        raise TemplateRowError(f"{where}: 'doc_to_target' gave label index {value}, but the row has "
                               f"{len(choices)} choices {choices}; fix the label or doc_to_target")
    return value


def answer_text(spec: TaskSpec, row: dict, where: str) -> str:
    """What a demonstration shows as its answer (lm-eval: choices[index], or the first of
    several gold answers)."""
    choices = doc_choices(spec, row, where) if spec.kind == "multiple_choice" else None
    target = doc_target(spec, row, where, choices)
    if choices is not None:
        return choices[target]
    return target[0] if isinstance(target, list) else target


def build_context(spec: TaskSpec, row: dict, where: str, demonstrations: list[tuple[dict, str]]) -> str:
    """The prompt of one evaluated row after its demonstrations ((row, where) pairs)."""
    parts = []
    if spec.description:
        parts.append(_as_text(render_in_row(spec.description, row, key="description", where=where,
                                            spec_file=spec.file),
                              "description", where))
    for demo, demo_where in demonstrations:
        text, answer = doc_text(spec, demo, demo_where), answer_text(spec, demo, demo_where)
        parts.append(text + spec.target_delimiter + answer + spec.fewshot_delimiter if answer != "" else text)
    parts.append(doc_text(spec, row, where))
    return "".join(parts)


def example_requests(spec: TaskSpec, example: int, row: dict, where: str,
                     demonstrations: list[tuple[dict, str]]) -> list[Request]:
    """The requests of one evaluated row; `example` is its index in the evaluated split."""
    if spec.kind == "perplexity":
        return [RollingRequest(example=example, text=doc_target(spec, row, where))]
    context = build_context(spec, row, where, demonstrations)
    if spec.kind == "multiple_choice":
        choices = doc_choices(spec, row, where)
        doc_target(spec, row, where, choices)  # a bad label fails now, not after scoring
        return [LoglikelihoodRequest(example=example, choice=i, context=context,
                                     continuation=spec.target_delimiter + choice)
                for i, choice in enumerate(choices)]
    if spec.kind == "cloze":
        return [LoglikelihoodRequest(example=example, choice=0, context=context,
                                     continuation=doc_target(spec, row, where))]
    doc_target(spec, row, where)
    return [GenerationRequest(example=example, context=context, until=tuple(spec.until),
                              max_new_tokens=spec.max_new_tokens)]


def _as_text(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str):
        raise TemplateRowError(f"{where}: '{key}' gave {type(value).__name__} {value!r}, not text; use a "
                               f"template such as '{{{{ field }}}}' to turn it into text")
    return value
