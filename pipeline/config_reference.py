"""The config reference table in README, generated from the config models themselves.

`python -m pipeline.config_reference` prints it; a test checks README holds the same
table, so the documented keys can never drift from the validated ones. `pretrain config
[SECTION]` prints the same keys for a terminal (`text_reference`).
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


def text_reference(section: str | None = None, width: int | None = None) -> str:
    """The same keys for a terminal (`pretrain config [SECTION]`): each key and its default
    on one line, its meaning wrapped below it, indented. `section`: only the keys under it
    (pretrain, pretrain.model, ingest.sources); an unknown one raises ConfigError naming
    the closest."""
    import shutil
    import textwrap

    from pipeline.config import ConfigError

    found = rows()
    if section:
        prefix = section.rstrip(".")
        found = [row for row in found if row[0] == prefix or row[0].startswith((prefix + ".", prefix + "[]."))]
        if not found:
            raise ConfigError(f"no config section or key '{section}'; {_closest(prefix)}"
                              f"sections are: {', '.join(sections())}")
    width = width or shutil.get_terminal_size().columns
    key_width = min(max(len(k) for k, _, _ in found), 40)
    out = []
    for key, default, meaning in found:
        out.append(f"{key.ljust(key_width)}  {default.replace('`', '')}")
        if meaning:
            out += textwrap.wrap(meaning, width=max(20, width - 4), initial_indent="    ",
                                 subsequent_indent="    ", break_on_hyphens=False)
    return "\n".join(out)


def sections() -> list[str]:
    return list(dict.fromkeys(key.split(".", 1)[0] for key, _, _ in rows() if "." in key))


def _closest(name: str) -> str:
    import difflib

    keys = sections() + [key for key, _, _ in rows()]
    match = difflib.get_close_matches(name, keys, n=1)
    return f"did you mean '{match[0]}'? " if match else ""


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
