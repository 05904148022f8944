"""Line plots as PNG bytes encoded in base64, for embedding in a self-contained page.

Uses matplotlib's object API (`Figure`, no pyplot): no global state and no GUI backend,
so the dashboard can render plots from several HTTP threads at once.
"""

from __future__ import annotations

import base64
import io

Points = list[tuple[int, float]]


def line_plot_png(title: str, lines: dict[str, Points], *, xlabel: str = "step",
                  log_y: bool = False) -> str:
    """base64 PNG of one panel: one line per label (single points drawn as markers)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.0, 3.2), dpi=90, layout="constrained")
    axes = figure.add_subplot()
    for label, points in lines.items():
        steps = [step for step, _ in points]
        values = [value for _, value in points]
        # A validation loss measured a few times reads better with its points marked.
        marker = "o" if len(points) <= 20 else None
        axes.plot(steps, values, label=label, marker=marker, markersize=3, linewidth=1.4)
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.grid(True, alpha=0.3)
    if log_y and all(v > 0 for points in lines.values() for _, v in points):
        axes.set_yscale("log")
    if len(lines) > 1 or any(label for label in lines):
        axes.legend(fontsize="small")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode("ascii")
