"""Jinja2 templates of a task spec, rendered the way lm-evaluation-harness renders them.

lm-eval (`lm_eval.utils.apply_template`) renders with StrictUndefined and
keep_trailing_newline=True and adds a `regex_replace` filter; a spec value that is
exactly the name of a field of the row is that field's value, not a template. We do the
same, in a sandbox (templates come from YAML files, not from us), and add the named
filters our built-in specs need where lm-eval calls Python (`wikitext_detokenize`).

    render_value("Question: {{goal}}\\nAnswer:", row)   -> "Question: ...\\nAnswer:"
    render_value("label", row)                          -> row["label"] (any type)
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import meta, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from stages.evaluate.time_limit import TimeLimitExceeded, time_limit

# What one row's template may take (compiling it included). A template renders a row in
# microseconds; one still running after this is broken (a regex that backtracks
# catastrophically runs for hours) and would stall the whole stage.
RENDER_SECONDS = 10.0


class TemplateRowError(ValueError):
    """A data row does not fit a template of its spec (a missing field, a value of the
    wrong kind); the message names the file and line of the row and the spec key."""


def regex_replace(string: str, pattern: str, repl: str, count: int = 0) -> str:
    """lm-eval's Jinja filter: re.sub as `{{ x | regex_replace(pattern, repl) }}`."""
    return re.sub(pattern, repl, string, count=count)


def wikitext_detokenize(string: str) -> str:
    """lm-eval's `tasks/wikitext/preprocess_wikitext.wikitext_detokenizer`, rule for rule:
    undo WikiText's tokenisation (" @-@ ", spaced punctuation, "= = =" headings)."""
    string = string.replace("s '", "s'")
    string = re.sub(r"/' [0-9]/", r"/'[0-9]/", string)
    string = string.replace(" @-@ ", "-")
    string = string.replace(" @,@ ", ",")
    string = string.replace(" @.@ ", ".")
    string = string.replace(" : ", ": ")
    string = string.replace(" ; ", "; ")
    string = string.replace(" . ", ". ")
    string = string.replace(" ! ", "! ")
    string = string.replace(" ? ", "? ")
    string = string.replace(" , ", ", ")
    string = re.sub(r"\(\s*([^\)]*?)\s*\)", r"(\1)", string)
    string = re.sub(r"\[\s*([^\]]*?)\s*\]", r"[\1]", string)
    string = re.sub(r"{\s*([^}]*?)\s*}", r"{\1}", string)
    string = re.sub(r"\"\s*([^\"]*?)\s*\"", r'"\1"', string)
    string = re.sub(r"'\s*([^']*?)\s*'", r"'\1'", string)
    string = string.replace("= = = =", "====")
    string = string.replace("= = =", "===")
    string = string.replace("= =", "==")
    string = string.replace(" " + chr(176) + " ", chr(176))
    string = string.replace(" \n", "\n")
    string = string.replace("\n ", "\n")
    string = string.replace(" N ", " 1 ")
    string = string.replace(" 's", "'s")
    return string


_BARE_NAME = re.compile(r"[A-Za-z_]\w*")

FILTERS = {"regex_replace": regex_replace, "wikitext_detokenize": wikitext_detokenize}

_ENV = ImmutableSandboxedEnvironment(
    loader=jinja2.BaseLoader(), undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
_ENV.filters.update(FILTERS)


def check_template(template: str) -> None:
    """What validating a spec needs, evaluating nothing: the template parses, and every
    filter and test it names exists. Raises jinja2.TemplateSyntaxError (the spec loader
    reports it with the YAML line of the key). Not a compile: Jinja folds constant
    expressions while compiling, filters included, so a constant argument to a
    backtracking regex_replace would run then, at `pretrain plan`."""
    for node in _ENV.parse(template).find_all((nodes.Filter, nodes.Test)):
        kind, known = ("filter", _ENV.filters) if isinstance(node, nodes.Filter) else ("test", _ENV.tests)
        if node.name not in known:
            raise jinja2.TemplateAssertionError(f"no {kind} named {node.name!r}", node.lineno)


@lru_cache(maxsize=256)
def compile_template(template: str) -> jinja2.Template:
    """Compile once (which may evaluate constant parts: call it under a time limit)."""
    return _ENV.from_string(template)


@lru_cache(maxsize=256)
def template_fields(template: str) -> frozenset[str]:
    """Names a template reads from the row (Jinja's own globals such as `range` excluded).
    Runs the code generator, so constant parts may be evaluated: call it under a time limit."""
    return frozenset(meta.find_undeclared_variables(_ENV.parse(template)) - set(_ENV.globals))


def render_value(template: str, row: dict[str, Any]) -> Any:
    """The row's field when `template` names one (lm-eval's rule), else the rendered text.
    Raises jinja2 errors (UndefinedError for a missing field); callers add the location."""
    if template in row:
        return row[template]
    # Under the limit from here: finding the fields and compiling both run Jinja's code
    # generator, which folds constant expressions (see check_template).
    with time_limit(RENDER_SECONDS):  # raises TimeLimitExceeded
        # Checked up front: StrictUndefined does not fire for a missing field that only
        # ends up inside a list ("{{[a, b]}}" would render "[Undefined, 'y']").
        missing = sorted(template_fields(template) - set(row))
        if missing:
            raise jinja2.UndefinedError(f"field {', '.join(map(repr, missing))} is missing")
        return compile_template(template).render(**row)


def render_in_row(template: str, row: dict[str, Any], *, key: str, where: str,
                  spec_file: str | None = None) -> Any:
    """render_value, with a failure explained: which row (`where` = "file:line"), which
    spec key (of which spec file), what went wrong, and which fields the row has."""
    if _BARE_NAME.fullmatch(template) and template not in row:
        # lm-eval would render the name as literal text; that is never what was meant.
        raise TemplateRowError(f"{where}: spec key '{key}' names field {template!r}, which this row lacks; "
                               f"the row has fields {sorted(row)}")
    try:
        return render_value(template, row)
    except TimeLimitExceeded:
        raise TemplateRowError(
            f"{spec_file or 'task spec'}: '{key}' ({template!r}) ran for more than {RENDER_SECONDS:g} s "
            f"on the row at {where} and was stopped. A template renders a row in well under a "
            f"second: look for a regex_replace pattern that backtracks (a nested repeat such as "
            f"'(a+)+$') or a loop over a huge range, and simplify it") from None
    except jinja2.TemplateError as error:
        raise TemplateRowError(
            f"{where}: spec key '{key}' ({template!r}) failed on this row: {error}. The row has "
            f"fields {sorted(row)}; fix the template or the row") from None
    except Exception as error:  # noqa: BLE001 (a template may call str methods that raise)
        raise TemplateRowError(
            f"{where}: spec key '{key}' ({template!r}) failed on this row: "
            f"{type(error).__name__}: {error}. The row has fields {sorted(row)}") from None


def as_literal(text: str) -> Any:
    """lm-eval's reading of a rendered list: `"['a', 'b']"` -> ['a', 'b']."""
    return ast.literal_eval(text)
