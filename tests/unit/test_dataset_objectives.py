"""mlm and span datasets end to end as plain function calls, on a synthetic corpus with
tokenizers made here (WordPiece with BERT's special tokens, Unigram with T5's)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from stages.data.loader import ExampleLoader
from stages.data.masking import IGNORE_INDEX
from stages.data.span_corruption import random_spans_helper, reconstruct
from stages.dataset.config import DatasetConfig
from stages.dataset.packing import split_sentences
from stages.objectives.registry import build_batch_builder
from tests.support.tiny_datasets import WORDS, build, ids_of, make_corpus, make_tokenizer, read_split


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("objectives")
    ingest = make_corpus(root)
    return {"root": root, "ingest": ingest, "wordpiece": make_tokenizer(root, "wordpiece", ingest),
            "unigram": make_tokenizer(root, "unigram", ingest)}


# ---- mlm -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def static_nsp(corpus) -> tuple[Path, dict]:
    out = corpus["root"] / "mlm-static"
    return out, build(corpus["ingest"], corpus["wordpiece"], out, objective="mlm", seq_len=64,
                      mlm={"masking": "static", "dupe_factor": 3})


def test_mlm_pairs_have_bert_layout_and_balanced_nsp(corpus, static_nsp):
    out, metrics = static_nsp
    tok = ids_of(corpus["wordpiece"])
    cls, sep, pad = (tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]"))
    rows = read_split(out)
    index = json.loads((out / "index.json").read_text())
    assert index["objective"] == "mlm" and index["dtype"] == "uint16"
    assert rows["input_ids"].dtype == np.uint16 and rows["token_type_ids"].dtype == np.uint8
    labels = rows["labels"]
    original = np.where(labels != pad, labels, rows["input_ids"])
    lengths = rows["num_tokens"]
    short = 0
    for ids, types, n in zip(original, rows["token_type_ids"], lengths, strict=True):
        assert ids[0] == cls and ids[n - 1] == sep and (ids[n:] == pad).all()
        seps = np.flatnonzero(ids[:n] == sep)
        assert len(seps) == 2  # [CLS] A [SEP] B [SEP]
        assert (types[:seps[0] + 1] == 0).all() and (types[seps[0] + 1:n] == 1).all()
        assert (types[n:] == 0).all()
        short += n < 40
    assert 0.03 < short / len(lengths) < 0.5  # short_seq_prob plus documents' own ends
    balance = rows["next_sentence_label"].mean()
    assert 0.45 < balance < 0.55, balance
    assert metrics["train_pair_label_1_fraction"] == pytest.approx(balance, abs=1e-4)
    assert 0 < metrics["train_padding_fraction"] < 0.5


def test_static_masking_is_15_percent_80_10_10_never_special(corpus, static_nsp):
    out, metrics = static_nsp
    tok = ids_of(corpus["wordpiece"])
    special = {tok.token_to_id(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")}
    mask_id, pad = tok.token_to_id("[MASK]"), tok.token_to_id("[PAD]")
    rows = read_split(out)
    chosen = rows["labels"] != pad
    original = np.where(chosen, rows["labels"], rows["input_ids"])
    maskable = ~np.isin(original, list(special))
    assert not (chosen & ~maskable).any()  # never a special token
    assert chosen.sum() / maskable.sum() == pytest.approx(0.15, abs=0.01)
    assert metrics["train_masked_fraction"] == pytest.approx(0.15, abs=0.01)
    got = rows["input_ids"][chosen]
    target = original[chosen]
    as_mask = (got == mask_id).mean()
    unchanged = (got == target).mean()
    assert as_mask == pytest.approx(0.8, abs=0.03)
    assert unchanged == pytest.approx(0.1, abs=0.03)
    assert 1 - as_mask - unchanged == pytest.approx(0.1, abs=0.03)  # random (rarely = itself)
    assert not np.isin(got[got != mask_id], list(special)).any()


def loader_masking_shares(dataset_dir: Path, tokenizer_dir: Path, epochs: int) -> dict[str, float]:
    """What the model is fed, read through the loader (stages.data.loader + batches):
    the share of maskable tokens chosen for prediction, and of the chosen ones the shares
    sent to [MASK], to a random token and left unchanged, over `epochs` epochs."""
    tok = ids_of(tokenizer_dir)
    special = [tok.token_to_id(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")]
    mask_id = tok.token_to_id("[MASK]")
    loader = ExampleLoader(dataset_dir, "train", 16, seed=5, drop_last=False, batch_builder=build_batch_builder)
    inputs, labels = [], []
    for _ in range(epochs * len(loader)):
        batch = next(loader)
        inputs.append(batch["input_ids"].flatten().numpy())
        labels.append(batch["labels"].flatten().numpy())
    inputs, labels = np.concatenate(inputs), np.concatenate(labels)
    chosen = labels != IGNORE_INDEX
    original = np.where(chosen, labels, inputs)
    maskable = ~np.isin(original, special)
    assert not (chosen & ~maskable).any()  # never a special token
    got, target = inputs[chosen], labels[chosen]
    assert not np.isin(got[got != mask_id], special).any()  # random tokens are never special
    return {"chosen": chosen.sum() / maskable.sum(), "num_chosen": int(chosen.sum()),
            "mask": (got == mask_id).mean(), "unchanged": (got == target).mean(),
            "random": ((got != mask_id) & (got != target)).mean()}


@pytest.fixture(scope="module")
def dynamic_nsp(corpus) -> Path:
    out = corpus["root"] / "mlm-dynamic"
    build(corpus["ingest"], corpus["wordpiece"], out, objective="mlm", seq_len=64)  # the defaults
    return out


@pytest.mark.parametrize("masking", ["dynamic", "static"])
def test_the_loader_feeds_15_percent_chosen_80_10_10(corpus, static_nsp, dynamic_nsp, masking):
    # Dynamic masks (the default) are drawn by the batch builder, static ones read from
    # the shards; either way this is what training sees. Over >10,000 chosen tokens the
    # shares' standard errors are under 0.004: 0.02 is a five-sigma bound (fixed seeds).
    dataset_dir, epochs = (dynamic_nsp, 4) if masking == "dynamic" else (static_nsp[0], 1)
    shares = loader_masking_shares(dataset_dir, corpus["wordpiece"], epochs)
    assert shares["num_chosen"] > 10_000
    assert shares["chosen"] == pytest.approx(0.15, abs=0.01)
    assert shares["mask"] == pytest.approx(0.8, abs=0.02)
    assert shares["unchanged"] == pytest.approx(0.1, abs=0.02)  # a random token may equal its original
    assert shares["random"] == pytest.approx(0.1, abs=0.02)


def document_streams(ingest: Path, tokenizer_dir: Path) -> list[str]:
    """Each document's sentences' token ids back to back, as ',id,id,...,' text, so that
    `',a,b,' in stream` asks whether a, b is a run of that document's tokens."""
    documents = [split_sentences(text)
                 for shard in sorted((ingest / "documents").glob("*.parquet"))
                 for text in pq.read_table(shard, columns=["text"]).column("text").to_pylist()]
    return sentence_streams(documents, tokenizer_dir)


