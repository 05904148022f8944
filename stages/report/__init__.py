"""The report stage (run.py) and its public face.

What reads many runs (the `views` package: the runs table, comparisons, scaling fits, the
dashboard) builds each run's report content and draws with the same parts as this stage.
It imports them from here and from no module inside the package: import-linter's
"views import no stage internals" contract (pyproject.toml) forbids the submodules, so
everything below is what the report stage offers other layers.
"""

from stages.report.content import build_report, format_time
from stages.report.curves import METRICS_FILE, Series, finetune_series, panels, pretrain_series, read_records
from stages.report.evaluation import EVALUATION_LEGEND, KEY_METRICS, read_evaluation, snapshot_axis, verdict_label
from stages.report.html_parts import Raw, escape, format_value, page, plot_figure, table
from stages.report.html_report import render_html
from stages.report.markdown import render_markdown
from stages.report.markdown_text import md_code, md_text
from stages.report.numbers import format_duration
from stages.report.plots import line_plot_png, log_log_plot_png
from stages.report.scores import BASELINE_LEGEND, finetune_scores, glue_average, group_by_task, score_contexts
from stages.report.sources import RunSource, StageRecord

__all__ = [
    "BASELINE_LEGEND", "EVALUATION_LEGEND", "KEY_METRICS", "METRICS_FILE", "Raw", "RunSource", "Series",
    "StageRecord", "build_report", "escape", "finetune_scores", "finetune_series", "format_duration",
    "format_time", "format_value", "glue_average", "group_by_task", "line_plot_png", "log_log_plot_png",
    "md_code", "md_text", "page", "panels", "plot_figure", "pretrain_series", "read_evaluation",
    "read_records", "render_html", "render_markdown", "score_contexts", "snapshot_axis", "table",
    "verdict_label",
]
