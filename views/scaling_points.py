"""One scaling point per run with a finished pretrain stage: its size, its training tokens
and compute, its final validation loss, and the downstream scores the report collects.

    N  parameters: the pretrain manifest's `num_parameters` (every trainable parameter,
       embeddings included, a tied LM head once: the model's `num_parameters()`), and for
       GPT-2 models Kaplan et al.'s non-embedding count estimated from the config,
       2 * num_layers * hidden_size * (2 * hidden_size + intermediate_size)
       (= 12 * num_layers * hidden_size^2 with the default 4x MLP; biases and norms left out)
    D  tokens trained: steps x sequences per step x tokens per sequence, as the pretrain
       stage counts them (stages/pretrain/train_loop.py tokens_per_step): sequences per
       step = micro_batch_size x gradient_accumulation_steps x num_workers (the pretrain
       manifest's config); tokens per sequence = tokens_per_s / samples_per_s of the last
       metrics.jsonl record that has both (the stage's own figure; span: encoder + decoder
       tokens), else dataset.seq_len for clm and mlm. A run resumed on another number of
       workers counted its tokens on both; this product uses the config's num_workers.
    C  training compute: C = 6 N D FLOPs (forward 2 FLOPs per weight per token, backward
       twice that; attention's own QK^T and AV products, 12 * layers * hidden * seq_len per
       token, and the difference between lookups and matmuls are left out), with N either
       of the counts above (`ScalingPoint.flops`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from stages.report import (KEY_METRICS, RunSource, StageRecord, finetune_scores,
    glue_average, group_by_task, read_evaluation, read_records, snapshot_axis)
from views.comparison import run_labels

FLOPS_PER_PARAMETER_TOKEN = 6  # C = 6 N D
TOKEN_OBJECTIVES = ("clm", "mlm")  # tokens per sequence = dataset.seq_len (span adds the targets)


@dataclass(frozen=True)
class DownstreamScore:
    name: str               # "sst2/accuracy (fine-tuned)", "GLUE average", "piqa/acc (0-shot)"
    value: float
    higher_is_better: bool
    axis: str               # the plot it goes in: scores | perplexity | bits per byte


@dataclass(frozen=True)
class ScalingPoint:
    label: str
    num_parameters: int | None            # every trainable parameter, embeddings included
    non_embedding_parameters: int | None  # Kaplan's N, estimated from the config (GPT-2 only)
    tokens: int | None                    # D
    tokens_counted: str                   # how D was found, or why it is unknown
    val_loss: float | None                # the pretrain manifest's val_loss (the last validation)
    scores: tuple[DownstreamScore, ...] = field(default_factory=tuple)
    run_dir: str = ""

    def parameters(self, non_embedding: bool) -> int | None:
        return self.non_embedding_parameters if non_embedding else self.num_parameters

    def flops(self, non_embedding: bool = False) -> float | None:
        """C = 6 N D with N counted with or without embeddings; None when N or D is unknown."""
        parameters = self.parameters(non_embedding)
        if parameters is None or self.tokens is None:
            return None
        return float(FLOPS_PER_PARAMETER_TOKEN) * parameters * self.tokens


def scaling_points(sources: list[RunSource]) -> list[ScalingPoint]:
    """A point for every run whose pretrain stage is finished, smallest model first (the
    tables then read along the axis); labels as the comparison report's (`run_labels`)."""
    points = []
    for label, source in zip(run_labels(sources), sources):
        pretrain = source.stage("pretrain")
        if pretrain is None or pretrain.state != "done" or pretrain.manifest is None:
            continue
        metrics = pretrain.metrics
        tokens, counted = tokens_trained(pretrain, source.config)
        points.append(ScalingPoint(
            label=label, num_parameters=_int(metrics.get("num_parameters")),
            non_embedding_parameters=non_embedding_parameters(_model_section(pretrain, source.config)),
            tokens=tokens, tokens_counted=counted,
            val_loss=float(metrics["val_loss"]) if _is_number(metrics.get("val_loss")) else None,
            scores=downstream_scores(source), run_dir=str(source.run_dir or "")))
    return sorted(points, key=lambda p: (p.num_parameters is None, p.num_parameters or 0, p.tokens or 0))


