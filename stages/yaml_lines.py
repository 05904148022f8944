"""Load YAML and remember which line each key came from, so errors can point at it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

KeyPath = tuple  # ("pretrain", "model", "num_layers") or ("ingest", "sources", 0, "path")


def load_yaml_with_lines(path: Path) -> tuple[Any, dict[KeyPath, int]]:
    """Parse `path`; return (plain data, {key path: 1-based line of that key})."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ValueError(f"{where}: not valid YAML: {getattr(e, 'problem', e)}") from None
    lines: dict[KeyPath, int] = {}
    if node is None:
        return {}, lines
    _record_lines(node, (), lines)
    return yaml.safe_load(text), lines


def _record_lines(node: yaml.Node, prefix: KeyPath, lines: dict[KeyPath, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key_path = prefix + (key_node.value,)
            lines[key_path] = key_node.start_mark.line + 1
            _record_lines(value_node, key_path, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[prefix + (index,)] = item.start_mark.line + 1
            _record_lines(item, prefix + (index,), lines)
