"""The config reference table in README, generated from the config models themselves.

`python -m pipeline.config_reference` prints it; a test checks README holds the same
table, so the documented keys can never drift from the validated ones.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from pipeline.config import ExperimentConfig
from stages.validation_errors import model_of

BEGIN = "<!-- config-reference:begin -->"
END = "<!-- config-reference:end -->"


def rows(model: type[BaseModel] = ExperimentConfig, prefix: str = "") -> list[tuple[str, str, str]]:
    out = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"  # tokenizer.from is the field from_
        nested = model_of(field.annotation)
        if nested is not None and not _is_list(field.annotation):
            out.extend(rows(nested, f"{key}."))
            continue
        if nested is not None:  # a list of sections, e.g. ingest.sources
            out.append((key, "list", field.description or ""))
            out.extend(rows(nested, f"{key}[]."))
            continue
        out.append((key, _default(field), field.description or ""))
    return out


def _is_list(annotation: Any) -> bool:
    return getattr(annotation, "__origin__", None) is list


def _default(field) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    return f"`{value!r}`" if value is not None else "unset"


def markdown() -> str:
    lines = [BEGIN, "| key | default | meaning |", "|---|---|---|"]
    lines += [f"| `{k}` | {_cell(d)} | {_cell(m)} |" for k, d, m in rows()]
    return "\n".join(lines + [END])


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a bare | would end the Markdown table cell


def sync_readme(path: str = "README.md") -> None:
    """Replace the table between the markers in README with a fresh one."""
    from pathlib import Path

    readme = Path(path)
    text = readme.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    readme.write_text(text[:start] + markdown() + text[end:], encoding="utf-8")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--sync"]:
        sync_readme()
    else:
        print(markdown())
