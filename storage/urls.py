"""Where a location points: an object-store URL (scheme://...) or a local path, decided
here and nowhere else, and how a URL is extended (a string join: a Path would fold the
`//` of `s3://` into one slash).

A value that looks like a URL with a slash missing (`s3:/bucket/x`, `s3:bucket/x`) is
neither: taken as a path it would quietly become the local folder `./s3:/bucket/x`, so it
is an error that names the value. One letter before the colon is a Windows drive
(`C:/runs`), not a scheme.
"""

from __future__ import annotations

import os
import re

from storage.errors import ConfigError

_SCHEME_LIKE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):/?(?!/)(.*)", re.DOTALL)
# Schemes that name a store even without any slash (`s3:bucket/x`).
_KNOWN_SCHEMES = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "hdfs", "http", "https",
                  "file", "memory"}


def slash_missing(value: str) -> str | None:
    """What is wrong with `value` when it is a URL with a slash missing, else None."""
    looks_like_url = _SCHEME_LIKE.fullmatch(value)
    if not looks_like_url or "://" in value:
        return None
    scheme, rest = looks_like_url.groups()
    if value[len(scheme) + 1:].startswith("/") or scheme.lower() in _KNOWN_SCHEMES:
        return (f"a slash missing? write {scheme}://{rest.lstrip('/')} for the object store, "
                f"or ./{value} for a local folder of that name")
    return None


def is_url(location: str | os.PathLike | None) -> bool:
    """Whether `location` is a URL (scheme://...) rather than a local path; None is neither.
    Raises ConfigError, naming the value, for a URL with a slash missing."""
    if location is None:
        return False
    text = os.fspath(location) if isinstance(location, os.PathLike) else str(location)
    problem = slash_missing(text)
    if problem:
        raise ConfigError(f"'{text}': {problem}")
    return "://" in text


def check_location(value: str) -> str:
    """A workdir or store setting as the config keeps it: a path unchanged, a URL without
    its trailing slash. Raises ConfigError (the config names the key) for anything else."""
    problem = slash_missing(value)
    if problem:
        raise ConfigError(problem)
    if "://" in value:
        scheme, _, rest = value.partition("://")
        if not scheme.isidentifier() or not rest.strip("/"):
            raise ConfigError(f"'{value}' is neither a path nor an object-store URL such as "
                              f"s3://bucket/prefix")
        return value.rstrip("/")
    return value


def join(url: str, *parts: str) -> str:
    """`url` and the parts, one slash between each, empty parts skipped."""
    return "/".join([url.rstrip("/"), *(str(p).strip("/") for p in parts if str(p))])
