"""`${VAR}` and `${VAR:-default}` in config strings, resolved from the environment."""

from __future__ import annotations

import os
import re
from typing import Any, Callable

_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


class MissingVariable(KeyError):
    def __init__(self, variable: str, key_path: tuple):
        super().__init__(variable)
        self.variable = variable
        self.key_path = key_path


def interpolate(data: Any, env: dict[str, str] | None = None, _path: tuple = ()) -> Any:
    """Return a copy of `data` with every `${VAR}` in a string replaced.

    A variable that is unset and has no `:-default` raises MissingVariable carrying the
    key path, so the caller can name the file and line.
    """
    env = os.environ if env is None else env
    if isinstance(data, dict):
        return {k: interpolate(v, env, _path + (k,)) for k, v in data.items()}
    if isinstance(data, list):
        return [interpolate(v, env, _path + (i,)) for i, v in enumerate(data)]
    if isinstance(data, str):
        return _PATTERN.sub(_replacer(env, _path), data)
    return data


def _replacer(env: dict[str, str], path: tuple) -> Callable[[re.Match], str]:
    def replace(match: re.Match) -> str:
        name, default = match.group(1), match.group(2)
        if name in env and env[name] != "":
            return env[name]
        if default is not None:
            return default
        raise MissingVariable(name, path)

    return replace
