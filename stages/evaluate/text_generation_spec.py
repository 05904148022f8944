"""The spec keys of generation tasks scored on whole outputs (BLEU, chrF, ROUGE), as the
GPT-2 paper's translation and TL;DR: summarization tasks:

    kind: generation
    metrics: [bleu, chrf]                          # or [rouge]: ROUGE-1, -2, -L, -Lsum
    doc_to_target: de                              # the reference, or a list of them
    baseline: {output: "{{en}}", name: copy the source}   # what the model must beat

Every such score gets a baseline (the project's rule for scores), so `baseline` is
required with these metrics: a template rendering, per row, the output made without a
model. TaskSpec (spec.py) holds the keys and calls `check_text_generation`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from stages.text_metrics import METRICS as TEXT_METRICS

TEXT_METRIC_NAMES = tuple(TEXT_METRICS)


class TextBaseline(BaseModel):
    """A generation task's baseline output."""

    model_config = ConfigDict(extra="forbid")

    output: str = Field(description="template of the baseline output of one row, e.g. '{{en}}' (copy the "
                        "source) or \"{{ dialogue.split('\\n')[0] }}\" (the first turn)")
    name: str = Field(description="what the baseline is, for people (shown beside the score)")


def uses_text_metrics(spec) -> bool:
    return spec.kind == "generation" and any(m in TEXT_METRICS for m in spec.metrics)


def check_text_generation(spec) -> None:
    """Cross-field rules, as "[key] message" ValueErrors (spec.py's convention)."""
    if not uses_text_metrics(spec):
        return
    other = [m for m in spec.metrics if m not in TEXT_METRICS]
    if other:
        raise ValueError(f"[metrics] {', '.join(other)} score short answers and "
                         f"{', '.join(m for m in spec.metrics if m in TEXT_METRICS)} whole texts; a task "
                         "takes one family: split it into two tasks")
    if spec.baseline is None:
        raise ValueError("[metrics] bleu, chrf and rouge need a baseline, the output made without a model: "
                         "add baseline: {output: '{{source_field}}', name: copy the source} (translation) or "
                         "the dialogue's first turn / the article's lead (summarization)")
