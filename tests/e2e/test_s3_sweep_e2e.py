"""`pretrain sweep` with its root in a bucket (moto's S3 server on loopback; boto3 and
s3fs unmocked), through the real CLI on the session Ray: two tokenizer sizes over the
gpt-tiny data, stopped after the tokenizer (--only), since where the points' files go is
what is tested here; test_sweep_e2e trains and resumes a folder sweep.

What it pins: the shared ingest output is computed once, in the bucket's shared store,
and each point's tokenizer beside it; each point's workdir, its log, sweep.json and the
summary are in the bucket; nothing lands in a local folder named like the URL; the
dashboard and `pretrain report` of the bucket root list the points from the bucket; and from
an empty machine (the mirror deleted) the same command finds every point finished in
the bucket and keeps the points' states."""

from __future__ import annotations

import json
import shutil

import pytest

from storage.object_keys import filesystem
from views.dashboard import Dashboard
from tests.e2e.cli import REPO_ROOT, pretrain_cli
from tests.e2e.conftest import CONFIG
from tests.support.s3_server import make_bucket

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
POINTS = ["vocab_size-512", "vocab_size-1024"]


def test_a_sweep_into_a_bucket_shares_its_store_there_and_resumes_on_an_empty_machine(
        s3_endpoint, ray_address, tmp_path, monkeypatch):
    monkeypatch.setenv("PRETRAIN_MIRROR", str(tmp_path / "mirror"))  # read by the CLI (cli_env)
    url = f"{make_bucket('e2e-sweeps')}/tiny"
    fs, root = filesystem(url)
    args = (CONFIG, "-o", f"workdir={url}", "-o", f"ray.address={ray_address}",
            "-o", "tokenizer.vocab_size=[512,1024]", "--only", "ingest", "--only", "tokenizer")

    plan = pretrain_cli("sweep", *args, "--plan")
    assert plan.returncode == 0, plan.stdout[-4000:] + plan.stderr[-4000:]
    assert f"points under {url}, stage outputs shared in {url}/store" in plan.stdout, plan.stdout
    first = pretrain_cli("sweep", *args)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]

    assert len(fs.glob(f"{root}/store/ingest/*/manifest.json")) == 1  # shared: once for both points
    assert len(fs.glob(f"{root}/store/tokenizer/*/manifest.json")) == 2
    index = json.loads(fs.cat_file(f"{root}/sweep.json"))
    assert {p["name"]: p["state"] for p in index["points"]} == dict.fromkeys(POINTS, "done")
    for name in POINTS:
        assert fs.exists(f"{root}/{name}/pipeline.json")  # the point's run, in the bucket
        assert b"[tokenizer] done in" in fs.cat_file(f"{root}/{name}/sweep.log")
    assert b"[ingest] done in" in fs.cat_file(f"{root}/shared-stages.log")
    summary = fs.cat_file(f"{root}/sweep.md").decode()
    assert all(f"gpt-tiny-{name}" in summary for name in POINTS), summary
    assert fs.exists(f"{root}/sweep.html")
    assert not (REPO_ROOT / "s3:").exists()  # the old bug: a local folder named like the URL
    # The dashboard of the bucket root: the points its sweep.json names, read from the bucket.
    dashboard = Dashboard([url])
    table = json.loads(dashboard.runs_json())
    assert table["root"] == url
    assert sorted(row["experiment"] for row in table["rows"]) == sorted(f"gpt-tiny-{n}" for n in POINTS)
    assert all(row["stages"]["tokenizer"] == "done" for row in table["rows"]), table["rows"]
    assert sorted(row["values"]["directory"] for row in table["rows"]) == sorted(f"{url}/{n}" for n in POINTS)
    assert all(f"gpt-tiny-{n}" in dashboard.render()[1] for n in POINTS)
    # `pretrain report` of the bucket root writes the summary again, beside sweep.json.
    fs.rm(f"{root}/sweep.md")
    report = pretrain_cli("report", url)
    assert report.returncode == 0 and f"wrote {url}/sweep.html and {url}/sweep.md" in report.stdout, (
        report.stdout[-2000:] + report.stderr[-2000:])
    assert all(f"gpt-tiny-{n}" in fs.cat_file(f"{root}/sweep.md").decode() for n in POINTS)

    shutil.rmtree(tmp_path / "mirror")  # another machine: nothing local
    second = pretrain_cli("sweep", *args)
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    assert second.stdout.count("finished: every selected stage cached, skipped") == 2, second.stdout
    index = json.loads(fs.cat_file(f"{root}/sweep.json"))
    assert {p["name"]: p["state"] for p in index["points"]} == dict.fromkeys(POINTS, "done")
    for name in POINTS:  # the first machine's logs were fetched, not replaced
        assert b"[tokenizer] done in" in fs.cat_file(f"{root}/{name}/sweep.log")