def tokens_trained(pretrain: StageRecord, config: dict[str, Any]) -> tuple[int | None, str]:
    """(D, how it was counted) or (None, why not)."""
    steps = _int(pretrain.metrics.get("steps"))
    if steps is None:
        return None, "unknown: the pretrain manifest has no steps"
    section = _pretrain_section(pretrain, config)
    batch = [_int(section.get(key)) for key in ("micro_batch_size", "gradient_accumulation_steps", "num_workers")]
    if any(value is None for value in batch):
        return None, ("unknown: the pretrain config lacks micro_batch_size, gradient_accumulation_steps "
                      "or num_workers")
    sequences = batch[0] * batch[1] * batch[2]
    per_sequence, source = _tokens_per_sequence(pretrain, config)
    if per_sequence is None:
        return None, f"unknown: {source}"
    return steps * sequences * per_sequence, f"{steps} steps x {sequences} sequences x {per_sequence} tokens ({source})"


def _tokens_per_sequence(pretrain: StageRecord, config: dict[str, Any]) -> tuple[int | None, str]:
    for record in reversed(read_records(pretrain.directory)):
        tokens, samples = record.get("tokens_per_s"), record.get("samples_per_s")
        if _is_number(tokens) and _is_number(samples) and samples > 0 and tokens / samples >= 1:
            return round(tokens / samples), "tokens_per_s / samples_per_s in metrics.jsonl"
    dataset = config.get("dataset") if isinstance(config.get("dataset"), dict) else {}
    seq_len = _int(dataset.get("seq_len"))
    if dataset.get("objective") in TOKEN_OBJECTIVES and seq_len is not None:
        return seq_len, "dataset.seq_len"
    return None, ("metrics.jsonl has no tokens_per_s and samples_per_s, and dataset.seq_len gives the "
                  "tokens per sequence only for objectives clm and mlm")


def non_embedding_parameters(model: dict[str, Any]) -> int | None:
    """Kaplan et al.'s N = 2 * d_model * n_layer * (2 * d_attn + d_ff) for GPT-2 models
    (d_attn = d_model); None for other families and variants, whose blocks differ
    (SwiGLU, shared layers, an encoder and a decoder), and when the config lacks a key."""
    if model.get("family") != "gpt" or model.get("variant") not in (None, "gpt2"):
        return None
    layers, hidden = _int(model.get("num_layers")), _int(model.get("hidden_size"))
    if layers is None or hidden is None:
        return None
    inner = _int(model.get("intermediate_size")) or 4 * hidden
    return 2 * hidden * layers * (2 * hidden + inner)


def downstream_scores(source: RunSource) -> tuple[DownstreamScore, ...]:
    """Fine-tuning scores (each task's official metrics and the GLUE average) and the
    evaluate stage's key zero/few-shot scores (`evaluation.KEY_METRICS`), of finished stages."""
    scores: list[DownstreamScore] = []
    finetune = source.stage("finetune")
    if finetune is not None and finetune.state == "done":
        found = finetune_scores(finetune.metrics)
        scores += [DownstreamScore(f"{key} (fine-tuned)", value, True, "scores") for key, value in found.items()]
        glue = glue_average(group_by_task(found))
        if glue is not None:
            scores.append(DownstreamScore("GLUE average", float(glue["score"]), True, "scores"))
    for task, entry in read_evaluation(source.stage("evaluate")).items():
        shots = f" ({entry['shots']}-shot)" if isinstance(entry.get("shots"), int) else ""
        for metric, score in entry["scores"].items():
            if metric in KEY_METRICS:
                higher = score["higher_is_better"]
                scores.append(DownstreamScore(f"{task}/{metric}{shots}", score["value"], higher,
                                              snapshot_axis(metric, higher)))
    return tuple(scores)


def _pretrain_section(pretrain: StageRecord, config: dict[str, Any]) -> dict[str, Any]:
    """The pretrain config the stage ran with (its manifest's), else the run's config file's."""
    section = (pretrain.manifest or {}).get("config")
    if isinstance(section, dict) and section:
        return section
    section = config.get("pretrain")
    return section if isinstance(section, dict) else {}


def _model_section(pretrain: StageRecord, config: dict[str, Any]) -> dict[str, Any]:
    section = _pretrain_section(pretrain, config)
    if section.get("init_from"):
        return {}  # the checkpoint's architecture was trained, not the config's
    model = section.get("model")
    return model if isinstance(model, dict) else {}


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value) if value == int(value) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