def sentence_streams(documents: list[list[str]], tokenizer_dir: Path) -> list[str]:
    tok = ids_of(tokenizer_dir)
    return ["," + ",".join(str(i) for sentence in sentences
                           for i in tok.encode(sentence, add_special_tokens=False).ids) + ","
            for sentences in documents]


def pair_segments(rows: dict[str, np.ndarray], sep: int) -> list[tuple[str, str]]:
    """Each stored example's A and B (no masks stored: dynamic) as ',id,id,' text."""
    segments = []
    for ids, n in zip(rows["input_ids"], rows["num_tokens"], strict=True):
        first_sep = int(np.flatnonzero(ids == sep)[0])
        segments.append(tuple("," + ",".join(map(str, side.tolist())) + ","
                              for side in (ids[1:first_sep], ids[first_sep + 1:n - 1])))
    return segments


def test_mlm_segments_are_runs_of_one_documents_tokens(corpus, static_nsp):
    out, _ = static_nsp
    tok = ids_of(corpus["wordpiece"])
    sep, pad = tok.token_to_id("[SEP]"), tok.token_to_id("[PAD]")
    streams = document_streams(corpus["ingest"], corpus["wordpiece"])
    rows = read_split(out)
    original = np.where(rows["labels"] != pad, rows["labels"], rows["input_ids"])
    for ids, n, label in list(zip(original, rows["num_tokens"], rows["next_sentence_label"],
                                  strict=True))[:300]:
        first_sep = int(np.flatnonzero(ids == sep)[0])
        a, b = ids[1:first_sep], ids[first_sep + 1:n - 1]
        a_text, b_text = ("," + ",".join(map(str, s.tolist())) + "," for s in (a, b))
        homes_a = {i for i, stream in enumerate(streams) if a_text in stream}
        homes_b = {i for i, stream in enumerate(streams) if b_text in stream}
        assert homes_a and homes_b  # each side is a run of some document's tokens
        if label == 0:  # B continues A: some document holds both, A first
            assert any(streams[i].find(a_text) < streams[i].rfind(b_text)
                       for i in homes_a & homes_b)


