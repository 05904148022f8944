"""Statistics of a built split, read back from its finished shards (memory-mapped, one
record batch at a time), so that shards kept from an interrupted build count too."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from stages.data.packed import column_arrays


@dataclass(frozen=True)
class StatsJob:
    """One split's statistics, read back from its shards wherever they are (a task in an
    object-store run: the driver holds no shard)."""
    output_dir: Path
    shard_files: tuple[Path, ...]  # absolute: what a task on another node fetches
    objective: str
    seq_len: int
    pad_id: int | None
    sentinels: tuple[int, ...]


def split_stats_of(job: StatsJob) -> dict:
    shards = [{"path": path.relative_to(job.output_dir).as_posix()} for path in job.shard_files]
    return split_stats(job.output_dir, shards, job.objective, job.seq_len, job.pad_id, job.sentinels)


def split_stats(output_dir: Path, shards: list[dict], objective: str, seq_len: int,
                pad_id: int | None, sentinels: tuple[int, ...]) -> dict:
    """mlm: padding, masked fraction (static) and pair-label balance; span: spans and
    noise per example; clm: nothing beyond the index (no padding, no masking)."""
    if objective == "clm":
        return {"padding_fraction": 0.0}
    totals = {"examples": 0, "real_tokens": 0, "masked": 0, "maskable": 0, "label_1": 0,
              "labelled": 0, "spans": 0, "noise_tokens": 0}
    sentinel_set = np.array(sentinels, dtype=np.int64)
    for shard in shards:
        with pa.memory_map(str(output_dir / shard["path"])) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                columns = column_arrays(reader.get_batch(i))
                totals["examples"] += len(columns["input_ids"])
                if objective == "mlm":
                    _mlm_totals(columns, pad_id, totals)
                else:
                    _span_totals(columns, sentinel_set, totals)
    examples = max(totals["examples"], 1)
    if objective == "span":
        return {"padding_fraction": 0.0,
                "spans_per_example": round(totals["spans"] / examples, 3),
                "noise_tokens_per_example": round(totals["noise_tokens"] / examples, 3),
                "mean_span_length": round(totals["noise_tokens"] / max(totals["spans"], 1), 3)}
    out = {"padding_fraction": round(1 - totals["real_tokens"] / (examples * seq_len), 4)}
    if totals["maskable"]:
        out["masked_fraction"] = round(totals["masked"] / totals["maskable"], 4)
    if totals["labelled"]:
        out["pair_label_1_fraction"] = round(totals["label_1"] / totals["labelled"], 4)
    return out


def _mlm_totals(columns: dict[str, np.ndarray], pad_id: int, totals: dict) -> None:
    num_tokens = columns["num_tokens"]
    totals["real_tokens"] += int(num_tokens.sum())
    if "labels" in columns:
        totals["masked"] += int((columns["labels"] != pad_id).sum())
        # [CLS] and every [SEP] are never maskable: 3 per pair, 2 for one segment
        specials = 3 if "next_sentence_label" in columns else 2
        totals["maskable"] += int(num_tokens.sum()) - specials * len(num_tokens)
    if "next_sentence_label" in columns:
        totals["label_1"] += int(columns["next_sentence_label"].sum())
        totals["labelled"] += len(num_tokens)


def _span_totals(columns: dict[str, np.ndarray], sentinels: np.ndarray, totals: dict) -> None:
    labels = columns["labels"].astype(np.int64)
    is_sentinel = np.isin(labels, sentinels)
    spans = int(is_sentinel.sum())
    totals["spans"] += spans
    totals["noise_tokens"] += labels.size - spans - len(labels)  # minus sentinels and </s>
