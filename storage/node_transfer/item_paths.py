"""Find and rewrite the local paths inside a task's work item.

A stage hands its tasks plain items (dataclasses, tuples, dicts of paths and numbers);
the paths in them point into the driver's mirror of the bucket. A task on another node
has its own mirror, at another place: `paths_under` finds what the item names there (what
the task must fetch first), `relocate` gives the item with those paths moved to where
the task has them, and moves the result's paths back.

Only str and os.PathLike values that are absolute paths under the root count. Containers
are walked: list, tuple (NamedTuple too), set, dict values, dataclass fields, and the
attributes of this project's own classes (a MetricsLog's path). Anything else (numpy
arrays, library objects) is passed through untouched: a path hidden inside such an object
is not seen, so items carry their paths as plain fields.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path, PurePath
from typing import Any


def _under(value: str, root: str) -> bool:
    return value == root or value.startswith(root + os.sep)


def _fields(value: Any) -> list[str] | None:
    """The attribute names to walk in `value`, or None when it is not walked."""
    if isinstance(value, type):
        return None
    if dataclasses.is_dataclass(value):
        return [field.name for field in dataclasses.fields(value)]
    if type(value).__module__.startswith("stages.") and hasattr(value, "__dict__"):
        return list(vars(value))
    return None


def paths_under(item: Any, root: Path) -> set[Path]:
    """Every path in `item` that is `root` or lies below it."""
    found: set[Path] = set()
    prefix = str(root)

    def visit(value: Any, depth: int) -> None:
        if depth > 32:  # items are shallow; a cycle or a deep structure is not one
            return
        if isinstance(value, (str, PurePath)):
            text = os.fspath(value)
            if _under(text, prefix):
                found.add(Path(text))
        elif isinstance(value, dict):
            for element in value.values():
                visit(element, depth + 1)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for element in value:
                visit(element, depth + 1)
        elif (names := _fields(value)) is not None:
            for name in names:
                visit(getattr(value, name), depth + 1)

    visit(item, 0)
    return found


def relocate(item: Any, moves: list[tuple[Path, Path]]) -> Any:
    """`item` with every path under a move's old root put under its new root (the first
    move that matches wins, so list the deeper roots first). str stays str, Path stays
    Path; unchanged parts are the same objects."""
    moves = [(str(old), str(new)) for old, new in moves]
    if all(old == new for old, new in moves):
        return item

    def moved_text(text: str) -> str | None:
        for old, new in moves:
            if _under(text, old):
                return new + text[len(old):]
        return None

    def move(value: Any, depth: int) -> Any:
        if depth > 32:
            return value
        if isinstance(value, str):
            text = moved_text(value)
            return value if text is None else text
        if isinstance(value, PurePath):
            text = moved_text(os.fspath(value))
            return value if text is None else type(value)(text)
        if isinstance(value, dict):
            moved = {key: move(element, depth + 1) for key, element in value.items()}
            return value if all(moved[k] is value[k] for k in value) else type(value)(moved)
        if isinstance(value, (list, tuple, set, frozenset)):
            elements = [move(element, depth + 1) for element in value]
            if all(a is b for a, b in zip(elements, value)):
                return value
            if hasattr(value, "_fields"):  # a NamedTuple
                return type(value)(*elements)
            return type(value)(elements)
        if (names := _fields(value)) is not None:
            changed = {}
            for name in names:
                current = getattr(value, name)
                moved = move(current, depth + 1)
                if moved is not current:
                    changed[name] = moved
            if not changed:
                return value
            result = copy.copy(value)
            for name, moved in changed.items():  # frozen or not, init or not
                object.__setattr__(result, name, moved)
            return result
        return value

    return move(item, 0)