def test_sop_swaps_half_and_none_has_one_segment(corpus, tmp_path):
    tok = ids_of(corpus["wordpiece"])
    sep = tok.token_to_id("[SEP]")
    metrics = build(corpus["ingest"], corpus["wordpiece"], tmp_path / "sop", objective="mlm",
                    seq_len=64, mlm={"sentence_task": "sop"})
    rows = read_split(tmp_path / "sop")
    assert 0.42 < rows["next_sentence_label"].mean() < 0.58
    assert "train_masked_fraction" not in metrics  # dynamic: masks are drawn by the loader
    build(corpus["ingest"], corpus["wordpiece"], tmp_path / "none", objective="mlm",
          seq_len=64, mlm={"sentence_task": "none"})
    rows = read_split(tmp_path / "none")
    assert "next_sentence_label" not in rows and "labels" not in rows
    assert ((rows["input_ids"] == sep).sum(axis=1) == 1).all()
    assert (rows["token_type_ids"] == 0).all()


def test_dynamic_masking_is_fresh_per_epoch_and_a_function_of_the_example(corpus, tmp_path):
    out = tmp_path / "dynamic"
    build(corpus["ingest"], corpus["wordpiece"], out, objective="mlm", seq_len=64,
          mlm={"whole_word_masking": True})
    tok = ids_of(corpus["wordpiece"])
    loader = ExampleLoader(out, "train", 8, seed=3, shuffle=False, batch_builder=build_batch_builder)
    epoch0 = next(loader)
    assert set(epoch0) == {"input_ids", "token_type_ids", "attention_mask", "labels",
                           "next_sentence_label"}
    assert (epoch0["attention_mask"].sum(1) > 0).all()
    chosen = epoch0["labels"] != IGNORE_INDEX
    assert 0.1 < chosen.sum() / (epoch0["attention_mask"].sum() - 3 * 8) < 0.2
    # whole words: a chosen continuation piece ('##...') has the piece before it chosen,
    # unless that is [CLS]/[SEP] (a segment trimmed at its front may start mid-word)
    vocab = {i: t for t, i in tok.get_vocab().items()}
    boundaries = {tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")}
    for ids, row_labels, row_chosen in zip(epoch0["input_ids"], epoch0["labels"], chosen,
                                           strict=True):
        for position in torch.nonzero(row_chosen).flatten().tolist():
            if vocab[int(row_labels[position])].startswith("##"):
                assert row_chosen[position - 1] or int(ids[position - 1]) in boundaries
    loader.load_state_dict({"epoch": 1, "samples_consumed": 0, "seed": 3})
    epoch1 = next(loader)
    assert not torch.equal(epoch1["labels"], epoch0["labels"])
    again = ExampleLoader(out, "train", 8, seed=3, shuffle=False, batch_builder=build_batch_builder)
    first = next(again)
    assert all(torch.equal(first[k], epoch0[k]) for k in epoch0)


# ---- span ------------------------------------------------------------------------------

def test_t5_length_arithmetic():
    assert random_spans_helper(512) == (568, 114)
    assert DatasetConfig(objective="span", seq_len=512).span.noise_density == 0.15


def test_span_corruption_round_trip(corpus, tmp_path):
    out = tmp_path / "span"
    metrics = build(corpus["ingest"], corpus["unigram"], out, objective="span", seq_len=64)
    tok = ids_of(corpus["unigram"])
    eos = tok.token_to_id("</s>")
    sentinels = np.array([tok.token_to_id(f"<extra_id_{i}>") for i in range(100)])
    raw_length, targets_length = random_spans_helper(64)
    index = json.loads((out / "index.json").read_text())
    assert index["span"]["targets_length"] == targets_length
    rows = read_split(out)
    assert rows["input_ids"].shape[1] == 64 and rows["labels"].shape[1] == targets_length
    # the documents of shard 0's train split, joined by </s>, are the chunks in order
    stream = []
    for row in pq.read_table(corpus["ingest"] / "documents/part-00000.parquet").to_pylist():
        from stages.dataset.packing import is_validation
        if not is_validation(row["id"], 0, 0.1):
            stream += tok.encode(row["text"], add_special_tokens=False).ids + [eos]
    shard0 = index["splits"]["train"]["shards"][0]["rows"]
    for i in range(shard0):
        inputs, targets = rows["input_ids"][i], rows["labels"][i]
        assert inputs[-1] == eos and targets[-1] == eos
        used = sentinels[np.isin(sentinels, inputs)]
        assert (used == sentinels[:len(used)]).all()  # numbered in order from <extra_id_0>
        original = reconstruct(inputs.astype(np.int64), targets.astype(np.int64), sentinels, eos)
        assert original.tolist() == stream[i * raw_length:(i + 1) * raw_length]
    assert metrics["train_mean_span_length"] == pytest.approx(3, abs=0.5)
    loader = ExampleLoader(out, "train", 4, seed=0, batch_builder=build_batch_builder)
    batch = next(loader)
    assert (batch["decoder_input_ids"][:, 1:] == batch["labels"][:, :-1]).all()
    assert (batch["decoder_input_ids"][:, 0] == tok.token_to_id("<pad>")).all()


# ---- determinism, resume, fsspec -------------------------------------------------------

def test_same_inputs_give_the_same_bytes_and_interrupted_builds_resume(corpus, static_nsp,
                                                                       tmp_path):
    out, _ = static_nsp
    again = tmp_path / "again"
    build(corpus["ingest"], corpus["wordpiece"], again, objective="mlm", seq_len=64,
          mlm={"masking": "static", "dupe_factor": 3})
    files = sorted(p.relative_to(out) for p in out.rglob("*.arrow")) + [Path("index.json")]
    assert all((again / f).read_bytes() == (out / f).read_bytes() for f in files)
    (again / "index.json").unlink()
    (again / "train/shard-00001.arrow").unlink()
    metrics = build(corpus["ingest"], corpus["wordpiece"], again, objective="mlm", seq_len=64,
                    mlm={"masking": "static", "dupe_factor": 3})
    assert metrics["resumed_shards"] == 1
    assert all((again / f).read_bytes() == (out / f).read_bytes() for f in files)


def batches_as_rows(batches: list[dict]) -> list[tuple]:
    return [tuple(b[k][i].tolist().__repr__() for k in sorted(b))
            for b in batches for i in range(len(b["input_ids"]))]


RESUMED_BUILDS = {  # name -> (tokenizer, dataset options)
    "mlm-dynamic": ("wordpiece", {"objective": "mlm", "seq_len": 64}),
    "mlm-static": ("wordpiece", {"objective": "mlm", "seq_len": 64,
                                 "mlm": {"masking": "static", "sentence_task": "sop"}}),
    "span": ("unigram", {"objective": "span", "seq_len": 32}),
}


@pytest.mark.parametrize("name", sorted(RESUMED_BUILDS))
@pytest.mark.parametrize("new_world_size", [1, 4])
def test_loaders_resume_exactly_on_another_world_size(corpus, tmp_path, name, new_world_size):
    out = tmp_path / "resume"
    kind, options = RESUMED_BUILDS[name]
    build(corpus["ingest"], corpus[kind], out, **options)
    batch_size = 4

    def loaders(world_size):
        return [ExampleLoader(out, "train", batch_size, r, world_size, seed=5, batch_builder=build_batch_builder)
                for r in range(world_size)]

    whole = ExampleLoader(out, "train", 1, seed=5, batch_builder=build_batch_builder)
    reference = batches_as_rows([next(whole) for _ in range(len(whole))])
    before = loaders(2)
    seen = batches_as_rows([next(l) for _ in range(3) for l in before])
    after = loaders(new_world_size)
    for loader in after:
        loader.load_state_dict(before[0].state_dict())
    while after[0].samples_consumed + new_world_size * batch_size <= after[0].num_rows:
        seen += batches_as_rows([next(l) for l in after])
    assert seen == reference[:len(seen)] and len(reference) - len(seen) < 4 * new_world_size


def test_loader_reads_a_remote_dataset_through_a_local_cache(static_nsp, tmp_path):
    out, _ = static_nsp
    url = f"file://{out}"
    remote = ExampleLoader(url, "train", 8, seed=1, cache_dir=tmp_path / "cache", batch_builder=build_batch_builder)
    local = ExampleLoader(out, "train", 8, seed=1, batch_builder=build_batch_builder)
    for _ in range(3):
        a, b = next(remote), next(local)
        assert all(torch.equal(a[k], b[k]) for k in b)
    cached = list((tmp_path / "cache").rglob("*.arrow"))
    assert cached and not list((tmp_path / "cache").rglob("validation/*.arrow"))
    mtimes = [p.stat().st_mtime_ns for p in cached]
    ExampleLoader(url, "train", 8, seed=1, cache_dir=tmp_path / "cache", batch_builder=build_batch_builder)  # reuses the copy
    assert [p.stat().st_mtime_ns for p in cached] == mtimes

    import fsspec
    memory = fsspec.filesystem("memory")
    for path in [out / "index.json"] + sorted(out.rglob("*.arrow")):
        memory.pipe(f"/ds/{path.relative_to(out)}", path.read_bytes())
    from_memory = ExampleLoader("memory://ds", "validation", 2, seed=1,
                                cache_dir=tmp_path / "cache2", batch_builder=build_batch_builder)
    assert from_memory.num_rows == ExampleLoader(out, "validation", 2, batch_builder=build_batch_builder).num_rows


def test_sentences_column_is_used_when_present(tmp_path, corpus):
    # The column and the text tell different stories (disjoint words): every stored
    # segment must be a run of the column's tokens (read from the text, hardly any is).
    rng = np.random.default_rng(1)
    column_words, text_words = WORDS[:12], WORDS[12:]
    rows = []
    for d in range(60):
        sentences, other = ([" ".join(rng.choice(words, rng.integers(4, 10))).capitalize() + "."
                             for _ in range(rng.integers(2, 8))] for words in (column_words, text_words))
        rows.append({"id": f"s0:{d}", "text": " ".join(other), "sentences": sentences})
    ingest = tmp_path / "ingest"
    (ingest / "documents").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), ingest / "documents" / "part-00000.parquet")
    metrics = build(ingest, corpus["wordpiece"], tmp_path / "out", objective="mlm", seq_len=32)
    assert metrics["train_rows"] > 20
    sep = ids_of(corpus["wordpiece"]).token_to_id("[SEP]")
    from_column = sentence_streams([row["sentences"] for row in rows], corpus["wordpiece"])
    for a, b in pair_segments(read_split(tmp_path / "out"), sep):
        assert any(a in stream for stream in from_column) and any(b in stream for stream in from_column)


def test_objective_needs_its_special_tokens(corpus, tmp_path):
    with pytest.raises(ValueError, match="tokenizer.kind: wordpiece"):
        build(corpus["ingest"], corpus["unigram"], tmp_path / "x", objective="mlm", seq_len=32)
    shutil.rmtree(tmp_path / "x", ignore_errors=True)
    with pytest.raises(ValueError, match="dupe_factor"):
        DatasetConfig(objective="mlm", mlm={"dupe_factor": 2})
