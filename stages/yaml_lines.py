"""Load YAML and remember which line each key came from, so errors can point at it.

Every YAML a user hands us (experiment configs, `-o` values, evaluation task specs) is
read here, hardened against hostile input: text that is not UTF-8, `!!python/...` and
other unknown tags, an alias inside its own anchor (a cycle) and aliases that expand a
small file into a huge document (a "billion laughs"). Each is refused with one
YamlInputError (a ValueError) naming the file and line; the size check runs on the
composed node graph, before any expansion happens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

KeyPath = tuple  # ("pretrain", "model", "num_layers") or ("ingest", "sources", 0, "path")

# How many nodes aliases may add to a document beyond those written in it. A config that
# reuses a few anchored sections adds hundreds; an alias bomb adds billions.
MAX_ALIAS_EXPANSION = 100_000


class YamlInputError(ValueError):
    """A YAML input we refuse; the message names where (file:line or the flag) and why."""


def load_yaml_with_lines(path: Path) -> tuple[Any, dict[KeyPath, int]]:
    """Parse `path`; return (plain data, {key path: 1-based line of that key})."""
    data, node = parse_yaml(read_yaml_text(path), str(path))
    lines: dict[KeyPath, int] = {}
    if node is None:
        return {}, lines
    _record_lines(node, (), lines)
    return data, lines


def read_yaml_text(path: Path) -> str:
    """The file's text; an unreadable or non-UTF-8 file is an error naming it."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise YamlInputError(f"{path}: cannot read it: {e.strerror or e}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise YamlInputError(
            f"{path}:{line}: not UTF-8 text (byte {e.start}, 0x{raw[e.start]:02x}); "
            f"save the file as UTF-8") from None


def parse_yaml(text: str, source: str, *, with_lines: bool = True) -> tuple[Any, yaml.Node | None]:
    """(plain data, the composed root node) of one YAML document, with the same
    hardening as load_yaml_with_lines. `source` names the text in errors (a file, or
    "-o key=value"); `with_lines` adds the line to it."""
    loader = _GuardedLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}" if mark and with_lines else source
        if isinstance(e, _Refused):
            raise YamlInputError(f"{where}: {e.problem}") from None
        problem = f"{e.problem} ({e.context})" if e.problem and e.context else e.problem or e.context
        if isinstance(e, yaml.constructor.ConstructorError):
            problem += "; only plain YAML values are read (no tags such as !!python/...)"
        raise YamlInputError(f"{where}: not valid YAML: {problem}") from None
    except yaml.YAMLError as e:
        raise YamlInputError(f"{source}: not valid YAML: {e}") from None
    except RecursionError:
        raise YamlInputError(f"{source}: not valid YAML: nested too deeply") from None
    finally:
        loader.dispose()
    return data, node


class _Refused(yaml.composer.ComposerError):
    """Valid YAML that we will not expand."""


class _GuardedLoader(yaml.SafeLoader):
    """SafeLoader whose composer refuses an alias inside its own anchor and counts, for
    every node, the size it would have once aliases are expanded."""

    def __init__(self, stream):
        super().__init__(stream)
        self._open_anchors: set[str] = set()  # anchors whose node is being composed
        self._expanded_sizes: dict[int, int] = {}  # id(node) -> node count, aliases expanded
        self._written_nodes = 0  # nodes composed from the text (an alias is not one)

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open_anchors:
                raise _Refused(
                    None, None, f"alias *{event.anchor} is inside its own anchor &{event.anchor} (a value "
                    f"that contains itself); write the values out instead", event.start_mark)
            return super().compose_node(parent, index)  # the anchored node, already sized
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open_anchors.add(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._open_anchors.discard(anchor)
        self._written_nodes += 1
        size = 1 + sum(self._expanded_sizes[id(child)] for child in _children(node))
        self._expanded_sizes[id(node)] = size
        if size - self._written_nodes > MAX_ALIAS_EXPANSION:
            raise _Refused(
                None, None, f"aliases expand this node to {size:,} values, more than "
                f"{MAX_ALIAS_EXPANSION:,} beyond the {self._written_nodes:,} written (an alias bomb?); "
                f"write the values out or use fewer aliases", node.start_mark)
        return node


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


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
