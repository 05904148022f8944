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

lm-eval's multiple-input form (WinoGrande's "partial evaluation"): when doc_to_text gives
an index (an integer field, or a template rendering digits) in a multiple_choice task,
the choices are the contexts, the index is the gold one, and doc_to_target is the one
continuation scored after each: context i = description + demonstrations + choices[i],
continuation = target_delimiter + target. A demonstration shows its gold choice, then
target_delimiter + its target (lm-eval's `fewshot_context` / `multiple_input_context`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stages.evaluate.requests import GenerationRequest, LoglikelihoodRequest, RollingRequest
from stages.evaluate.spec import TaskSpec
from stages.evaluate.templates import TemplateRowError, as_literal, render_in_row

Request = LoglikelihoodRequest | RollingRequest | GenerationRequest


def doc_text(spec: TaskSpec, row: dict, where: str) -> str:
    return _as_text(doc_text_or_index(spec, row, where), "doc_to_text", where)


def doc_text_or_index(spec: TaskSpec, row: dict, where: str) -> str | int:
    """The row's prompt text, or, in a multiple_choice task, the index that doc_to_text
    gives (an integer field, or a rendering of digits only: lm-eval's test for its
    multiple-input form). An empty doc_to_text is an empty prompt (BLiMP)."""
    if not spec.doc_to_text:
        return ""
    value = render_in_row(spec.doc_to_text, row, key="doc_to_text", where=where, spec_file=spec.file)
    if spec.kind == "multiple_choice":
        if isinstance(value, str) and value.isascii() and value.isdigit():
            return int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return _as_text(value, "doc_to_text", where)


@dataclass(frozen=True)
class MultipleInputs:
    """One row of lm-eval's multiple-input form."""

    contexts: list[str]   # the choices: each is a context
    gold: int             # index of the right context
    continuation: str     # doc_to_target: scored after every context


def multiple_inputs(spec: TaskSpec, row: dict, where: str) -> MultipleInputs | None:
    """The row in lm-eval's multiple-input form, or None when doc_to_text gives text."""
    index = doc_text_or_index(spec, row, where)
    if isinstance(index, str):
        return None
    choices = doc_choices(spec, row, where)
    if not 0 <= index < len(choices):
        raise TemplateRowError(f"{where}: 'doc_to_text' gave index {index} (lm-eval's multiple-input form: "
                               f"the gold choice), but the row has {len(choices)} choices {choices}")
    if isinstance(spec.doc_to_target, int):
        raise TemplateRowError(f"{spec.file}: 'doc_to_target' is the index {spec.doc_to_target}, but doc_to_text "
                               f"gives an index ({where}): in lm-eval's multiple-input form doc_to_target is "
                               "the continuation text scored after each choice")
    target = render_in_row(spec.doc_to_target, row, key="doc_to_target", where=where, spec_file=spec.file)
    if isinstance(target, int) and not isinstance(target, bool):
        target = str(target)  # lm-eval formats it into the continuation
    if isinstance(target, list):
        raise TemplateRowError(f"{where}: 'doc_to_target' gave a list {target!r}; with doc_to_text giving an "
                               "index (lm-eval's multiple-input form) it must be the one continuation text")
    return MultipleInputs(choices, index, _as_text(target, "doc_to_target", where))


def gold_index(spec: TaskSpec, row: dict, where: str, choices: list[str]) -> int:
    """The right choice of a multiple_choice row, in either form."""
    inputs = multiple_inputs(spec, row, where)
    return inputs.gold if inputs is not None else doc_target(spec, row, where, choices)


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
    if isinstance(value, str) and value[:1] == "[" and value[-1:] == "]" and value not in choices:
        try:
            value = as_literal(value)  # lm-eval reads a rendered list as its multiple-target form
        except (ValueError, SyntaxError):
            pass
    if isinstance(value, list):
        raise TemplateRowError(f"{where}: 'doc_to_target' gave a list {value!r}: several right answers "
                               "(lm-eval's multiple-target form) are not supported; give one index or choice")
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        hint = " (a boolean: write doc_to_target: \"{{ field|int }}\")" if isinstance(value, bool) else ""
        raise TemplateRowError(f"{where}: 'doc_to_target' gave {value!r}; multiple_choice needs an index "
                               f"or one of the choices {choices}{hint}")
    if isinstance(value, str):
        if value not in choices:
            raise TemplateRowError(
                f"{where}: 'doc_to_target' gave {value!r}, which is not one of the choices {choices}. In "
                "lm-eval's multiple-input form (each choice a context, doc_to_target the continuation "
                "after it), doc_to_text must give the gold choice's index, e.g. "
                "\"{{ {'1': 0, '2': 1}[answer] }}\"")
        return choices.index(value)
    if not 0 <= value < len(choices):
        raise TemplateRowError(f"{where}: 'doc_to_target' gave label index {value}, but the row has "
                               f"{len(choices)} choices {choices}; fix the label or doc_to_target")
    return value


def demonstration_turn(spec: TaskSpec, row: dict, where: str) -> tuple[str, str]:
    """(text, answer) of a demonstration: in the multiple-input form its gold choice and
    its continuation."""
    inputs = multiple_inputs(spec, row, where) if spec.kind == "multiple_choice" else None
    if inputs is not None:
        return inputs.contexts[inputs.gold], inputs.continuation
    return doc_text(spec, row, where), answer_text(spec, row, where)


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
    return context_prefix(spec, row, where, demonstrations) + doc_text(spec, row, where)


def context_prefix(spec: TaskSpec, row: dict, where: str, demonstrations: list[tuple[dict, str]]) -> str:
    """What comes before the evaluated row's own text: description and demonstrations."""
    parts = []
    if spec.description:
        parts.append(_as_text(render_in_row(spec.description, row, key="description", where=where,
                                            spec_file=spec.file),
                              "description", where))
    for demo, demo_where in demonstrations:
        text, answer = demonstration_turn(spec, demo, demo_where)
        parts.append(text + spec.target_delimiter + answer + spec.fewshot_delimiter if answer != "" else text)
    return "".join(parts)


def example_requests(spec: TaskSpec, example: int, row: dict, where: str,
                     demonstrations: list[tuple[dict, str]]) -> list[Request]:
    """The requests of one evaluated row; `example` is its index in the evaluated split."""
    if spec.kind == "perplexity":
        return [RollingRequest(example=example, text=doc_target(spec, row, where))]
    if spec.kind == "multiple_choice" and (inputs := multiple_inputs(spec, row, where)) is not None:
        prefix = context_prefix(spec, row, where, demonstrations)
        return [LoglikelihoodRequest(example=example, choice=i, context=prefix + choice,
                                     continuation=spec.target_delimiter + inputs.continuation)
                for i, choice in enumerate(inputs.contexts)]
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
