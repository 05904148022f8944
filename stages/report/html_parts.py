"""Building blocks of a self-contained HTML page: no external CSS, scripts or images.

Every value from a run (config strings, error messages, task names) goes through
`escape`, so a stray `<` in an error message cannot break the page.
"""

from __future__ import annotations

from html import escape as _escape
from typing import Any, Iterable

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.group td { background: #fafafa; font-weight: bold; }
code { font-size: 0.9em; } .plots { display: flex; flex-wrap: wrap; gap: 1em; }
figure { margin: 0; } img.plot { max-width: 100%; border: 1px solid #eee; }
.state-failed, .kind-failed { color: #b00020; font-weight: bold; }
.state-incomplete, .state-not-run, .kind-missing { color: #a66300; }
.better { color: #1b7f3b; } .worse { color: #b00020; } .muted { color: #777; }
.badge { padding: 0 0.4em; border-radius: 0.3em; white-space: nowrap; } .badge-above { color: #1b7f3b; }
.badge-chance { background: #fde7c1; color: #7a4a00; font-weight: bold; }
.badge-below { background: #f9d0d6; color: #b00020; font-weight: bold; }
.badge-unreliable { background: #e8e0f5; color: #4b2a85; font-weight: bold; white-space: normal; }
.summary { display: flex; flex-wrap: wrap; gap: 0.4em 1.6em; padding: 0.6em 0.9em; background: #f6f8fa;
  border: 1px solid #ddd; border-radius: 0.4em; } .summary div { white-space: nowrap; }
.summary b { font-size: 1.15em; } .summary .label { color: #666; font-size: 0.85em; display: block; }
.significant { font-weight: bold; }
.kind-at-chance, .kind-unreadable { color: #a66300; }
table.samples td { white-space: pre-wrap; }
"""


def escape(value: Any) -> str:
    return _escape(str(value), quote=True)


def format_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table(headers: list[str], rows: Iterable[list[Any]], *, numeric: Iterable[int] = (),
          css_class: str = "") -> str:
    """An HTML table; cells are escaped unless wrapped in `Raw`."""
    numeric = set(numeric)
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        if isinstance(row, GroupRow):
            body.append(f'<tr class="group"><td colspan="{len(headers)}">{escape(row.title)}</td></tr>')
            continue
        cells = "".join(
            f'<td{" class=num" if i in numeric else ""}>{cell if isinstance(cell, Raw) else escape(format_value(cell))}</td>'
            for i, cell in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    class_attr = f' class="{escape(css_class)}"' if css_class else ""
    return f"<table{class_attr}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class Raw(str):
    """Cell content that is already HTML (built from escaped parts)."""


class GroupRow:
    """A full-width row that heads a group of rows (e.g. one fine-tuning task)."""

    def __init__(self, title: str):
        self.title = title


def plot_figure(title: str, png_base64: str) -> str:
    return (f'<figure><img class="plot" alt="{escape(title)}" '
            f'src="data:image/png;base64,{png_base64}"></figure>')


def page(title: str, body: str, *, refresh_seconds: int | None = None) -> str:
    # A meta refresh, not a script: the dashboard regenerates the page on each request,
    # and a page that runs no JavaScript cannot log console errors.
    refresh = f'<meta http-equiv="refresh" content="{int(refresh_seconds)}">' if refresh_seconds else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title>{refresh}"
            # An empty icon: a browser would otherwise fetch /favicon.ico and log a 404.
            '<link rel="icon" href="data:,">'
            f"<style>{STYLE}</style></head>"
            f"<body>\n{body}\n</body></html>\n")
