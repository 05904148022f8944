"""A comparison colours a delta only where the two numbers measure the same thing (same
shots, same number of examples, per-token losses only under one tokenizer), says why
where they do not, and calls a delta significant only when the 95% intervals say so."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.synthetic_run import write_run
from views.comparison import build_comparison, intervals_differ
from views.comparison_render import comparison_html, comparison_markdown
from views.run_source import load_run_source


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def stage_file(workdir: Path, stage: str, name: str) -> Path:
    (path,) = (workdir / stage).glob(f"*/{name}")
    return path


def same_tokenizer(*workdirs: Path, vocab: dict[Path, int] | None = None) -> None:
    """The synthetic runs' tokenizer manifests name tokenizer.json's checksum, as the engine's do."""
    for workdir in workdirs:
        def change(manifest, workdir=workdir):
            manifest["files"] = [{"path": "tokenizer.json", "sha256": f"sha-{(vocab or {}).get(workdir, 'same')}"}]
            manifest["metrics"]["vocab_size"] = (vocab or {}).get(workdir, 2048)
        edit_json(stage_file(workdir, "tokenizer", "manifest.json"), change)


def row(comparison: dict, group: str, metric: str) -> dict:
    return next(r for r in comparison["metrics"] if r["group"] == group and r["metric"] == metric)


def test_other_shots_or_example_counts_are_not_coloured_and_say_why(tmp_path):
    a, b = write_run(tmp_path / "a", name="a"), write_run(tmp_path / "b", name="b")
    same_tokenizer(a, b)

    def copa_two_shot_on_twelve(results):
        results["copa"].update(shots=0, num_examples=12)
        results["copa"]["scores"]["acc"].update(value=0.84, ci95=[0.7, 0.95])
        results["piqa"]["scores"]["acc"].update(value=0.7, ci95=[0.65, 0.75])  # clear of a's [0.47, 0.60]
    edit_json(stage_file(b, "evaluate", "results.json"), copa_two_shot_on_twelve)
    sources = [load_run_source(a), load_run_source(b)]
    comparison = build_comparison(sources)

    copa = row(comparison, "evaluate: copa", "acc")
    assert copa["caveats"][1] == "shots differ (2 vs 0); example counts differ (100 vs 12)"
    piqa = row(comparison, "evaluate: piqa", "acc")
    assert piqa["caveats"] == [None, None] and piqa["significant"] == [None, True]
    html = comparison_html(comparison, sources)
    copa_html = html[html.index("<td>evaluate: copa</td>"):]
    copa_html = copa_html[:copa_html.index("</tr>")]
    assert 'class="better"' not in copa_html and "not comparable: shots differ (2 vs 0)" in copa_html
    piqa_html = html[html.index("<td>evaluate: piqa</td><td>acc</td>"):]
    piqa_html = piqa_html[:piqa_html.index("</tr>")]
    assert '<span class="better">(+0.165)</span> <span class="significant"' in piqa_html
    md = comparison_markdown(comparison)
    assert "| evaluate: copa | acc | 0.58 (≈ chance, baseline 0.5) | 0.84 (+0.26, not comparable: shots differ" in md
    assert "| evaluate: piqa | acc | 0.535 (≈ chance, baseline 0.5) | 0.7 (+0.165 ✱) |" in md
    # pretraining losses under one tokenizer compare as before
    assert row(comparison, "pretrain", "val_loss")["caveats"] == [None, None]


def test_losses_per_token_do_not_compare_across_tokenizers_bits_per_byte_do(tmp_path):
    a, b = write_run(tmp_path / "a", name="a"), write_run(tmp_path / "b", name="b")
    same_tokenizer(a, b, vocab={a: 8192, b: 2048})
    edit_json(stage_file(b, "evaluate", "results.json"),
              lambda results: results["wikitext2"]["scores"]["bits_per_byte"].update(value=1.8, ci95=[1.75, 1.85]))
    comparison = build_comparison([load_run_source(a), load_run_source(b)])

    val_loss = row(comparison, "pretrain", "val_loss")
    assert val_loss["caveats"][1].startswith("other tokenizer (vocabularies of 8,192 and 2,048 tokens)")
    assert row(comparison, "evaluate: wikitext2", "token_perplexity")["caveats"][1] is not None
    bits = row(comparison, "evaluate: wikitext2", "bits_per_byte")
    assert bits["caveats"] == [None, None] and bits["significant"][1] is True
    md = comparison_markdown(comparison)
    assert "| pretrain | val_loss | 6.83 | 6.83 (+0, not comparable: other tokenizer" in md
    assert "| evaluate: wikitext2 | bits_per_byte | 2.105 | 1.8 (-0.305 ✱) |" in md


def test_significance_from_the_intervals():
    assert intervals_differ([0.4, 0.5], [0.51, 0.6]) is True
    assert intervals_differ([0.4, 0.5], [0.5, 0.6]) is False  # touching: not shown to differ
    assert intervals_differ([0.4, 0.5], None) is None


def real_tokenizer_and_documents(workdir: Path, vocab_size: int) -> float:
    """A trained byte-level BPE and an ingest shard in the synthetic run; returns the
    documents' bytes per token under that tokenizer."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = [f"The river {word} the quiet garden near the old mill, number {i}." for i, word in
             enumerate(["crossed", "flooded", "left", "fed", "passed"] * 8)]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.save(str(stage_file(workdir, "tokenizer", "manifest.json").parent / "tokenizer.json"))
    documents = stage_file(workdir, "ingest", "manifest.json").parent / "documents"
    documents.mkdir()
    pq.write_table(pa.table({"text": texts}), documents / "part-00000.parquet")
    tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False))
    return sum(len(t.encode()) for t in texts) / tokens


def test_validation_loss_compares_across_tokenizers_in_bits_per_byte(tmp_path):
    import math

    a, b = write_run(tmp_path / "a", name="a"), write_run(tmp_path / "b", name="b")
    same_tokenizer(a, b, vocab={a: 300, b: 260})
    ratios = [real_tokenizer_and_documents(a, 300), real_tokenizer_and_documents(b, 260)]
    assert ratios[0] > ratios[1], "the larger vocabulary covers more bytes per token"
    comparison = build_comparison([load_run_source(a), load_run_source(b)])

    bits = row(comparison, "pretrain", "val_bits_per_byte (≈)")
    assert bits["values"] == [6.83 / math.log(2) / ratio for ratio in ratios]
    assert bits["caveats"] == [None, None] and bits["deltas"][1] > 0, "same loss per token, more bits per byte"
    assert row(comparison, "pretrain", "val_loss")["caveats"][1] is not None
