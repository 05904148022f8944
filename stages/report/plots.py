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
                  baselines: dict[str, float] | None = None, engineering_x: bool = False) -> str:
    """base64 PNG of one panel: one line per label (single points drawn as markers);
    `bands` shade a line's 95% interval and `baselines` draw a dashed level in the
    line's colour; `engineering_x` writes x ticks as 2M, 500k (token counts)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    bands, baselines = bands or {}, baselines or {}
    figure = Figure(figsize=(6.0, 3.2), dpi=90, layout="constrained")
    axes = figure.add_subplot()
    for label, points in lines.items():
        steps = [step for step, _ in points]
        values = [value for _, value in points]
        # A validation loss measured a few times reads better with its points marked.
        marker = "o" if len(points) <= 20 else None
        (line,) = axes.plot(steps, values, label=label, marker=marker, markersize=3, linewidth=1.4)
        if bands.get(label):
            xs, lows, highs = zip(*bands[label])
            axes.fill_between(xs, lows, highs, color=line.get_color(), alpha=0.15, linewidth=0)
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
    if len(lines) > 1 or any(label for label in lines):
        axes.legend(fontsize="small")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode("ascii")
