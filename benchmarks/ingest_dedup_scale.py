"""Distributed dedup (stages/ingest/dedup_run.py) vs the single-driver dedup it replaced
(sharding.keep_masks + lsh.near_duplicate_masks), and vs datasketch, in one run:

1. scale: driver peak memory and wall time of the whole ingest (near dedup) at 1x, 4x,
   16x the corpus, each size and path in a fresh process on a local Ray with 2 CPUs (so
   the tasks' memory is the workers', and the driver's is the driver's): peak RSS
   (VmHWM) of the driver, and the peak of what it allocated during ingest (tracemalloc,
   which sees numpy's buffers: the part that can grow with the corpus).
2. near dedup: MB/s of text through signatures + LSH + verification, single driver vs
   tasks on 2 Ray workers vs datasketch (MinHash + MinHashLSH, same 128 permutations,
   16 bands x 8 rows, threshold 0.8, same word 5-gram shingles); and the quality of the
   candidate pairs: precision against exact Jaccard of the shingle sets, recall on the
   planted near duplicates, and agreement with datasketch's duplicates.

    .venv/bin/python benchmarks/ingest_dedup_scale.py [--books 40] [--sizes 1 4 16]
        [--paths distributed single] [--quality-copies 2] [--skip-scale] [--skip-quality]

The Nx corpus is N variants of the first --books Gutenberg books: copy 0 is the books; in
copy k >= 1, every 10th paragraph is unchanged (a known exact duplicate), the next one has
its middle word changed (a known near duplicate when long), and the others have every
third word marked with k (new text: their 5-gram shingles all differ). datasketch is a
test dependency (requirements/test.txt, installed by `make install`); without it the
quality part says so and skips the comparison.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHILD = """
import json, sys, time, tracemalloc
from pathlib import Path
from types import SimpleNamespace
sys.path.insert(0, {repo!r})
sys.argv = [""]
from benchmarks.ingest_dedup_scale import single_driver_ingest

def peak_rss_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024

import ray
from pipeline.context import StageContext
from stages.ingest.config import IngestConfig
from stages.ingest.run import run as run_ingest
args = json.loads({args!r})
ray.init(num_cpus=2, log_to_driver=False, include_dashboard=False,
         runtime_env={{"env_vars": {{"PYTHONPATH": {repo!r}}}}})
report = {{"rss_before": peak_rss_mb()}}
config = IngestConfig(sources=[{{"path": "*/*.txt"}}], dedup="near", num_shards=4)
ctx = StageContext(name="ingest", output_dir=Path(args["root"]) / "ingest", config=config,
                   experiment=SimpleNamespace(seed=0, data_dir=args["data_dir"]))
tracemalloc.start()
start = time.perf_counter()
metrics = (run_ingest if args["path"] == "distributed" else single_driver_ingest)(ctx)
report.update(seconds=time.perf_counter() - start,
              traced_peak=tracemalloc.get_traced_memory()[1] / 2**20,
              rss_peak=peak_rss_mb(), mb_in=metrics["bytes_in"] / 1e6,
              documents_in=metrics["documents_in"], documents_out=metrics["documents_out"],
              exact=metrics["filters"]["exact_duplicate"]["documents"],
              near=metrics["filters"]["near_duplicate"]["documents"])
