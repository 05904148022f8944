"""SpanBERT masking drawn by the loader (dataset.mlm.mask_unit: span, masking: dynamic):
the masks of a real dataset's batches, their statistics, and their determinism.

The dataset is Pride and Prejudice in single segments of 512 tokens (SpanBERT's shape,
sentence_task none), about 400 rows and 5,000 spans, tokenized by the WordPiece of
test_spanbert_masking. As there, tolerances are four standard errors of the sample.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.ipc  # noqa: F401  (pa.ipc)
import pyarrow.parquet as pq
import pytest
import torch

from pipeline.context import StageContext
from stages.objectives.mlm.batch import MlmBatch
from stages.data.loader import ExampleLoader
from stages.data.masking import IGNORE_INDEX
from stages.data.span_masking import SpanMaskingPolicy, span_length_probabilities
from stages.dataset.config import DatasetConfig
from stages.dataset.run import run as run_dataset
from stages.objectives.registry import build_batch_builder
from tests.unit.test_spanbert_masking import (  # noqa: F401  (tokenizer: a fixture)
    MASK, SPECIAL, book_paragraphs, tokenizer,
)

SEQ_LEN = 512
SEED = 11


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, tokenizer):
    """The book as a dynamic span-masking dataset: (output folder, index, stored rows)."""
    root = tmp_path_factory.mktemp("spanbert-dynamic")
    ingest = root / "ingest"
    (ingest / "documents").mkdir(parents=True)
    paragraphs = book_paragraphs()
    documents = [{"id": f"d{i}", "text": " ".join(paragraphs[i:i + 20])}
                 for i in range(0, len(paragraphs), 20)]
    pq.write_table(pa.Table.from_pylist(documents), ingest / "documents" / "part-00000.parquet")
    tokenizer_dir = root / "tokenizer"
    tokenizer_dir.mkdir()
    tokenizer.save(str(tokenizer_dir / "tokenizer.json"))
    (tokenizer_dir / "special_tokens_map.json").write_text(json.dumps(
        {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]",
         "sep_token": "[SEP]", "mask_token": "[MASK]"}))
    config = DatasetConfig(objective="mlm", seq_len=SEQ_LEN, validation_fraction=0.05,
                           mlm={"mask_unit": "span", "sentence_task": "none"})
    output = root / "dataset"
    run_dataset(StageContext(name="dataset", config=config, output_dir=output,
                             inputs={"ingest": ingest, "tokenizer": tokenizer_dir},
                             experiment=SimpleNamespace(seed=0, data_dir="unused")))
    index = json.loads((output / "index.json").read_text())
    table = pa.concat_tables(pa.ipc.open_file(pa.memory_map(str(output / shard["path"]))).read_all()
                             for shard in index["splits"]["train"]["shards"])
    rows = np.array(table.column("input_ids").to_pylist(), dtype=np.int64)
    return output, index, rows


@pytest.fixture(scope="module")
def epoch0(dataset):
    """Every train row as the loader hands it out in epoch 0 (storage order), and the
    spans the policy draws for each row from the generator the loader documents:
    (seed, epoch, example index)."""
    output, index, rows = dataset
    loader = ExampleLoader(output, "train", 64, seed=SEED, shuffle=False, drop_last=False, batch_builder=build_batch_builder)
    batches = [next(loader) for _ in range(len(loader))]
    batch = {key: torch.cat([b[key] for b in batches]).numpy() for key in batches[0]}
    policy = MlmBatch(index, SEED).policy
    assert isinstance(policy, SpanMaskingPolicy)
    masked, labels, spans = policy.mask_rows_with_spans(
        rows, [np.random.default_rng([SEED, 0, example]) for example in range(len(rows))])
    return batch, (masked, labels, spans)


def test_the_dataset_stores_no_masks_and_the_words_the_loader_needs(dataset, tokenizer):
    output, index, rows = dataset
    assert index["mlm"]["masking"] == "dynamic" and index["mlm"]["mask_unit"] == "span"
    continuation = [i for t, i in tokenizer.get_vocab().items() if t.startswith("##")]
    assert sorted(index["mlm"]["continuation_ids"]) == sorted(continuation)
    assert len(rows) > 350 and (rows[:, 0] == SPECIAL.index("[CLS]")).all()


def test_batches_are_the_span_policy_drawn_per_example(dataset, epoch0):
    _, _, rows = dataset
    batch, (masked, labels, _) = epoch0
    assert (batch["input_ids"] == masked).all() and (batch["labels"] == labels).all()
    assert not (batch["input_ids"] == rows).all()


def test_span_lengths_in_words_average_3_8(epoch0):
    _, (_, _, spans) = epoch0
    drawn = np.array([span.drawn_words for row in spans for span in row])
    probabilities = span_length_probabilities(0.2, 10)
    lengths = np.arange(1, 11)
    mean = probabilities @ lengths
    std = np.sqrt(probabilities @ (lengths - mean) ** 2)
    assert abs(mean - 3.8) < 0.01 and len(drawn) > 4000
    assert abs(drawn.mean() - mean) < 4 * std / np.sqrt(len(drawn)), drawn.mean()
    taken = np.array([span.num_words for row in spans for span in row])
    assert 3.3 < taken.mean() <= drawn.mean()


def test_fifteen_percent_of_the_tokens_are_masked_in_whole_word_spans(dataset, epoch0, tokenizer):
    _, _, rows = dataset
    batch, (_, _, spans) = epoch0
    chosen = batch["labels"] != IGNORE_INDEX
    maskable = (batch["attention_mask"] == 1) & (rows >= len(SPECIAL))
    budgets = np.maximum(1, np.rint(0.15 * maskable.sum(axis=1)))
    # at least the budget; over it only by the last span's last word
    assert (chosen.sum(axis=1) >= budgets).all() and (chosen.sum(axis=1) < budgets + 10).all()
    assert not (chosen & ~maskable).any()
    # rounding each row's budget (half to even) can land a hair under 15% overall
    assert abs(chosen.sum() / maskable.sum() - 0.15) < 0.005
    continuation = np.zeros(tokenizer.get_vocab_size(), dtype=bool)
    continuation[[i for t, i in tokenizer.get_vocab().items() if t.startswith("##")]] = True
    for row, row_spans in enumerate(spans):
        for span in row_spans:
            assert chosen[row, span.start:span.stop].all()
            assert not continuation[rows[row, span.start]] or not maskable[row, span.start - 1]
            assert span.stop == SEQ_LEN or not continuation[rows[row, span.stop]]


def test_mask_random_keep_is_decided_per_span(dataset, epoch0):
    _, _, rows = dataset
    batch, (_, _, spans) = epoch0
    actions = []
    for row, row_spans in enumerate(spans):
        for span in row_spans:
            piece = batch["input_ids"][row, span.start:span.stop]
            original = rows[row, span.start:span.stop]
            expected = {"mask": (piece == MASK).all(), "keep": (piece == original).all(),
                        "random": (piece >= len(SPECIAL)).all()}
            assert expected[span.action], (row, span)
            actions.append(span.action)
    for action, share in (("mask", 0.8), ("random", 0.1), ("keep", 0.1)):
        tolerance = 4 * np.sqrt(share * (1 - share) / len(actions))
        assert abs(actions.count(action) / len(actions) - share) < tolerance, action


def test_same_seed_and_step_give_the_same_batch_and_resume_exactly(dataset):
    output, _, _ = dataset

    def loader(seed=SEED, shuffle=True):
        return ExampleLoader(output, "train", 8, seed=seed, shuffle=shuffle, batch_builder=build_batch_builder)

    first = loader()
    batches = [next(first) for _ in range(4)]
    again = loader()
    assert all(torch.equal(a[k], b[k]) for a, b in zip(batches, [next(again) for _ in range(4)])
               for k in a)
    interrupted = loader()
    for _ in range(2):
        next(interrupted)
    resumed = loader()
    resumed.load_state_dict(interrupted.state_dict())
    for expected in batches[2:]:
        assert all(torch.equal(got, expected[k]) for k, got in next(resumed).items())
    # The masks follow the seed and the epoch, the rows only the order
    in_order, other_seed = loader(shuffle=False), loader(seed=SEED + 1, shuffle=False)
    a, b = next(in_order), next(other_seed)
    assert torch.equal(a["token_type_ids"], b["token_type_ids"]) and not torch.equal(a["labels"], b["labels"])
    in_order.load_state_dict({"epoch": 1, "samples_consumed": 0, "seed": SEED})
    assert not torch.equal(next(in_order)["labels"], a["labels"])
