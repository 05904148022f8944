"""A damaged dataset fails when the loader is built, with an error naming the file and the
way to rebuild it: a truncated shard, a shard whose bytes were flipped (token ids
outside the vocabulary), a garbled index.json. A vocabulary above uint16 loads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from stages.data.loader import ExampleLoader, PackedSequenceLoader
from stages.data.packed import DamagedShardError, count_rows, shard_path, token_dtype, write_index
from stages.data.row_writer import RowWriter
from stages.objectives.registry import build_batch_builder

SEQ_LEN = 8
TOKEN = 7  # every token of the clean dataset: easy to find in the file's bytes


def build(root: Path, vocab_size: int = 2048, shards: int = 2, rows: int = 300,
          token: int = TOKEN) -> Path:
    dtype = token_dtype(vocab_size)
    splits = {}
    for split in ("train", "validation"):
        (root / split).mkdir(parents=True)
        entries = []
        for i in range(shards):
            writer = RowWriter(str(root / shard_path(split, i)), SEQ_LEN, dtype)
            writer.add(np.full(rows * SEQ_LEN, token, dtype=np.int64))
            assert writer.commit() == rows
            entries.append({"path": shard_path(split, i), "rows": rows, "tokens": rows * SEQ_LEN})
        splits[split] = {"shards": entries, "rows": rows * shards, "tokens": rows * shards * SEQ_LEN}
    write_index(root, {"objective": "clm", "seq_len": SEQ_LEN, "vocab_size": vocab_size,
                       "dtype": dtype, "eos_id": 0, "pad_id": 1, "splits": splits})
    return root


def flip_token_bytes(path: Path, count: int = 64) -> None:
    """Overwrite `count` bytes of token data (not of the Arrow headers) with 0xff."""
    data = bytearray(path.read_bytes())
    start = data.find(np.full(count, TOKEN, dtype=np.uint16).tobytes())
    assert start > 0, "the token data was not found"
    data[start:start + count] = b"\xff" * count
    path.write_bytes(bytes(data))


def test_a_truncated_shard_names_the_file_and_how_to_rebuild(tmp_path):
    root = build(tmp_path / "dataset")
    shard = root / shard_path("train", 1)
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    with pytest.raises(DamagedShardError, match=rf"{shard}: not a readable dataset shard "
                       rf"\(ArrowInvalid: .*pretrain run CONFIG --force dataset.*pretrain verify"):
        PackedSequenceLoader(root, "train", batch_size=4)
    with pytest.raises(DamagedShardError, match=str(shard)):
        count_rows(shard)  # what the dataset stage reads when it keeps a finished shard


def test_a_missing_shard_names_the_file(tmp_path):
    root = build(tmp_path / "dataset")
    (root / shard_path("validation", 0)).unlink()
    with pytest.raises(DamagedShardError, match=rf"validation/shard-00000\.arrow: .*--force dataset"):
        ExampleLoader(root, "validation", batch_size=4, shuffle=False, batch_builder=build_batch_builder)


def test_flipped_bytes_give_ids_outside_the_vocabulary_and_are_refused(tmp_path):
    root = build(tmp_path / "dataset", vocab_size=2048)
    shard = root / shard_path("train", 0)
    flip_token_bytes(shard)
    with pytest.raises(DamagedShardError, match=rf"{shard}: row \d+ of column 'input_ids' holds "
                       rf"token id 65535 .*vocabulary of 2048 ids .*--force dataset"):
        PackedSequenceLoader(root, "train", batch_size=4)


def test_each_shard_is_checked_by_one_rank(tmp_path):
    root = build(tmp_path / "dataset")
    flip_token_bytes(root / shard_path("train", 1))
    PackedSequenceLoader(root, "train", batch_size=4, rank=0, world_size=2)  # checks shard 0
    with pytest.raises(DamagedShardError, match="shard-00001"):
        PackedSequenceLoader(root, "train", batch_size=4, rank=1, world_size=2)


def test_a_vocabulary_above_uint16_is_stored_as_int32_and_loads(tmp_path):
    root = build(tmp_path / "dataset", vocab_size=70_000, token=69_999)
    batch = next(PackedSequenceLoader(root, "train", batch_size=4))
    assert batch.dtype == torch.long and int(batch.max()) == 69_999
    past_the_end = build(tmp_path / "past", vocab_size=70_000, token=70_000)  # one past the end
    with pytest.raises(DamagedShardError, match="token id 70000 .*vocabulary of 70000 ids"):
        PackedSequenceLoader(past_the_end, "train", batch_size=4)


def test_a_garbled_index_names_the_file(tmp_path):
    root = build(tmp_path / "dataset")
    (root / "index.json").write_text('{"objective": "clm", "seq_le')
    with pytest.raises(DamagedShardError, match=rf"{root / 'index.json'}: not valid JSON .*--force dataset"):
        PackedSequenceLoader(root, "train", batch_size=4)
