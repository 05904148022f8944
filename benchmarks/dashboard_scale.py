"""`pretrain dashboard ROOT` on 200 runs of 20,000 logged steps: page load and poll cost.

    .venv/bin/python benchmarks/dashboard_scale.py [--runs 200] [--steps 20000] [--selected 5]

Writes a sweep root in a temp dir: --runs points, each a run directory as the engine lays
it out (tests/support/synthetic_run.py: pipeline.json, config, finished ingest/tokenizer/dataset
stages) whose pretrain stage is still running: a metrics.jsonl of --steps records in the
pretrain stage's own format (loss, clm_loss, clm_accuracy, tokens_per_s, samples_per_s,
mfu, data_wait_s, data_wait_share, lr, grad_norm every step; val_loss, val_clm_loss,
val_clm_accuracy, val_perplexity every 500), about 1.6 GB for 200 x 20,000. Starts the
real server (views.dashboard) on a free port and measures, as the page does it:

  first load   GET / (the page, with the table in it), then the first POST /runs.json
               (the curves of the --selected runs the page selects: loss and val_loss)
  idle poll    POST /runs.json with the page's table tag and cursors; nothing changed
  growth poll  the same after every run's metrics.jsonl gained 10 steps
  full table   GET /runs.json (every row; scripts, not the page)

Each figure is bytes on the wire and seconds to the last byte (one client, the server
in this process's thread). The temp dir is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.synthetic_run import write_sweep_point
from views.dashboard import Dashboard, make_server

EVAL_EVERY = 500
PANELS = ["loss", "val_loss"]


def record(step: int, lr: float, started: float, rng: random.Random) -> str:
    loss = 2.5 + 6.0 / (1 + step * lr * 3) + rng.gauss(0, 0.02)
    tokens_per_s = 21000.0 + rng.gauss(0, 300)
    line = (f'{{"time": {started + step * 0.35:.7f}, "step": {step}, "loss": {loss!r}, "clm_loss": {loss!r}, '
            f'"clm_accuracy": {min(0.6, step / 40000):.16f}, "tokens_per_s": {tokens_per_s!r}, '
            f'"samples_per_s": {tokens_per_s / 64!r}, "mfu": {tokens_per_s / 1.3e6!r}, '
            f'"data_wait_s": {0.0003 + rng.random() * 1e-4!r}, "data_wait_share": {0.006 + rng.random() * 1e-3!r}, '
            f'"lr": {lr * min(1.0, step / 500)!r}, "grad_norm": {0.6 + rng.random() * 0.4!r}')
    if step % EVAL_EVERY == 0:
        val = loss + 0.05
        line += (f', "val_loss": {val!r}, "val_clm_loss": {val!r}, "val_clm_accuracy": {min(0.6, step / 40000)!r}, '
                 f'"val_perplexity": {2.718281828 ** val!r}')
    return line + "}\n"


def write_root(root: Path, runs: int, steps: int) -> list[Path]:
    """A sweep root of `runs` points whose pretrain stage is still logging."""
    metrics_files = []
    started = time.time() - steps * 0.35
    for i in range(runs):
        lr = 1e-4 * (1 + i)
        run = write_sweep_point(root, f"lr-{lr:.4g}", sweep="scale", name=f"p{i:03d}", lr=lr,
                                stop_before="finetune")
        manifest = root / "store" / "pretrain" / _fingerprint(run) / "manifest.json"
        manifest.unlink()  # pretraining: no manifest yet
        metrics = manifest.parent / "metrics.jsonl"
        rng = random.Random(i)
        with open(metrics, "w") as f:
            f.writelines(record(step, lr, started, rng) for step in range(1, steps + 1))
        metrics_files.append(metrics)
    return metrics_files


def _fingerprint(run: Path) -> str:
    return json.loads((run / "pipeline.json").read_text())["stages"]["pretrain"]


def fetch(url: str, body: dict | None = None) -> tuple[bytes, float]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        payload = response.read()
    return payload, time.perf_counter() - started


def page_table(page: bytes) -> dict:
    """The table the page carries in <script id="runs-data">."""
    text = page.decode()
    start = text.index('id="runs-data">') + len('id="runs-data">')
    return json.loads(text[start:text.index("</script>", start)])


def cursors(table: dict, series: dict, selected: list[str]) -> dict:
    return {"table": table["etag"], "series": {
        run: {"epoch": series[run]["epoch"], "after": series[run]["cursor"], "metrics": PANELS, "full": []}
        for run in selected}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--selected", type=int, default=5, help="runs whose curves the page shows")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dashboard-scale-"))
    try:
        began = time.perf_counter()
        metrics_files = write_root(tmp / "sweep", args.runs, args.steps)
        size = sum(f.stat().st_size for f in metrics_files)
        print(f"wrote {args.runs} runs x {args.steps} steps ({size / 1e9:.2f} GB of metrics.jsonl) "
              f"in {time.perf_counter() - began:.1f} s")
        server = make_server(Dashboard([tmp / "sweep"]), "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            page, page_s = fetch(url + "/")
            table = page_table(page)
            selected = [row["run_dir"] for row in table["rows"][:args.selected]]
            first = {"table": table["etag"], "series": {
                run: {"epoch": None, "after": 0, "metrics": PANELS, "full": []} for run in selected}}
            answer, first_s = fetch(url + "/runs.json", first)
            series = json.loads(answer)["series"]
            report("first load: page (HTML + table)", page, page_s)
            report(f"first load: first poll ({args.selected} runs' loss and val_loss)", answer, first_s)
            print(f"first load in all: {(len(page) + len(answer)) / 1e6:.2f} MB, {page_s + first_s:.2f} s")

            idle, idle_s = fetch(url + "/runs.json", cursors(table, series, selected))
            report("poll, nothing changed", idle, idle_s)
            assert "table" not in json.loads(idle), "the table was sent again though nothing changed"

            rng = random.Random(0)
            for i, metrics in enumerate(metrics_files):
                with open(metrics, "a") as f:
                    f.writelines(record(step, 1e-4 * (1 + i), time.time(), rng)
                                 for step in range(args.steps + 1, args.steps + 11))
            grown, grown_s = fetch(url + "/runs.json", cursors(table, series, selected))
            report("poll, every run gained 10 steps", grown, grown_s)
            points = sum(len(m["step"]) for s in json.loads(grown)["series"].values() for m in s["metrics"].values())
            print(f"  (points sent in that poll: {points})")

            whole, whole_s = fetch(url + "/runs.json")
            report("GET /runs.json (the whole table, for scripts)", whole, whole_s)
        finally:
            server.shutdown()
            server.server_close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(what: str, body: bytes, seconds: float) -> None:
    print(f"{what}: {len(body) / 1e3:,.1f} kB in {seconds:.2f} s")


if __name__ == "__main__":
    main()
