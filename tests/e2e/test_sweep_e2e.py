"""`pretrain sweep` on three tiny GPTs (three learning rates) of the gpt-tiny data,
through the real CLI: the driver alone killed with SIGKILL while the first two points
pretrain (two at a time), which stop themselves, resumed by the same command, then run
once more. (Crossing several axes into a
grid is tests/unit/test_sweep_expand.py's; a fourth point here only cost one more
Ray Train run.)

What it pins: the upstream stages (ingest, tokenizer, dataset) are computed once for all
three points (one output each in the shared store, written before the kill and never
again); the two pretraining `pretrain run` children of the killed driver stop on their
own (nothing else ends them); a killed point resumes from its committed checkpoint; the pending one runs;
sweep.json and sweep.md list every point; the third command skips every point, finished,
without starting Ray.
The points stop after pretraining (--only), which is where they differ; the stages after
it are ordinary runs, covered by the other end-to-end tests.

The sweep joins the test session's Ray (-o ray.address): a second Ray instance beside it
made the whole suite slower than the test itself costs (measured: 27 min 11 s for the
Ray tests with this test in the other half on its own Ray).
"""

from __future__ import annotations

import json
import subprocess
import time

import psutil
import pytest

from pipeline.fingerprint import compute_all
from sweep.expand import expand_sweep
from tests.e2e.cli import REPO_ROOT, cli_command, cli_env, pretrain_cli
from tests.e2e.conftest import CONFIG
from tests.support.process_tree import kill_process_group

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
UPSTREAM = ("ingest", "tokenizer", "dataset")
AXES = ("pretrain.lr=[1e-3,2e-3,3e-3]",)


def sweep_args(root, ray_address) -> list[str]:
    overrides = [*AXES, f"workdir={root}", f"ray.address={ray_address}", "pretrain.num_workers=1",
                 "pretrain.max_steps=60", "pretrain.checkpoint_every=10", "pretrain.eval_every=60"]
    return [CONFIG, *[a for o in overrides for a in ("-o", o)],
            *[a for s in (*UPSTREAM, "pretrain") for a in ("--only", s)]]


def kill_driver_when_committed(sweep: subprocess.Popen, checkpoints, timeout: float = 400
                               ) -> tuple[float, list[psutil.Process]]:
    """SIGKILL the sweep driver alone (as the OOM killer would) once `checkpoints` lists a
    committed checkpoint; (when it was killed, its children then)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert sweep.poll() is None, "the sweep ended before the second point committed a checkpoint"
        if checkpoints.is_file() and "checkpoint-step" in checkpoints.read_text():
            children = psutil.Process(sweep.pid).children()
            sweep.kill()
            return time.time(), children
        time.sleep(0.2)
    raise AssertionError(f"no committed checkpoint in {checkpoints} after {timeout:.0f} s")


def test_a_sweep_shares_upstream_stages_and_resumes_after_a_kill(ray_address, tmp_path):
    root = tmp_path / "sweep"
    args = sweep_args(root, ray_address)
    sweep = expand_sweep(CONFIG, [a for a, flag in zip(args[1:], args) if flag == "-o"])
    names = [p.name for p in sweep.points]
    assert names == ["lr-1e-3", "lr-2e-3", "lr-3e-3"]
    killed_fp = compute_all(sweep.points[1].config)["pretrain"][0]
    snapshot = root / "store" / "pretrain" / killed_fp / "ray" / "pretrain" / "checkpoint_manager_snapshot.json"

    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(cli_command("sweep", *args, "--max-concurrent", "2"), cwd=REPO_ROOT,
                                 env=cli_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        children: list[psutil.Process] = []
        try:
            killed_at, children = kill_driver_when_committed(first, snapshot)
            # Each point sees its driver gone and stops as on Ctrl-C (its Ray Train run killed).
            _, alive = psutil.wait_procs(children, timeout=90)
            assert len(children) == 2 and not alive, [p.cmdline()[:5] for p in alive]
        finally:  # whatever a failed test left running
            kill_process_group(first)
            for child in children:
                if child.is_running():
                    child.kill()
    first_log = (tmp_path / "first.log").read_text()
    states = {p["name"]: p["state"] for p in json.loads((root / "sweep.json").read_text())["points"]}
    assert states[names[1]] == "running" and states[names[2]] == "pending", (states, first_log[-3000:])

    result = pretrain_cli("sweep", *args, "--max-concurrent", "2", timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]

    for stage in UPSTREAM:  # computed once, before the kill, for all three points
        manifests = list((root / "store" / stage).glob("*/manifest.json"))
        assert len(manifests) == 1, (stage, manifests)
        assert json.loads(manifests[0].read_text())["end_time"] < killed_at
    pretrain = {p.name: json.loads(manifest_path(root, "pretrain", p).read_text()) for p in sweep.points}
    assert len(set(m["fingerprint"] for m in pretrain.values())) == 3
    assert pretrain[names[1]]["metrics"]["resumed_from_step"] >= 10  # from its committed checkpoint
    assert pretrain[names[1]]["start_time"] > killed_at
    assert all(m["metrics"]["steps"] == 60 for m in pretrain.values())

    index = json.loads((root / "sweep.json").read_text())
    assert [p["state"] for p in index["points"]] == ["done"] * 3
    for point in index["points"]:  # every point read the upstream stages from the store
        assert set(UPSTREAM) <= set(point["reused"]) and not set(UPSTREAM) & set(point["ran"]), point
        run_index = json.loads((root / point["name"] / "pipeline.json").read_text())
        assert run_index["sweep"] == "gpt-tiny" and run_index["store"] == "../store"
    summary = (root / "sweep.md").read_text()
    assert all(name in summary for name in names), summary

    status = pretrain_cli("status", str(root / names[1]))
    assert status.returncode == 0 and "pretrain" in status.stdout and "done" in status.stdout, status.stdout

    again = pretrain_cli("sweep", *args)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert all(f"[{name}] finished: every selected stage cached, skipped" in again.stdout for name in names)
    assert "Ray" not in again.stdout, again.stdout  # neither started nor joined
    assert json.loads(manifest_path(root, "pretrain", sweep.points[0]).read_text()) == pretrain[names[0]]


def manifest_path(root, stage, point):
    return root / "store" / stage / compute_all(point.config)[stage][0] / "manifest.json"
