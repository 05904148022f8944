"""Our data stages (ingest + tokenizer + dataset) vs Hugging Face datatrove on the same
corpus and the same steps, side by side in one run: wall seconds, documents, tokens, and
the ratio datatrove / ours.

    make bench-datatrove-env      # once: datatrove 0.10.1 + spaCy in .venv-datatrove
    flock /tmp/heavy.lock .venv/bin/python benchmarks/data_stages_vs_datatrove.py \\
        [--scale 4] [--books N] [--gopher matched|datatrove] [--out FILE.json]

Ours runs first (datatrove tokenizes with the tokenizer our side trains), each side in
its own process, timed from start to exit (Python start, imports, Ray or the process
pool included):

- ours: `pretrain run configs/demo.yaml --only ingest --only tokenizer --only dataset`
  in a fresh workdir, on a local Ray with 2 CPUs, with `-o` overrides (OUR_OVERRIDES): the
  Gopher values of the quality keys our ingest has (min_words 50, mean word length <= 10,
  duplicate lines <= 0.3), near dedup (MinHash of word 5-grams, 128 permutations in 16
  bands of 8, candidates verified at estimated Jaccard >= 0.8; exact dedup first) with
  datatrove's clustering rule (`components`), and the whole corpus tokenized
  (dataset.max_tokens null; the demo stops at 2M tokens). Per-stage seconds come from the
  "[stage] done in X s" lines.
- datatrove (.venv-datatrove, its own numpy and huggingface-hub), local executors with 2
  tasks on 2 workers where the stage allows: (1) a text reader (datatrove has none for
  plain text: a BaseDiskReader subclass here) that splits each book into paragraphs the
  way our ingest does (blank-line separated, NFC, whitespace runs and line breaks to one
  space, so both sides see the same documents), GopherQualityFilter,
  GopherRepetitionFilter, a JSONL writer of the survivors and MinhashDedupSignature;
  (2) MinhashDedupBuckets (16 tasks: datatrove wants one or more per bucket); (3)
  MinhashDedupCluster (1 task); (4) the survivors read back, MinhashDedupFilter and
  DocumentTokenizer with our tokenizer.json (<|endoftext|> after each document, as our
  clm packing has; no shuffle, which ours does not do either).

Offline: datatrove's English word tokenizer (used by the Gopher filters and by MinHash
shingling) is spacy.blank("en"), spaCy's rules with no model to download; nltk (whose
punkt data would need a download) is not used on this path; the BPE tokenizer is a local
file. Nothing here reaches the network.

Equal on both sides: the files, the paragraph documents, the Gopher thresholds of the
rules ours has, MinHash 5-grams x 16 bands x 8 rows with connected-component clustering,
the tokenizer and the end-of-text token, 2 CPUs.
Not equal:
- ours also trains the tokenizer (BPE 8192 on a 20 MB sample): the table gives ours with
  and without that stage; datatrove only applies it.
- words: ours splits on whitespace, datatrove uses spaCy tokens (punctuation is a token,
  "don't" is two), so the same threshold can judge a paragraph differently; datatrove
  also normalizes text before shingling (lower case, no punctuation, digits folded).
- --gopher matched (default): datatrove's filters keep only the rules ours has (min 50
  words, mean word length <= 10, duplicate-line fraction <= 0.3); --gopher datatrove:
  datatrove's defaults, the whole Gopher set (stop words, symbol ratios, bullets, n-gram
  repetition...), more work and more documents dropped than ours.
- dedup: ours drops exact copies first and verifies each LSH candidate pair (estimated
  Jaccard >= 0.8); datatrove takes every band collision as a duplicate.
- output: ours packs clm rows of 128 tokens into Arrow shards with a 2% validation split
  by document (tokens out = whole rows; a shard's last partial row is dropped); datatrove
  writes one token stream per task (.ds + index). Ours also writes sentence splits and
  stats at ingest.
- --scale N reads N copies of every book: the copies are exact duplicates, so both sides
  drop all but one and the later stages see the same text as at 1x.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATATROVE_PYTHON = REPO / ".venv-datatrove" / "bin" / "python"
BOOKS = "corpus/gutenberg"
WORKERS = 2  # this machine's cores; ours runs on a local Ray with as many CPUs
NGRAM, BANDS, ROWS = 5, 16, 8  # MinHash, both sides: 128 permutations
EOS = "<|endoftext|>"  # our BPE's end-of-text token (stages/tokenizer)

OUR_OVERRIDES = [
    f"ray.num_cpus={WORKERS}",
    "ingest.min_words=50", "ingest.max_mean_word_length=10",
    "ingest.max_duplicate_line_fraction=0.3",
    "ingest.dedup=near", f"ingest.minhash_ngram={NGRAM}",
    f"ingest.minhash_permutations={BANDS * ROWS}", f"ingest.minhash_bands={BANDS}",
    "ingest.minhash_clustering=components",
    "dataset.max_tokens=null",
]
STAGES = ("ingest", "tokenizer", "dataset")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path,
                        default=REPO / os.environ.get("DATA_DIR", "../shared/data"),
                        help="holds corpus/gutenberg/*.txt (default $DATA_DIR, else "
                        "../shared/data; relative to the repository)")
    parser.add_argument("--scale", type=int, default=1, help="copies of every book")
    parser.add_argument("--books", type=int, default=None,
                        help="only the first N books (sorted by name), for a quick check")
    parser.add_argument("--gopher", choices=("matched", "datatrove"), default="matched",
                        help="datatrove's Gopher rules: those ours has, or its defaults")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    parser.add_argument("--datatrove-side", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.datatrove_side:  # the child, in .venv-datatrove
        print(json.dumps(run_datatrove_pipeline(**json.loads(args.datatrove_side))))
        return
    if not DATATROVE_PYTHON.exists():
        fail(f"{DATATROVE_PYTHON} is missing: run `make bench-datatrove-env` first", 2)
    with tempfile.TemporaryDirectory(prefix="data-vs-datatrove-") as tmp:
        data_dir = corpus_root(args.data_dir.resolve(), args.scale, args.books, Path(tmp))
        ours = run_ours(data_dir, Path(tmp) / "ours")
        theirs = run_datatrove(data_dir, Path(ours.pop("tokenizer_file")), Path(tmp) / "datatrove",
                               args.gopher)
    results = {"corpus": {"data_dir": str(args.data_dir), "scale": args.scale,
                          "books": args.books, "mb_in": ours["mb_in"]},
               "gopher": args.gopher, "ours": ours, "datatrove": theirs,
               "ratio": round(theirs["wall_seconds"] / ours["wall_seconds"], 2),
               "ratio_without_tokenizer_training": round(
                   theirs["wall_seconds"]
                   / (ours["wall_seconds"] - ours["stage_seconds"]["tokenizer"]), 2),
               "versions": {"ours": git_version(), **theirs.pop("versions")}}
    print(markdown(results))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


def corpus_root(data_dir: Path, scale: int, books: int | None, tmp: Path) -> Path:
    """A data_dir whose corpus/gutenberg holds what both sides read: the shared corpus
    itself, or `scale` copies of its first `books` books (hard links where the file
    system allows, else copies: our ingest lists symbolic links as not files)."""
    files = sorted((data_dir / BOOKS).glob("*.txt"))
    if not files:
        fail(f"no {BOOKS}/*.txt under --data-dir {data_dir}: point --data-dir (or DATA_DIR) "
             f"at the shared data folder", 2)
    if scale == 1 and books is None:
        return data_dir
    target = tmp / "data" / BOOKS
    target.mkdir(parents=True)
    for copy in range(scale):
        for file in files[:books]:
            try:
                os.link(file, target / f"{copy}-{file.name}")
            except OSError:
                shutil.copyfile(file, target / f"{copy}-{file.name}")
    return tmp / "data"


def run_ours(data_dir: Path, workdir: Path) -> dict:
    command = [sys.executable, "-m", "pipeline.cli", "run", "configs/demo.yaml",
               *(arg for stage in STAGES for arg in ("--only", stage)),
               "-o", f"workdir={workdir}", "-o", f"data_dir={data_dir}",
               *(arg for override in OUR_OVERRIDES for arg in ("-o", override))]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        fail(f"our side failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}", 1)
    stage_seconds = {name: float(seconds) for name, seconds in
                     re.findall(r"^\[(\w+)\] done in ([\d.]+)s", done.stdout, re.MULTILINE)}
    ingest, tokenizer, dataset = (manifest(workdir, stage) for stage in STAGES)
    filters = ingest["metrics"]["filters"]
    dedup = sum(filters.get(name, {}).get("documents", 0)
                for name in ("exact_duplicate", "near_duplicate"))
    return {
        "wall_seconds": round(wall, 1), "stage_seconds": stage_seconds,
        "mb_in": round(ingest["metrics"]["bytes_in"] / 1e6, 1),
        "documents_in": ingest["metrics"]["documents_in"],
        "documents_after_filters": ingest["metrics"]["documents_out"] + dedup,
        "documents_out": ingest["metrics"]["documents_out"],
        "tokens_out": dataset["metrics"]["train_tokens"] + dataset["metrics"]["validation_tokens"],
        "filters": {name: counts.get("documents") for name, counts in filters.items()},
        "tokenizer_file": str(tokenizer["path"] / "tokenizer.json"),
    }


def manifest(workdir: Path, stage: str) -> dict:
    (path,) = workdir.glob(f"{stage}/*/manifest.json")  # one fingerprint in a fresh workdir
    return {**json.loads(path.read_text()), "path": path.parent}


def run_datatrove(data_dir: Path, tokenizer_file: Path, work: Path, gopher: str) -> dict:
    spec = {"corpus": str(data_dir / BOOKS), "tokenizer_file": str(tokenizer_file),
            "work": str(work), "gopher": gopher}
    start = time.perf_counter()
    done = subprocess.run([str(DATATROVE_PYTHON), __file__, "--datatrove-side", json.dumps(spec)],
                          cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        fail(f"datatrove's side failed ({done.returncode}):\n{done.stderr[-5000:]}", 1)
    return {"wall_seconds": round(wall, 1), **json.loads(done.stdout.strip().splitlines()[-1])}


def fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def git_version() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                          capture_output=True, text=True).stdout.strip()
    # What ran is the working tree: say when its code differs from the commit.
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "pipeline", "stages",
                            "configs"], cwd=REPO).returncode
    return f"commit {head}" + (" + uncommitted changes to pipeline/stages/configs" if dirty else "")


def markdown(results: dict) -> str:
    ours, theirs = results["ours"], results["datatrove"]
    corpus = results["corpus"]

    def stages(side: dict) -> str:
        return ", ".join(f"{name} {seconds:.1f}" for name, seconds in side["stage_seconds"].items())

    rows = [
        f"Corpus: {corpus['mb_in']} MB ({corpus['scale']}x"
        + (f", first {corpus['books']} books" if corpus["books"] else "")
        + f"), datatrove Gopher rules: {results['gopher']}",
        "",
        "| side | wall s | per stage (s) | documents in | after quality filters "
        "| out (after dedup) | tokens out |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for name, side in (("ours", ours), ("datatrove", theirs)):
        rows.append(f"| {name} | {side['wall_seconds']:.1f} | {stages(side)} | "
                    f"{side['documents_in']:,} | {side['documents_after_filters']:,} | "
                    f"{side['documents_out']:,} | {side['tokens_out']:,} |")
    rows += ["", f"datatrove / ours: {results['ratio']}x wall; "
             f"{results['ratio_without_tokenizer_training']}x without our tokenizer "
             f"training ({ours['stage_seconds'].get('tokenizer', 0):.1f} s)",
             "versions: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items())]
    return "\n".join(rows)


# datatrove's side: runs in .venv-datatrove (`--datatrove-side`), never imported by ours.

def run_datatrove_pipeline(corpus: str, tokenizer_file: str, work: str, gopher: str) -> dict:
    from importlib.metadata import version

    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import (MinhashConfig, MinhashDedupBuckets,
                                          MinhashDedupCluster, MinhashDedupFilter,
                                          MinhashDedupSignature)
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    from datatrove.pipeline.writers import JsonlWriter

    folder = Path(work)
    minhash = MinhashConfig(n_grams=NGRAM, num_buckets=BANDS, hashes_per_bucket=ROWS)
    stages = {
        "read_filter_signatures": dict(pipeline=[
            paragraph_reader()(corpus, glob_pattern="*.txt"), *gopher_filters(gopher),
            JsonlWriter(str(folder / "filtered"), compression=None),
            MinhashDedupSignature(str(folder / "signatures"), config=minhash)],
            tasks=WORKERS, workers=WORKERS),
        "minhash_buckets": dict(pipeline=[MinhashDedupBuckets(
            str(folder / "signatures"), str(folder / "buckets"), config=minhash)],
            tasks=BANDS, workers=WORKERS),
        "minhash_cluster": dict(pipeline=[MinhashDedupCluster(
            str(folder / "buckets"), str(folder / "remove_ids"), config=minhash)],
            tasks=1, workers=1),
        "dedup_tokenize": dict(pipeline=[
            JsonlReader(str(folder / "filtered"), compression=None),
            MinhashDedupFilter(str(folder / "remove_ids")),
            DocumentTokenizer(str(folder / "tokens"), tokenizer_name_or_path=tokenizer_file,
                              eos_token=EOS, shuffle_documents=False)],
            tasks=WORKERS, workers=WORKERS),
    }
    stage_seconds = {}
    for name, kwargs in stages.items():
        start = time.perf_counter()
        LocalPipelineExecutor(**kwargs, logging_dir=str(folder / "logs" / name)).run()
        stage_seconds[name] = round(time.perf_counter() - start, 1)
    counts = step_counts(folder / "logs")
    # The index of each task's token file holds one uint64 end offset per document.
    indexes = sorted((folder / "tokens").glob("*.ds.index"))
    ends = [int.from_bytes(path.read_bytes()[-8:], "little") for path in indexes
            if path.stat().st_size]
    return {"stage_seconds": stage_seconds,
            "documents_in": counts["reader_documents"],
            "documents_after_filters": counts["written"],
            "documents_out": sum(path.stat().st_size // 8 for path in indexes),
            "tokens_out": sum(ends),
            "filters": counts["dropped"],
            "versions": {name: version(name) for name in ("datatrove", "spacy", "tokenizers")}}


def paragraph_reader():
    """datatrove's reader for plain text files, one document per paragraph as our
    ingest makes them (stages/ingest/clean.py with split: paragraph, NFC, unwrap_lines)."""
    import unicodedata

    from datatrove.pipeline.readers.base import BaseDiskReader

    class ParagraphReader(BaseDiskReader):
        name = "paragraphs of text files"

        def read_file(self, filepath: str):
            with self.data_folder.open(filepath, "rb") as file:
                text = file.read().decode("utf-8", errors="replace")
            paragraph, start = [], 0
            for number, line in enumerate([*text.split("\n"), ""], start=1):
                if line.strip():
                    start = start or number
                    paragraph.append(line)
                    continue
                if paragraph:
                    clean = " ".join(unicodedata.normalize("NFC", "\n".join(paragraph)).split())
                    document = self.get_document_from_dict({"text": clean}, filepath,
                                                           f"{filepath}:{start}")
                    if document:
                        yield document
                paragraph, start = [], 0

    return ParagraphReader


def gopher_filters(gopher: str) -> list:
    from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter

    if gopher == "datatrove":
        return [GopherQualityFilter(), GopherRepetitionFilter()]
    # The rules our ingest has, at the same Gopher values; every other rule off.
    return [GopherQualityFilter(
                min_doc_words=50, max_doc_words=None, min_avg_word_length=None,
                max_avg_word_length=10, max_symbol_word_ratio=None,
                max_bullet_lines_ratio=None, max_ellipsis_lines_ratio=None,
                max_non_alpha_words_ratio=None, min_stop_words=None),
            GopherRepetitionFilter(
                dup_line_frac=0.3, dup_para_frac=None, dup_line_char_frac=None,
                dup_para_char_frac=None, top_n_grams=(), dup_n_grams=())]


def step_counts(logs: Path) -> dict:
    """Documents read, written after the filters, and dropped per step, from each
    executor's merged stats.json."""
    counts = {"reader_documents": 0, "written": 0, "dropped": {}}
    for path in sorted(logs.glob("*/stats.json")):
        for step in json.loads(path.read_text()):
            name, step_stats = step["name"], step.get("stats", {})
            total = {key: value.get("total", 0) if isinstance(value, dict) else value
                     for key, value in step_stats.items()}
            if "READER" in name and "documents" in total and "read_filter" in str(path):
                counts["reader_documents"] += total["documents"]
            if "WRITER" in name and "read_filter" in str(path):
                counts["written"] += total.get("total", 0)
            if "FILTER" in name or "DEDUP" in name:  # dropped and dropped_<reason>
                counts["dropped"][name] = {key: value for key, value in total.items()
                                           if key.startswith("dropped")}
    return counts


if __name__ == "__main__":
    main()
