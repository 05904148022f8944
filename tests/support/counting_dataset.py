"""A tiny clm dataset in the dataset stage's format (index.json + Arrow IPC shards) that a
2-layer GPT learns in a few dozen steps: each row counts up from a random start by a
stride of 1, 2 or 3 (mod vocab), so the next token follows from the previous two. Used by
the training-infrastructure tests (resume on other worker counts, multi-node, faults)
and importable by a subprocess that has the repository on sys.path."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa

VOCAB_SIZE, SEQ_LEN = 128, 32
TINY_GPT = {"family": "gpt", "num_layers": 2, "hidden_size": 32, "num_heads": 4}


def write_counting_dataset(dataset_dir: Path, train_rows: int = 1024, validation_rows: int = 64) -> Path:
    rng = np.random.default_rng(0)
    splits = {}
    for split, rows in (("train", train_rows), ("validation", validation_rows)):
        starts = rng.integers(0, VOCAB_SIZE, size=(rows, 1))
        strides = rng.integers(1, 4, size=(rows, 1))
        tokens = ((starts + strides * np.arange(SEQ_LEN)) % VOCAB_SIZE).astype(np.uint16)
        column = pa.FixedSizeListArray.from_arrays(pa.array(tokens.reshape(-1), pa.uint16()), SEQ_LEN)
        path = f"{split}/shard-00000.arrow"
        (dataset_dir / split).mkdir(parents=True)
        with pa.OSFile(str(dataset_dir / path), "wb") as sink:
            with pa.ipc.new_file(sink, pa.schema([("input_ids", column.type)])) as writer:
                for begin in range(0, rows, 256):
                    writer.write_batch(pa.record_batch([column[begin:begin + 256]], names=["input_ids"]))
        shard = {"path": path, "rows": rows, "tokens": rows * SEQ_LEN}
        splits[split] = {"shards": [shard], "rows": rows, "tokens": rows * SEQ_LEN}
    index = {"objective": "clm", "seq_len": SEQ_LEN, "vocab_size": VOCAB_SIZE, "dtype": "uint16",
             "eos_id": 0, "pad_id": 1, "splits": splits}
    (dataset_dir / "index.json").write_text(json.dumps(index))
    return dataset_dir


def write_stage_inputs(root: Path) -> dict[str, Path]:
    """The pretrain stage's inputs: this dataset and a placeholder tokenizer.json."""
    tokenizer_dir = root / "tokenizer"
    tokenizer_dir.mkdir(parents=True)
    (tokenizer_dir / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE"}}')
    return {"dataset": write_counting_dataset(root / "dataset"), "tokenizer": tokenizer_dir}


def pretrain_context(output_dir: Path, inputs: dict[str, Path], **config):
    """A StageContext for stages.pretrain.run.run with a PretrainConfig of `config`."""
    from pipeline.context import StageContext
    from stages.pretrain.config import PretrainConfig

    return StageContext(name="pretrain", config=PretrainConfig(**config), experiment=SimpleNamespace(seed=0),
                        output_dir=output_dir, inputs=dict(inputs))


def logged_records(output_dir: Path) -> list[dict]:
    """Every training record of metrics.jsonl in order (a resumed run first drops the
    records past its checkpoint, so each step appears once)."""
    from pipeline.context import StageContext

    return [r for r in StageContext("pretrain", None, None, output_dir).metrics_log.read() if "loss" in r]
