"""The scaling section of a sweep's report: validation loss against parameters, tokens and
training FLOPs with a fitted power law (`views.scaling_fit`), downstream scores
against compute, and every fit's inputs and residuals in the Markdown so that a reader
can check the figure by hand.

    html, markdown = scaling_section(sources)    # ("", "") when no axis varies

The points come from finished pretrain stages (`views.scaling_points`). The
parameter axis uses Kaplan et al.'s non-embedding count when every point has it (GPT-2
models), else every parameter; training compute is C = 6 N D with that same N. The
measured exponents are set beside the published ones without a verdict: a few small,
short runs on this pipeline's data are not on the published laws' scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stages.report import RunSource, escape, log_log_plot_png, md_text, plot_figure, table
from views.scaling_fit import SATURATING, PowerLawFit, describe_formula, fit_power_law
from views.scaling_points import ScalingPoint, scaling_points

__all__ = ["scaling_section", "scaling_points", "ScalingPoint"]


@dataclass(frozen=True)
class Axis:
    key: str        # parameters | tokens | flops
    name: str       # as the text names it
    symbol: str     # in formulas
    published: str  # the published exponents it can be set beside


AXES = (
    Axis("parameters", "parameters", "N",
         "Kaplan et al. (2020): alpha_N = 0.076, with N the non-embedding parameters of models trained "
         "close to convergence. Chinchilla (Hoffmann et al. 2022): L(N, D) = E + A/N^0.34 + B/D^0.28 with "
         "E = 1.69, an exponent of 0.34 on N above a floor"),
    Axis("tokens", "training tokens", "D",
         "Kaplan et al. (2020): alpha_D = 0.095, for models large enough not to limit the loss, stopped "
         "early. Chinchilla (Hoffmann et al. 2022): L(N, D) = E + A/N^0.34 + B/D^0.28 with E = 1.69, "
         "an exponent of 0.28 on D above a floor"),
    Axis("flops", "training FLOPs", "C",
         "Kaplan et al. (2020): alpha_C(min) = 0.050, along the compute-efficient frontier (the lowest "
         "loss reachable at each compute, the model size chosen for it); the points of one sweep are on "
         "that frontier only if the sweep chose them so"),
)
CAVEAT = ("These are a few small runs of this pipeline, on its own data and tokenizer and trained briefly; "
          "the published laws come from models of up to billions of parameters trained on up to hundreds "
          "of billions of tokens, with losses measured on other text. The exponents are set side by side for "
          "reference; nothing here tests either. val_loss is the pretrain stage's last validation loss: "
          "for GPT (clm) the mean next-token cross-entropy in nats, for BERT and T5 their objectives' "
          "losses, which the published laws do not describe")
FIT_NOTE = ("Fitted by least squares on log(loss) (r^2 on log loss too); residual = loss - predicted, "
            "relative residual = residual / predicted")
CURVE_POINTS = 60


def scaling_section(sources: list[RunSource]) -> tuple[str, str]:
    """(HTML fragment, Markdown) of the scaling section over these runs; ("", "") when
    fewer than 2 finished points differ in parameters, tokens or FLOPs."""
    points = scaling_points(sources)
    usable = [p for p in points if p.val_loss is not None and p.val_loss > 0]
    non_embedding = bool(usable) and all(p.non_embedding_parameters is not None for p in usable)
    fits: dict[str, PowerLawFit] = {}
    axis_lines: dict[str, list[str]] = {}  # per axis: why it has no fit, or what its fit mixes
    for axis in AXES:
        fit, lines = _fit_axis(axis, usable, non_embedding)
        if fit is not None:
            fits[axis.key] = fit
        axis_lines[axis.key] = lines
    if not fits:
        return "", ""
    notes = _left_out(sources, points) + _counting_notes(non_embedding)
    html = ["<h2>Scaling</h2>", f"<p>{escape(CAVEAT)}.</p>",
            "<ul>" + "".join(f"<li>{escape(note)}</li>" for note in notes) + "</ul>",
            _points_table_html(usable, non_embedding)]
    md = ["## Scaling", "", CAVEAT + ".", ""] + [f"- {md_text(note)}" for note in notes] + [""]
    md += _points_table_md(usable, non_embedding)
    for axis in AXES:
        html.append(f"<h3>Validation loss against {escape(axis.name)}</h3>")
        md += ["", f"### Validation loss against {axis.name}", ""]
        fit = fits.get(axis.key)
        if fit is None:
            html += [f"<p>{escape(line)}</p>" for line in axis_lines[axis.key]]
            md += [md_text(line) for line in axis_lines[axis.key]]
            continue
        title = f"Validation loss against {axis.name}"
        html.append('<div class="plots">' + plot_figure(title, _fit_plot(title, axis, fit, non_embedding)) + "</div>")
        fit_lines = _fit_text(axis, fit)  # its last line sets the exponent beside the published ones
        text = fit_lines[:-1] + axis_lines[axis.key] + fit_lines[-1:]
        html += [f"<p>{escape(line)}</p>" for line in text]
        html.append("<details><summary>Inputs and residuals</summary>" + _residual_table_html(axis, fit)
                    + "</details>")
        md += _residual_table_md(axis, fit) + [""] + [f"{md_text(line)}  " for line in text]
    downstream_html, downstream_md = _downstream(points, non_embedding)
    return "\n".join(html) + downstream_html, "\n".join(md + downstream_md) + "\n"


def _fit_axis(axis: Axis, points: list[ScalingPoint], non_embedding: bool) -> tuple[PowerLawFit | None, list[str]]:
    """(the fit, lines about it) or (None, why there is none)."""
    values = [(p, axis_value(p, axis.key, non_embedding)) for p in points]
    known = [(p, x) for p, x in values if x is not None and x > 0]
    unknown = [f"{p.label} ({_why_unknown(p, axis.key, non_embedding)})" for p, x in values if x is None or x <= 0]
    lines = [f"Left out, {axis.symbol} unknown: {'; '.join(unknown)}."] if unknown else []
    distinct = sorted({x for _, x in known})
    if len(distinct) < 2:
        if distinct:
            value = _number(distinct[0], axis.key == "flops")
            lines.insert(0, f"{axis.name.capitalize()}: every point has {axis.symbol} = {value}; nothing to fit.")
        else:
            lines.insert(0, f"{axis.name.capitalize()}: no point has a known {axis.symbol}; nothing to fit.")
        return None, lines
    fit = fit_power_law([x for _, x in known], [p.val_loss for p, _ in known], [p.label for p, _ in known])
    return fit, lines + _mixed(axis, [p for p, _ in known], non_embedding)


def axis_value(point: ScalingPoint, key: str, non_embedding: bool) -> float | None:
    if key == "parameters":
        value = point.parameters(non_embedding)
    elif key == "tokens":
        value = point.tokens
    else:
        value = point.flops(non_embedding)
    return None if value is None else float(value)


def _why_unknown(point: ScalingPoint, key: str, non_embedding: bool) -> str:
    parameters = point.parameters(non_embedding)
    if key != "tokens" and (parameters is None or parameters <= 0):
        return "the pretrain manifest has no positive num_parameters"
    return f"tokens {point.tokens_counted}"


def _mixed(axis: Axis, points: list[ScalingPoint], non_embedding: bool) -> list[str]:
    """What else changes along this axis: a fit of loss on N while D changes too mixes both."""
    varying = [other for other in ("parameters", "tokens") if other != axis.key
               and len({axis_value(p, other, non_embedding) for p in points}) > 1]
    if axis.key == "flops":
        through = [key for key in ("parameters", "tokens")
                   if len({axis_value(p, key, non_embedding) for p in points}) > 1]
        return [f"C changes here through {' and '.join(through) or 'neither N nor D'}."]
    if varying:
        values = [axis_value(p, varying[0], non_embedding) for p in points]
        known = [v for v in values if v is not None]
        span = f" ({_number(min(known))} to {_number(max(known))})" if known else ""
        return [f"Note: {varying[0]} also differ across these points{span}, so this fit mixes both effects."]
    return []


def _fit_text(axis: Axis, fit: PowerLawFit) -> list[str]:
    symbol = axis.symbol
    se = f" ± {fit.exponent_se:.4f} (standard error)" if fit.exponent_se is not None else \
        " (no standard error: a line through 2 points fits them exactly)"
    decades = math.log10(max(fit.x) / min(fit.x))
    lines = [f"Fit ({fit.form}): {fit.formula(symbol)}; exponent alpha = {fit.exponent:.4f}{se}; "
             f"r^2 = {fit.r_squared:.4f}; {len(fit.x)} points over {decades:.2f} decades of {symbol}.",
             f"{fit.saturating_note[0].upper()}{fit.saturating_note[1:]}." if fit.saturating_note else ""]
    if fit.form == SATURATING:
        lines.append(f"Pure power law for comparison: {_power_law_text(fit, symbol)}.")
    elif fit.saturating is not None:
        s = fit.saturating
        lines.append(f"Saturating fit, not kept: L = {s.floor:.4g} + {s.a:.4g} · {symbol}^-{s.alpha:.4f}.")
    measured = f"alpha = {fit.exponent:.4f}" + (f" ± {fit.exponent_se:.4f}" if fit.exponent_se is not None else "")
    if fit.form == SATURATING:
        measured += f" above a floor E = {fit.saturating.floor:.4g}"
    lines.append(f"Measured here: {measured}. Published: {axis.published}.")
    return [line for line in lines if line]


def _power_law_text(fit: PowerLawFit, symbol: str) -> str:
    law = fit.power_law
    se = f" ± {law.alpha_se:.4f}" if law.alpha_se is not None else ""
    return f"{describe_formula(law, symbol)}, alpha = {law.alpha:.4f}{se}, r^2 = {law.r_squared:.4f}"


def _left_out(sources: list[RunSource], points: list[ScalingPoint]) -> list[str]:
    finished = len(points)
    notes = []
    if finished < len(sources):
        notes.append(f"{len(sources) - finished} of {len(sources)} runs have no finished pretrain stage "
                     "and are left out.")
    no_loss = [p.label for p in points if p.val_loss is None or p.val_loss <= 0]
    if no_loss:
        notes.append("Left out, no positive finite val_loss in the pretrain manifest (diverged or never "
                     "validated): " + ", ".join(no_loss) + ".")
    return notes


def _counting_notes(non_embedding: bool) -> list[str]:
    parameters = ("N: non-embedding parameters, estimated from the config as 2 · layers · hidden · "
                  "(2 · hidden + MLP width) (= 12 · layers · hidden² with a 4x MLP; Kaplan et al.'s count, "
                  "without embeddings, biases and norms)" if non_embedding else
                  "N: every trainable parameter, embeddings included (the pretrain manifest's num_parameters); "
                  "Kaplan et al. count parameters without embeddings, which here are not known for every run "
                  "(the estimate covers GPT-2 models)")
    return [parameters + ".",
            "D: training tokens = steps × sequences per step (micro_batch_size × gradient_accumulation_steps "
            "× num_workers) × tokens per sequence, as the pretrain stage counts them.",
            "C: training FLOPs ≈ 6 N D (2 FLOPs per weight per token forward, 4 backward; attention's own "
            "score and value products, 12 · layers · hidden · seq_len per token, are left out).",
            FIT_NOTE + "."]


def _points_table_html(points: list[ScalingPoint], non_embedding: bool) -> str:
    return table(["run", "parameters (all)", "parameters (non-embedding, est.)", "tokens", "FLOPs (6ND)",
                  "val loss", "tokens counted as"],
                 [[p.label, _number(p.num_parameters), _number(p.non_embedding_parameters), _number(p.tokens),
                   _number(p.flops(non_embedding), True), _loss(p.val_loss), p.tokens_counted] for p in points],
                 numeric=[1, 2, 3, 4, 5], css_class="scaling-points")


def _points_table_md(points: list[ScalingPoint], non_embedding: bool) -> list[str]:
    out = ["| run | parameters (all) | parameters (non-embedding, est.) | tokens | FLOPs (6ND) | val loss | "
           "tokens counted as |", "|---|---:|---:|---:|---:|---:|---|"]
    out += [f"| {md_text(p.label)} | {_number(p.num_parameters)} | {_number(p.non_embedding_parameters)} | "
            f"{_number(p.tokens)} | {_number(p.flops(non_embedding), True)} | {_loss(p.val_loss)} | "
            f"{md_text(p.tokens_counted)} |" for p in points]
    return out


def _residual_rows(axis: Axis, fit: PowerLawFit) -> list[list[str]]:
    return [[label, _number(x, axis.key == "flops"), f"{y:.4f}", f"{predicted:.4f}", f"{residual:+.4f}",
             f"{relative:+.2%}"]
            for label, x, y, predicted, residual, relative in
            zip(fit.labels, fit.x, fit.y, fit.predicted, fit.residuals, fit.relative_residuals)]


def _residual_table_html(axis: Axis, fit: PowerLawFit) -> str:
    return table(["run", axis.symbol, "val loss", "predicted", "residual", "relative residual"],
                 _residual_rows(axis, fit), numeric=[1, 2, 3, 4, 5], css_class="scaling-residuals")


def _residual_table_md(axis: Axis, fit: PowerLawFit) -> list[str]:
    out = [f"| run | {axis.symbol} | val loss | predicted | residual | relative residual |",
           "|---|---:|---:|---:|---:|---:|"]
    return out + ["| " + " | ".join([md_text(row[0])] + row[1:]) + " |" for row in _residual_rows(axis, fit)]


def _fit_plot(title: str, axis: Axis, fit: PowerLawFit, non_embedding: bool) -> str:
    grid = np.geomspace(min(fit.x), max(fit.x), CURVE_POINTS)  # within the points: no extrapolation
    curves = {f"fit: {fit.formula(axis.symbol)}": list(zip(grid, fit.predict(grid)))}
    if fit.form == SATURATING:
        curves["power law"] = list(zip(grid, fit.power_law.predict(grid)))
    xlabel = {"parameters": "non-embedding parameters N" if non_embedding else "parameters N (all)",
              "tokens": "training tokens D", "flops": "training FLOPs C = 6ND"}[axis.key]
    return log_log_plot_png(title, {"runs": list(zip(fit.x, fit.y))}, xlabel=xlabel, ylabel="validation loss",
                            fitted=curves, point_names={"runs": list(fit.labels)})


def _downstream(points: list[ScalingPoint], non_embedding: bool) -> tuple[str, list[str]]:
    """Scores against training compute: one plot per kind of score (scores, perplexity,
    bits per byte), no fit; a table with the runs in order of compute."""
    with_scores = [p for p in points if p.scores]
    if not with_scores:
        return "", []
    placed = sorted((p for p in with_scores if p.flops(non_embedding) is not None),
                    key=lambda p: p.flops(non_embedding))
    html = ["<h3>Downstream scores against training compute</h3>"]
    md = ["", "### Downstream scores against training compute", ""]
    missing = [p.label for p in with_scores if p.flops(non_embedding) is None]
    if missing:
        note = f"Left out, training FLOPs unknown: {', '.join(missing)}."
        html.append(f"<p>{escape(note)}</p>")
        md += [md_text(note), ""]
    if not placed:
        return "\n".join(html), md
    by_axis: dict[str, dict[str, list[tuple[float, float]]]] = {}
    higher: dict[str, bool] = {}
    for point in placed:
        for score in point.scores:
            line = by_axis.setdefault(score.axis, {}).setdefault(score.name, [])
            line.append((point.flops(non_embedding), score.value))
            higher[score.name] = score.higher_is_better
    figures = [plot_figure(f"Downstream {axis} against training FLOPs", log_log_plot_png(
        f"Downstream {axis} against training FLOPs", lines, xlabel="training FLOPs C = 6ND", ylabel=axis,
        log_y=axis == "perplexity", connect=True)) for axis, lines in by_axis.items()]
    html.append('<div class="plots">' + "".join(figures) + "</div>")
    names = [name for lines in by_axis.values() for name in lines]
    headers = ["score"] + [f"{p.label} (C = {_number(p.flops(non_embedding), True)})" for p in placed]
    values = {(p.label, s.name): s.value for p in placed for s in p.scores}
    rows = [[name + ("" if higher[name] else " (lower is better)")]
            + [f"{values[(p.label, name)]:.4f}" if (p.label, name) in values else "-" for p in placed]
            for name in names]
    html.append(table(headers, rows, numeric=range(1, len(headers)), css_class="scaling-downstream"))
    md += ["| " + " | ".join(md_text(h) for h in headers) + " |", "|---|" + "---:|" * len(placed)]
    md += ["| " + " | ".join(md_text(cell) for cell in row) + " |" for row in rows]
    return "\n".join(html), md


def _number(value, scientific: bool = False) -> str:
    """Counts with separators (hand-checkable); FLOPs (`scientific`) and fractions as 1.2346e+10."""
    if value is None:
        return "-"
    if scientific or value != int(value):
        return f"{value:.4e}"
    return f"{int(value):,}"


def _loss(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"

