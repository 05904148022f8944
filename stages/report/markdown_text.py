"""User text (experiment and run names, paths, error messages, config values) in the
Markdown twins of the report pages (sweep.md, served by the dashboard at /sweep.md).

A Markdown viewer renders HTML found in the text, so a name such as
`<img src=x onerror=alert(1)>` would run in the reader's browser; and a `|` ends a table
cell. `md_text` makes any text inert; `md_code` shows it as code, whatever it contains.
"""

from __future__ import annotations

import re
from html import escape


def md_text(text) -> str:
    """Text for a Markdown paragraph or table cell: `<`, `>` and `&` as entities (shown as
    the characters, never parsed as HTML), `|` escaped, on one line."""
    return escape(str(text), quote=False).replace("|", "\\|").replace("\n", " ")


def md_code(text) -> str:
    """Text as an inline code span (HTML is never parsed inside one). The fence is longer
    than any run of backticks in the text, which therefore cannot close it early; `|` is
    escaped, as GitHub's tables need even inside code."""
    text = str(text).replace("\n", " ").replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"
