"""Tiny real datasets for tests: a synthetic corpus written as ingest's parquet shards,
tokenizers trained on it here (WordPiece with BERT's special tokens, Unigram with T5's),
the dataset stage run on them as a plain function call, and its Arrow splits read back."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from pipeline.context import StageContext
from stages.dataset.config import DatasetConfig
from stages.dataset.run import run as run_dataset

WORDS = ("time light river stone garden window morning silver quiet number letter "
         "mountain forest winter summer village castle bridge ocean thunder whisper "
         "remarkable extraordinary understanding nevertheless").split()


def make_corpus(root: Path, num_shards: int = 2, docs_per_shard: int = 120,
                with_sentences: bool = False) -> Path:
    rng = np.random.default_rng(0)
    ingest = root / "ingest"
    (ingest / "documents").mkdir(parents=True)
    for shard in range(num_shards):
        rows = []
        for d in range(docs_per_shard):
            sentences = [" ".join(rng.choice(WORDS, rng.integers(4, 14))).capitalize() + "."
                         for _ in range(rng.integers(1, 12))]
            rows.append({"id": f"s{shard}:{d}", "text": " ".join(sentences),
                         **({"sentences": sentences} if with_sentences else {})})
        pq.write_table(pa.Table.from_pylist(rows),
                       ingest / "documents" / f"part-{shard:05d}.parquet")
    return ingest


def make_tokenizer(root: Path, kind: str, ingest: Path) -> Path:
    texts = [t for p in sorted((ingest / "documents").glob("*.parquet"))
             for t in pq.read_table(p, columns=["text"]).column("text").to_pylist()]
    if kind == "wordpiece":
        special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(vocab_size=120, special_tokens=special)
        roles = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]",
                 "sep_token": "[SEP]", "mask_token": "[MASK]"}
    else:
        special = ["<pad>", "</s>", "<unk>"] + [f"<extra_id_{i}>" for i in range(100)]
        tokenizer = Tokenizer(models.Unigram())
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=200, special_tokens=special,
                                          unk_token="<unk>")
        roles = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
    tokenizer.train_from_iterator(texts, trainer=trainer)
    out = root / f"tokenizer-{kind}"
    out.mkdir()
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "special_tokens_map.json").write_text(json.dumps(roles))
    return out


def build(ingest: Path, tokenizer: Path, output_dir: Path, seed: int = 0, **options) -> dict:
    config = DatasetConfig(**{"validation_fraction": 0.1, **options})
    ctx = StageContext(name="dataset", config=config, output_dir=output_dir,
                       inputs={"ingest": ingest, "tokenizer": tokenizer},
                       experiment=SimpleNamespace(seed=seed, data_dir="unused"))
    return run_dataset(ctx)



def read_split(output_dir: Path, split: str = "train") -> dict[str, np.ndarray]:
    index = json.loads((output_dir / "index.json").read_text())
    tables = [pa.ipc.open_file(pa.memory_map(str(output_dir / s["path"]))).read_all()
              for s in index["splits"][split]["shards"]]
    table = pa.concat_tables(tables)
    out = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        out[name] = (np.asarray(column.flatten()).reshape(len(column), -1)
                     if isinstance(column.type, pa.FixedSizeListType) else np.asarray(column))
    return out


def ids_of(tokenizer_dir: Path) -> Tokenizer:
    return Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))


def make_fixed_tokenizer(root: Path, kind: str) -> Path:
    """A tokenizer with a vocabulary written out, not trained: the tokenizers library's
    trainers break ties in hash-map order, so two trainings on the same corpus can give
    different vocabularies, and a pinned number downstream would drift from run to run."""
    letters = sorted(set("".join(WORDS)))
    if kind == "wordpiece":
        special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        vocab = special + sorted(set(WORDS)) + ["."] + letters + [f"##{c}" for c in letters]
        tokenizer = Tokenizer(models.WordPiece({piece: i for i, piece in enumerate(vocab)}, unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        roles = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]",
                 "sep_token": "[SEP]", "mask_token": "[MASK]"}
    else:
        special = ["<pad>", "</s>", "<unk>"] + [f"<extra_id_{i}>" for i in range(100)]
        words = sorted({f"\u2581{w}" for w in WORDS} | {f"\u2581{w.capitalize()}" for w in WORDS})
        pieces = [(piece, 0.0) for piece in special] + [(w, -5.0) for w in words] + \
            [(".", -6.0), ("\u2581", -7.0)] + [(c, -10.0) for c in letters + [c.upper() for c in letters]]
        tokenizer = Tokenizer(models.Unigram(pieces, unk_id=2))
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        roles = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
    tokenizer.add_special_tokens(special)
    out = root / f"tokenizer-fixed-{kind}"
    out.mkdir()
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "special_tokens_map.json").write_text(json.dumps(roles))
    return out
