"""Line plots as PNG bytes encoded in base64, for embedding in a self-contained page.

Uses matplotlib's object API (`Figure`, no pyplot): no global state and no GUI backend,
so the dashboard can render plots from several HTTP threads at once.
"""

from __future__ import annotations

import base64
import io

Points = list[tuple[int, float]]
Bands = list[tuple[int, float, float]]  # (x, low, high): a shaded interval around a line


def line_plot_png(title: str, lines: dict[str, Points], *, xlabel: str = "step",
                  log_y: bool = False, bands: dict[str, Bands] | None = None,
                  baselines: dict[str, float] | None = None, engineering_x: bool = False,
                  legend_outside: bool = False) -> str:
    """base64 PNG of one panel: one line per label (single points drawn as markers);
    `bands` shade a line's 95% interval and `baselines` draw a dashed level in the
    line's colour; `engineering_x` writes x ticks as 2M, 500k (token counts);
    `legend_outside` puts the legend beside the axes (wider figure), never over the data."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    bands, baselines = bands or {}, baselines or {}
    figure = Figure(figsize=(8.0 if legend_outside else 6.0, 3.2), dpi=90, layout="constrained")
    axes = figure.add_subplot()
    for label, points in lines.items():
        steps = [step for step, _ in points]
        values = [value for _, value in points]
        # A validation loss measured a few times reads better with its points marked.
        marker = "o" if len(points) <= 20 else None
        (line,) = axes.plot(steps, values, label=label, marker=marker, markersize=3, linewidth=1.4)
        if bands.get(label):
            xs, lows, highs = zip(*bands[label])
            # many overlapping bands: fainter, so that the lines stay readable through them
            axes.fill_between(xs, lows, highs, color=line.get_color(), alpha=0.15 if len(bands) <= 3 else 0.06,
                              linewidth=0)
        if baselines.get(label) is not None:
            axes.axhline(baselines[label], color=line.get_color(), linestyle="--", linewidth=0.9, alpha=0.8)
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.grid(True, alpha=0.3)
    if engineering_x:
        axes.xaxis.set_major_formatter(EngFormatter(sep=""))
    drawn = [v for points in lines.values() for _, v in points] + [
        v for band in bands.values() for _, low, high in band for v in (low, high)] + list(baselines.values())
    if log_y and all(v > 0 for v in drawn):
        axes.set_yscale("log")
    if legend_outside and lines:
        axes.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    elif len(lines) > 1 or any(label for label in lines):
        axes.legend(fontsize="small")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def log_log_plot_png(title: str, points: dict[str, list[tuple[float, float]]], *, xlabel: str, ylabel: str,
                     fitted: dict[str, list[tuple[float, float]]] | None = None, log_y: bool = True,
                     point_names: dict[str, list[str]] | None = None, connect: bool = False) -> str:
    """base64 PNG of points on a log x axis (and log y unless `log_y` is False: scores
    between 0 and 1 read better on a linear one): each series as markers, joined in x
    order with `connect` (a score across runs); `fitted` curves as lines (a power law
    fitted to the points is straight on log-log axes); `point_names` writes a name (the
    run's label) beside each point of a series."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fitted, point_names = fitted or {}, point_names or {}
    figure = Figure(figsize=(6.0, 3.6), dpi=90, layout="constrained")
    axes = figure.add_subplot()
    for label, series in points.items():
        ordered = sorted(range(len(series)), key=lambda i: series[i][0])
        xs = [series[i][0] for i in ordered]
        ys = [series[i][1] for i in ordered]
        axes.plot(xs, ys, label=label, marker="o", markersize=5, linestyle="-" if connect else "none",
                  linewidth=1.2)
        for i, name in enumerate(point_names.get(label, [])[:len(series)]):
            axes.annotate(name, series[i], textcoords="offset points", xytext=(4, 4), fontsize="x-small")
    for i, (label, curve) in enumerate(fitted.items()):  # the first curve solid, others (alternatives) dashed
        axes.plot([x for x, _ in curve], [y for _, y in curve], label=label, linewidth=1.2,
                  linestyle="-" if i == 0 else "--")
    axes.set_xscale("log")
    drawn = [y for series in list(points.values()) + list(fitted.values()) for _, y in series]
    if log_y and drawn and all(y > 0 for y in drawn):
        axes.set_yscale("log")
        # Losses span far less than a decade: plain numbers on the ticks (3.4, 3.6), not 4x10^0.
        plain = FuncFormatter(lambda value, _: f"{value:.3g}")
        axes.yaxis.set_major_formatter(plain)
        axes.yaxis.set_minor_formatter(plain)
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(True, which="both", alpha=0.3)
    if len(points) + len(fitted) > 3:  # many scores: beside the plot, not over its lines
        axes.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    else:
        axes.legend(fontsize="small")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode("ascii")