ray.shutdown()
print(json.dumps(report))
"""


def write_corpus(books: list[Path], copies: int, target: Path,
                 near_pairs: list | None = None) -> dict[str, int]:
    """`copies` variants of the books (module docstring); returns the planted counts, and
    appends (original, near copy) paragraphs to `near_pairs` if given."""
    planted = {"exact": 0, "near": 0}
    for copy in range(copies):
        folder = target / f"copy{copy:03d}"
        folder.mkdir(parents=True)
        for book in books:
            paragraphs = book.read_text(encoding="utf-8-sig").replace("\r\n", "\n").split("\n\n")
            out = []
            for j, paragraph in enumerate(paragraphs):
                if copy and paragraph.strip():
                    original = paragraph
                    paragraph, kind = vary(paragraph, copy, j)
                    if kind == "near" and near_pairs is not None:
                        near_pairs.append((original, paragraph))
                    # Counted where ingest keeps them: exact copies of >= 20 characters
                    # (min_chars), near copies of >= 40 words (a one-word change in
                    # fewer is below the 0.8 threshold, or close to it).
                    if kind == "exact" and len(" ".join(paragraph.split())) >= 20:
                        planted[kind] += 1
                    if kind == "near" and len(paragraph.split()) >= 40:
                        planted[kind] += 1
                out.append(paragraph)
            (folder / book.name).write_text("\n\n".join(out), encoding="utf-8")
    return planted


def vary(paragraph: str, copy: int, index: int) -> tuple[str, str | None]:
    lines = [line.split(" ") for line in paragraph.split("\n")]
    words = [(i, k) for i, line in enumerate(lines) for k in range(len(line)) if line[k]]
    if index % 10 == 0:
        return paragraph, "exact"
    if index % 10 == 1 and words:
        i, k = words[len(words) // 2]
        lines[i][k] = f"variant{copy}"
        return "\n".join(" ".join(line) for line in lines), "near"
    for i, k in words[::3]:
        lines[i][k] += f"~{copy}"
    return "\n".join(" ".join(line) for line in lines), None


def single_driver_ingest(ctx) -> dict:
    """run.py's steps with the dedup in the driver, as before the distributed dedup."""
    import shutil

    from stages.ingest.dedup_keep import FileKept
    from stages.ingest.lsh import near_duplicate_masks
    from stages.ingest.ray_data_map import map_in_order
    from stages.ingest.run import ingest_metrics
    from stages.ingest.sharding import keep_masks, plan_shards, write_shard
    from stages.ingest.sources import resolve_sources
    from stages.ingest.staging import CleanJob, clean_file
    from stages.ray_tasks import map_tasks

    config = ctx.config
    files = resolve_sources(config.sources, Path(ctx.experiment.data_dir))
    documents_dir, staging_dir = ctx.output_dir / "documents", ctx.output_dir / "staging"
    documents_dir.mkdir(parents=True)
    staging_dir.mkdir(parents=True)
    jobs = [CleanJob(file, str(staging_dir / f"file-{i:06d}.parquet"), config)
            for i, file in enumerate(files)]
    cleaned = map_in_order(clean_file, jobs, desc="clean")
    exact = keep_masks(cleaned, dedup=True)
    masks = near_duplicate_masks(cleaned, exact, config.minhash_bands, config.minhash_threshold)
    map_tasks(write_shard, plan_shards(cleaned, masks, config.num_shards, str(documents_dir)),
              desc="write")
    shutil.rmtree(staging_dir)
    kept = [FileKept(int(m.sum()), int(f.text_bytes[m].sum()),
                     (int((~e).sum()), int(f.text_bytes[~e].sum())),
                     (int((e & ~m).sum()), int(f.text_bytes[e & ~m].sum())))
            for f, e, m in zip(cleaned, exact, masks, strict=True)]
    return ingest_metrics(cleaned, kept)


def scale(args, books: list[Path]) -> None:
    rows = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            planted = write_corpus(books, size, root / "data")
            for path in args.paths:
                child_args = json.dumps({"root": str(root / path), "data_dir": str(root / "data"),
                                         "path": path})
                done = subprocess.run(
                    [sys.executable, "-c", CHILD.format(repo=str(REPO), args=child_args)],
                    check=True, capture_output=True, text=True, cwd=REPO)
                report = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append((size, path, planted, report))
                print(f"{size}x {path}: {report['seconds']:.0f} s", file=sys.stderr, flush=True)
    print(f"\n{len(books)} books, near dedup, local Ray with 2 CPUs; driver memory:\n")
    print("| corpus | path | MB in | documents in | out | exact dropped (planted, >= 20 chars) "
          "| near dropped (planted, >= 40 words) | seconds | driver peak RSS MB "
          "| driver traced peak MB "
          "| traced vs 1x |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    first = {path: report["traced_peak"] for size, path, _, report in rows
             if size == args.sizes[0]}
    for size, path, planted, r in rows:
        print(f"| {size}x | {path} | {r['mb_in']:.1f} | {r['documents_in']} | "
              f"{r['documents_out']} | {r['exact']} ({planted['exact']}) | {r['near']} "
              f"({planted['near']}) | {r['seconds']:.1f} | {r['rss_peak']:.0f} | "
              f"{r['traced_peak']:.1f} | {r['traced_peak'] / first[path]:.2f}x |")


