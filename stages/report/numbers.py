"""Numbers as the report writes them, the same in HTML and Markdown: counts with
thousands separators (109,870,728), byte counts also in decimal units (109.9 MB), seconds
as a duration, other floats to four significant digits."""

from __future__ import annotations

import math
from typing import Any

_UNITS = ("B", "kB", "MB", "GB", "TB", "PB")


def format_count(value: int | float) -> str:
    """109870728 -> 109,870,728; a float that is a whole number counts too."""
    return f"{int(value):,}"


def format_bytes(value: int | float) -> str:
    """109870728 -> 109.9 MB (decimal units, as disks and networks count)."""
    size, unit = float(value), 0
    while abs(size) >= 1000 and unit < len(_UNITS) - 1:
        size, unit = size / 1000, unit + 1
    return f"{int(size)} B" if unit == 0 else f"{size:.1f} {_UNITS[unit]}"


def format_seconds(value: float) -> str:
    """95.3 -> 1 min 35 s; 4000 -> 1 h 6 min; under a minute: 12.4 s."""
    if value < 60:
        return f"{value:.1f} s"
    minutes, seconds = divmod(int(round(value)), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def format_duration(seconds: float | None) -> str:
    """A wall time in a table cell: 4s, 1m 05s, 1h 02m; "-" when unknown."""
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


def format_float(value: float) -> str:
    """Four significant digits; thousands separators once the number is that large
    (19,312.5 rather than 1.931e+04)."""
    if not math.isfinite(value):
        return str(value)
    if value != 0 and (abs(value) >= 1e15 or abs(value) < 1e-4):
        return f"{value:.3e}"
    if abs(value) >= 1e4:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def format_stat(key: str, value: Any) -> str:
    """A statistic or metric by its name: `bytes_*`/`*_bytes` as "109,870,728 (109.9 MB)",
    `*seconds*` as a duration, other ints as counts, floats to four significant digits."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    name = key.rsplit("/", 1)[-1]
    if "bytes" in name.split("_") and value >= 0:
        return f"{format_count(value)} ({format_bytes(value)})" if value >= 1000 else format_count(value)
    if "seconds" in name.split("_") and value >= 0:
        return format_seconds(float(value))
    if isinstance(value, int):
        return format_count(value)
    return format_float(value)
