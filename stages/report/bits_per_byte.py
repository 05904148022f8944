"""A GPT's validation loss in bits per byte, so that runs with other tokenizers compare.

A loss per token depends on the vocabulary: 8,192 tokens cover more text each than 2,048,
so each costs more nats. Per byte of text it does not: bits per byte = loss / ln 2 / (bytes
per token). The bytes per token are measured here, on the run's own ingested documents
with the run's own tokenizer (`SAMPLE_DOCUMENTS` from the first shards, special tokens
left out): an estimate of the validation split's ratio, hence "≈" wherever it is shown.

Only for `clm`: an MLM or span loss is over the masked tokens alone, not a model of the
text, and has no bits per byte.
"""

from __future__ import annotations

import math
from pathlib import Path

from stages.report.sources import RunSource

SAMPLE_DOCUMENTS = 200


def validation_bits_per_byte(source: RunSource) -> float | None:
    """≈ bits per byte of the pretrain stage's last validation loss; None where the run is
    not clm, has no validation loss, or its tokenizer or documents cannot be read."""
    pretrain, dataset = source.stage("pretrain"), source.stage("dataset")
    loss = pretrain.metrics.get("val_loss") if pretrain else None
    objective = (((dataset.manifest or {}).get("config") or {}).get("objective", "clm")) if dataset else None
    if not isinstance(loss, (int, float)) or objective != "clm":
        return None
    ratio = bytes_per_token(source)
    return None if not ratio else loss / math.log(2) / ratio


def bytes_per_token(source: RunSource) -> float | None:
    tokenizer_stage, ingest = source.stage("tokenizer"), source.stage("ingest")
    if tokenizer_stage is None or ingest is None or tokenizer_stage.directory is None or ingest.directory is None:
        return None
    tokenizer_file = Path(tokenizer_stage.directory) / "tokenizer.json"
    shards = sorted((Path(ingest.directory) / "documents").glob("*.parquet"))
    if not tokenizer_file.is_file() or not shards:
        return None
    texts = _first_texts(shards, SAMPLE_DOCUMENTS)
    if not texts:
        return None
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
    except Exception:  # noqa: BLE001  (a damaged file: no estimate rather than no report)
        return None
    tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False))
    return sum(len(t.encode("utf-8")) for t in texts) / tokens if tokens else None


def _first_texts(shards: list[Path], count: int) -> list[str]:
    import pyarrow.parquet as pq

    texts: list[str] = []
    for shard in shards:
        try:
            for batch in pq.ParquetFile(shard).iter_batches(count, columns=["text"]):
                texts += [t for t in batch.column("text").to_pylist() if t]
                if len(texts) >= count:
                    return texts[:count]
        except (OSError, ValueError, KeyError):
            continue
    return texts
