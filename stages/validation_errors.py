"""Pydantic validation errors as people read them: file:line, dotted key, what is wrong.

    raise SomeError(explain_validation_error(error, path, lines, ExperimentConfig))

`lines` comes from stages.yaml_lines.load_yaml_with_lines (a value may also be a string
such as "-o key=value", where a flag set the key). Shared by the experiment config
(pipeline.config) and evaluation task specs (stages.evaluate.spec).
"""

from __future__ import annotations

import difflib
import re
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError


def explain_validation_error(error: ValidationError, path: Path, lines: dict,
                             model: type[BaseModel]) -> str:
    messages = []
    for item in error.errors():
        loc = tuple(item["loc"])
        where, key = where_in_file(path, lines, loc), dotted_key(loc)
        text = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            valid = _valid_keys_at(model, loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.5)
            hint = f"did you mean '{dotted_key(loc[:-1] + (close[0],))}'?" if close else (
                f"valid keys here: {', '.join(sorted(valid))}")
            messages.append(f"{where}: unknown key '{key}'; {hint}")
        elif item["type"] == "missing":
            messages.append(f"{where}: required key '{key}' is missing")
        elif not loc and (marked := re.match(r"\[(\w+)\] ", text)):
            # A cross-field check of the whole model that names its key: "[key] what is wrong".
            messages.append(f"{where_in_file(path, lines, (marked.group(1),))}: '{marked.group(1)}' "
                            f"{text[marked.end():]}")
        elif not loc:
            messages.append(f"{where}: {text}")
        else:
            messages.append(f"{where}: '{key}': {text} (got {item.get('input')!r})")
    return "\n".join(messages)


def _valid_keys_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """Field names of the nested model that `loc` points into (list items and dict keys
    on the way are stepped over)."""
    current: Any = model
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part) if isinstance(current, type) else None
        if field is None:
            return []
        if typing.get_origin(field.annotation) is dict and parts:
            parts.pop(0)  # the dict's key (a split name, say)
        current = model_of(field.annotation)
    return list(current.model_fields) if isinstance(current, type) else []


def model_of(annotation: Any) -> Any:
    """The BaseModel inside an annotation like `Foo`, `list[Foo]`, `dict[str, Foo]` or `Foo | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        # pretrain.model is a union of one section per family: its keys are all of theirs
        return getattr(annotation, "all_families_keys", annotation)
    for arg in getattr(annotation, "__args__", ()):
        found = model_of(arg)
        if found is not None:
            return found
    return None


def where_in_file(path: Path, lines: dict, loc: tuple) -> str:
    for end in range(len(loc), 0, -1):
        found = lines.get(loc[:end])
        if isinstance(found, str):
            return found  # came from an override flag
        if found is not None:
            return f"{path}:{found}"
    return str(path)


def dotted_key(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
