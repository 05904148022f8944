"""The GPU benchmark stays runnable on the days no GPU is lent: benchmarks/gpu_mfu.py
runs its whole path (the objective, its compiled loss, DeepSpeed or plain torch,
gradient accumulation, the JSON lines it appends) on the CPU with a tiny preset, and the
two shell scripts of benchmarks/gpu/ parse and name files that exist."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.support.engine_subprocess import REPO_ROOT, run_engine_script

SMOKE_SCRIPT = r"""
import json, sys
sys.path.insert(0, "benchmarks")
import gpu_mfu
results = []
for engine in ("deepspeed", "torch"):
    results += gpu_mfu.main(["--device", "cpu", "--preset", "gpt-debug", "--seq-len", "32",
                             "--micro-batch-size", "2", "--grad-accum", "2", "--steps", "2", "--warmup", "1",
                             "--variants", "bf16", "bf16+compile", "--compile-backend", "aot_eager",
                             "--engine", engine, "--out", sys.argv[1]])
print("RESULTS" + json.dumps(results))
"""


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("mfu") / "results.jsonl"
    return run_engine_script(SMOKE_SCRIPT, str(out), omp_threads=2), out


def test_the_mfu_benchmark_runs_every_engine_and_variant_on_cpu(smoke):
    results, out = smoke
    assert [(r["engine"], r["variant"]) for r in results] == [
        ("deepspeed", "bf16"), ("deepspeed", "bf16+compile"), ("torch", "bf16"), ("torch", "bf16+compile")]
    assert [json.loads(line) for line in out.read_text().splitlines()] == results  # appended as it went
    for r in results:
        assert r["finite"] and r["grad_accum"] == 2 and r["tokens_per_s"] > 0, r
        assert r["loss_compiled"] == r["variant"].endswith("+compile"), r
    by_engine = {}
    for r in results:
        by_engine.setdefault(r["engine"], []).append(r)
    for engine, (eager, compiled) in by_engine.items():
        # Same seed, same batches: compiling blocks and loss does not change what is trained.
        assert compiled["first_loss"] == pytest.approx(eager["first_loss"], rel=1e-5), engine
        assert compiled["last_loss"] == pytest.approx(eager["last_loss"], rel=1e-3), engine
        assert eager["last_loss"] < eager["first_loss"], engine  # two optimizer steps happened


@pytest.mark.parametrize("script", ["prepare.sh", "session.sh"])
def test_the_gpu_session_scripts_parse_and_name_real_files(script):
    path = REPO_ROOT / "benchmarks" / "gpu" / script
    subprocess.run(["bash", "-n", str(path)], check=True)
    text = path.read_text()
    for named in re.findall(r"(?:benchmarks|configs)/[\w./-]+\.(?:py|yaml)", text):
        assert (REPO_ROOT / named).is_file(), f"{script} names {named}, which does not exist"