def file_signatures(staging_path: str) -> int:
    """A near-dedup task's signature work for one staged file (its texts already read)."""
    import pyarrow.parquet as pq

    from stages.ingest.minhash import permutations, signature

    a, b = permutations(128)
    texts = pq.read_table(staging_path, columns=["text"]).column("text").to_pylist()
    return len([signature(text, 5, a, b) for text in texts])


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def quality(args, books: list[Path]) -> None:  # noqa: PLR0915 - one measurement, top to bottom
    import dataclasses

    import numpy as np
    import pyarrow.parquet as pq
    import ray

    from stages.ingest.config import IngestConfig
    from stages.ingest.dedup_partitions import near_pairs_path
    from stages.ingest.dedup_run import deduplicate
    from stages.ingest.dedup_stage_file import exact_path, sizes_path, stage_file
    from stages.ingest.lsh import near_duplicate_masks
    from stages.ingest.minhash import shingle_hashes
    from stages.ingest.sharding import keep_masks
    from stages.ingest.sources import resolve_sources
    from stages.ingest.staging import CleanJob
    from stages.ray_tasks import map_tasks

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        planted: list[tuple[str, str]] = []
        write_corpus(books, args.quality_copies, root / "data", planted)
        config = IngestConfig(sources=[{"path": "*/*.txt"}], dedup="near")
        (root / "staging").mkdir()
        jobs = [CleanJob(file, str(root / "staging" / f"file-{i:06d}.parquet"), config)
                for i, file in enumerate(resolve_sources(config.sources, root / "data"))]
        staged = [stage_file(job) for job in jobs]
        paths = [job.staging_path for job in jobs]
        texts = [pq.read_table(p, columns=["text"]).column("text").to_pylist() for p in paths]
        offsets = np.cumsum([0] + [len(t) for t in texts])
        everything = [t for file_texts in texts for t in file_texts]
        mb = sum(len(t.encode()) for t in everything) / 1e6

        _, our_signatures_s = timed(lambda: [file_signatures(p) for p in paths])
        cleaned = [dataclasses.replace(s.summary, digests=_digests(exact_path(p)),
                                       text_bytes=np.load(sizes_path(p)))
                   for s, p in zip(staged, paths, strict=True)]
        exact, exact_s = timed(keep_masks, cleaned, dedup=True)
        masks, near_s = timed(near_duplicate_masks, cleaned, exact, 16, 0.8)
        single_s = exact_s + near_s
        _, in_process_s = timed(deduplicate, staged, paths, config, str(root / "d1"), 2)
        ray.init(num_cpus=2, log_to_driver=False, include_dashboard=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
        try:
            map_tasks(file_signatures, paths[:2], desc="warm up")
            _, ray_signatures_s = timed(map_tasks, file_signatures, paths, desc="signatures")
            _, ray_s = timed(deduplicate, staged, paths, config, str(root / "d2"), 2)
            components = config.model_copy(update={"minhash_clustering": "components"})
            _, ray_components_s = timed(deduplicate, staged, paths, components, str(root / "d3"), 2)
        finally:
            ray.shutdown()

        survivor = np.concatenate(exact)
        ours_dropped = {int(g) for g in np.flatnonzero(survivor & ~np.concatenate(masks))}
        # minhash_clustering: components (the masks of the d3 run were overwritten by the
        # single-driver path's equal ones; tests/unit/test_dedup_distributed.py pins that).
        component_masks = near_duplicate_masks(cleaned, exact, 16, 0.8, "components")
        components_dropped = {int(g) for g in np.flatnonzero(survivor & ~np.concatenate(component_masks))}
        shingles = {}

        def jaccard(x: int, y: int) -> float:
            for g in (x, y):
                if g not in shingles:
                    shingles[g] = shingle_hashes(everything[g], 5)
            common = len(np.intersect1d(shingles[x], shingles[y], assume_unique=True))
            return common / (len(shingles[x]) + len(shingles[y]) - common)

        pairs = np.concatenate([np.load(near_pairs_path(str(root / "d1"), p)) for p in range(2)])
        ours = {(int(offsets[p["file"]] + p["row"]),
                 int(offsets[p["parent_file"]] + p["parent_row"])) for p in pairs}
        ours = {(c, q) for c, q in ours if survivor[c]}
        verified = {(c, q) for c, q in ours
                    if c in ours_dropped and _agree(paths, offsets, c, q)}

        report = {"mb": mb, "documents": len(everything), "exact_survivors": int(survivor.sum()),
                  "our_signatures_s": our_signatures_s, "ray_signatures_s": ray_signatures_s,
                  "single_driver_lsh_s": single_s, "tasks_in_process_lsh_s": in_process_s,
                  "tasks_ray2_lsh_s": ray_s, "tasks_ray2_components_lsh_s": ray_components_s,
                  "candidate_pairs": len(ours),
                  "verified_pairs": len(verified), "ours_dropped": len(ours_dropped)}
        similar = {pair: jaccard(*pair) >= 0.8 for pair in ours}
        report["precision_candidates"] = _ratio(sum(similar.values()), len(ours))
        report["precision_verified"] = _ratio(sum(similar[p] for p in verified), len(verified))
        truth_pool = {c for (c, _), s in similar.items() if s}

        try:
            import datasketch
        except ImportError:
            datasketch = None
            print("datasketch is not installed (a test dependency): `make install`, or "
                  "`pip install datasketch==2.0.0`, to compare with it", file=sys.stderr)
        if datasketch is not None:
            order = np.flatnonzero(survivor).tolist()
            start = time.perf_counter()
            minhashes = {}
            for g in order:
                m = datasketch.MinHash(num_perm=128)
                m.update_batch([h.tobytes() for h in shingle_hashes(everything[g], 5)])
                minhashes[g] = m
            report["datasketch_signatures_s"] = time.perf_counter() - start
            start = time.perf_counter()
            lsh = datasketch.MinHashLSH(threshold=0.8, num_perm=128, params=(16, 8))
            theirs, their_pairs = set(), set()
            for g in order:
                candidates = lsh.query(minhashes[g])
                their_pairs.update((g, c) for c in candidates)
                if any(minhashes[c].jaccard(minhashes[g]) >= 0.8 for c in candidates):
                    theirs.add(g)
                lsh.insert(g, minhashes[g])
            report["datasketch_lsh_s"] = time.perf_counter() - start
            truth_pool |= {c for c, q in their_pairs if jaccard(c, q) >= 0.8}
            common = len(ours_dropped & theirs)
            report.update(datasketch_dropped=len(theirs), common_dropped=common,
                          precision_vs_datasketch=_ratio(common, len(ours_dropped)),
                          recall_vs_datasketch=_ratio(common, len(theirs)),
                          datasketch_precision=_ratio(len(theirs & truth_pool), len(theirs)),
                          datasketch_recall_pooled=_ratio(len(theirs & truth_pool),
                                                          len(truth_pool)))
        # Recall on the planted near copies whose exact Jaccard with their original is
        # >= 0.8 (a one-word change in a short paragraph is not similar enough).
        where = {" ".join(everything[g].split()): g for g in np.flatnonzero(survivor).tolist()}
        planted_near = {where[" ".join(copy.split())] for original, copy in planted
                        if " ".join(copy.split()) in where and _jaccard_of_texts(original, copy)
                        >= 0.8}
        report.update(planted_near=len(planted_near),
                      recall_planted=_ratio(len(ours_dropped & planted_near), len(planted_near)))
        if datasketch is not None:
            report["datasketch_recall_planted"] = _ratio(len(theirs & planted_near),
                                                         len(planted_near))
        report.update(truly_near=len(truth_pool),
                      precision_dropped=_ratio(len(ours_dropped & truth_pool), len(ours_dropped)),
                      recall_pooled=_ratio(len(ours_dropped & truth_pool), len(truth_pool)),
                      components_dropped=len(components_dropped),
                      components_precision_dropped=_ratio(len(components_dropped & truth_pool),
                                                          len(components_dropped)),
                      components_recall_pooled=_ratio(len(components_dropped & truth_pool),
                                                      len(truth_pool)))
        if datasketch is not None:
            report["components_common_with_datasketch"] = len(components_dropped & theirs)
    _print_quality(report)


def _digests(exact_entries_path: str) -> bytes:
    """The digests in row order, back from the route-sorted exact entries."""
    import numpy as np

    entries = np.load(exact_entries_path)
    entries = entries[np.argsort(entries["row"])]
    halves = np.empty(len(entries), dtype=[("high", ">u8"), ("low", ">u8")])
    halves["high"], halves["low"] = entries["route"], entries["low"]
    return halves.tobytes()


def _jaccard_of_texts(one: str, two: str) -> float:
    import numpy as np

    from stages.ingest.minhash import shingle_hashes

    x, y = shingle_hashes(one, 5), shingle_hashes(two, 5)
    common = len(np.intersect1d(x, y, assume_unique=True))
    return common / (len(x) + len(y) - common)


def _agree(paths, offsets, child: int, parent: int) -> bool:
    import numpy as np

    def row(g):
        f = int(np.searchsorted(offsets, g, side="right") - 1)
        return np.load(paths[f] + ".minhash.npy", mmap_mode="r")[g - offsets[f]]

    return float((row(child) == row(parent)).mean()) >= 0.8


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _print_quality(r: dict) -> None:
    mb = r["mb"]
    print(f"\nnear dedup on {mb:.1f} MB of text, {r['documents']} documents "
          f"({r['exact_survivors']} after exact dedup):\n")
    print("| path | signatures s | LSH + verify s | MB/s (both) |")
    print("|---|---:|---:|---:|")
    rows = [("single driver (one process)", r["our_signatures_s"], r["single_driver_lsh_s"]),
            ("tasks, in process, 2 partitions", r["our_signatures_s"], r["tasks_in_process_lsh_s"]),
            ("tasks on Ray, 2 workers", r["ray_signatures_s"], r["tasks_ray2_lsh_s"]),
            ("tasks on Ray, 2 workers, minhash_clustering: components", r["ray_signatures_s"],
             r["tasks_ray2_components_lsh_s"])]
    if "datasketch_lsh_s" in r:
        rows.append(("datasketch MinHash + MinHashLSH (one process)",
                     r["datasketch_signatures_s"], r["datasketch_lsh_s"]))
    for name, signatures_s, lsh_s in rows:
        print(f"| {name} | {signatures_s:.2f} | {lsh_s:.2f} | {mb / (signatures_s + lsh_s):.2f} |")
    print("\n| quality | value |\n|---|---:|")
    for key in ("candidate_pairs", "verified_pairs", "ours_dropped", "precision_candidates",
                "precision_verified", "planted_near", "recall_planted",
                "datasketch_recall_planted", "truly_near", "precision_dropped", "recall_pooled",
                "datasketch_dropped", "common_dropped", "precision_vs_datasketch",
                "recall_vs_datasketch", "datasketch_precision", "datasketch_recall_pooled",
                "components_dropped", "components_precision_dropped", "components_recall_pooled",
                "components_common_with_datasketch"):
        if key in r:
            print(f"| {key} | {r[key]} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared/data"))
    parser.add_argument("--books", type=int, default=40, help="first N Gutenberg books")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--paths", nargs="+", default=["distributed", "single"],
                        choices=["distributed", "single"])
    parser.add_argument("--quality-copies", type=int, default=2)
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--skip-quality", action="store_true")
    args = parser.parse_args()
    books = sorted((Path(args.data_dir) / "corpus/gutenberg").glob("*.txt"))[:args.books]
    if not args.skip_scale:
        scale(args, books)
    if not args.skip_quality:
        quality(args, books)


if __name__ == "__main__":
    main()
