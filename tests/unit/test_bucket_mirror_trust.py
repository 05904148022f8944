"""A bucket run computes only on the bytes its manifests name, whatever this machine's
mirror holds (issue 31, defect 1), on a real S3 server on loopback (moto's, over HTTP)
with plain stage functions and no Ray: `pretrain` writes 3 MiB of weights, `evaluate`
reports the sha256 of the weights it was given. After the run, the mirror's copy of the
weights is damaged in the middle, keeping its size, and evaluate is run again:

- without --verify, a copy whose size and mtime no longer match the mirror's record of
  it is hashed, and downloaded again when its bytes differ;
- with --verify (the real CLI), even a copy whose mtime was put back is hashed;
- `pretrain verify URL` names such a copy and removes it, and the run stays intact;
- an object in the bucket with other bytes than its manifest's is refused when it is
  downloaded, with an `error:` line, instead of being computed on.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

import pytest

import pipeline.runner as runner
from cluster.cli import main
from pipeline.config import load_config
from pipeline.planner import Selection, plan
from pipeline.runner import run_pipeline
from storage.mirror import mirror_dir
from storage.object_store import DamagedInput
from tests.support.s3_server import make_bucket

# Over 1 MiB (sha256_file reads in 1 MiB blocks), and not one repeated block.
WEIGHTS = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(3 * (1 << 20) // 32))
WEIGHTS_SHA256 = hashlib.sha256(WEIGHTS).hexdigest()
MODEL = "model/model.safetensors"


@pytest.fixture
def url(s3_endpoint, tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("PRETRAIN_MIRROR", str(tmp_path / "mirror"))
    return f"{make_bucket('mirror-trust')}/runs/x"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    path = tmp_path / "experiment.yaml"
    path.write_text(f"name: unit\ndata_dir: {tmp_path / 'data'}\n"
                    "ingest:\n  sources:\n    - path: corpus/*.txt\n")
    return path


def load_stage(spec):
    def stage(ctx):
        if spec.name == "pretrain":
            (ctx.output_dir / "model").mkdir()
            (ctx.output_dir / MODEL).write_bytes(WEIGHTS)
            return {}
        if spec.name == "evaluate":
            return {"weights_sha256": hashlib.sha256((ctx.inputs["pretrain"] / MODEL).read_bytes()).hexdigest()}
        (ctx.output_dir / "out.txt").write_text(spec.name)
        return {}

    return stage


def run(config_file: Path, url: str, **selection):
    cfg = load_config(config_file, [f"workdir={url}"])
    return run_pipeline(cfg, Selection(**selection), echo=lambda *_: None, load_stage=load_stage, use_ray=False)


def evaluated_sha256(config_file: Path, url: str) -> str:
    """What the committed evaluate manifest (in the bucket) says evaluate was fed."""
    from storage.artifact_store import open_store

    cfg = load_config(config_file, [f"workdir={url}"])
    evaluate = next(d for d in plan(cfg) if d.stage == "evaluate")
    return open_store(url).manifest("evaluate", evaluate.fingerprint)["metrics"]["weights_sha256"]


def mirror_weights(config_file: Path, url: str) -> Path:
    cfg = load_config(config_file, [f"workdir={url}"])
    pretrain = next(d for d in plan(cfg) if d.stage == "pretrain")
    return mirror_dir(url) / "pretrain" / pretrain.fingerprint / MODEL


def damage(path: Path, *, keep_mtime: bool) -> None:
    """Flip 100 kB in the middle of the file, keeping its size (and, if asked, its mtime)."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 100_000] = bytes(b ^ 0xFF for b in data[middle:middle + 100_000])
    path.write_bytes(bytes(data))
    if keep_mtime:
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size
    assert hashlib.sha256(path.read_bytes()).hexdigest() != WEIGHTS_SHA256


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_changed_mirror_copy_is_downloaded_again_before_a_stage_reads_it(config_file, url):
    run(config_file, url)
    assert evaluated_sha256(config_file, url) == WEIGHTS_SHA256
    weights = mirror_weights(config_file, url)
    assert sha256_of(weights) == WEIGHTS_SHA256  # the committed copy stayed in the mirror

    damage(weights, keep_mtime=False)
    result = run(config_file, url, only=("evaluate",), force=("evaluate",))
    assert result.ran == ["evaluate"]
    assert evaluated_sha256(config_file, url) == WEIGHTS_SHA256
    assert sha256_of(weights) == WEIGHTS_SHA256


def test_run_verify_hashes_a_mirror_copy_whose_mtime_was_put_back(config_file, url, monkeypatch, capsys):
    run(config_file, url)
    weights = mirror_weights(config_file, url)
    damage(weights, keep_mtime=True)  # size and mtime as recorded: only its bytes tell
    # The real CLI (argument parsing, --verify), with the plain stage functions above.
    monkeypatch.setattr(runner, "run_pipeline",
                        functools.partial(run_pipeline, load_stage=load_stage, use_ray=False))
    code = main(["run", str(config_file), "-o", f"workdir={url}", "--verify", "--only", "evaluate",
                 "--force", "evaluate"])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    assert "[evaluate] done" in out.out
    assert evaluated_sha256(config_file, url) == WEIGHTS_SHA256
    assert sha256_of(weights) == WEIGHTS_SHA256


def test_verify_names_and_removes_a_damaged_mirror_copy_and_the_next_run_fetches_it(config_file, url, capsys):
    run(config_file, url)
    weights = mirror_weights(config_file, url)
    damage(weights, keep_mtime=True)
    capsys.readouterr()
    assert main(["verify", url]) == 0  # the run itself (the bucket) is intact
    out = capsys.readouterr().out
    assert f"[pretrain] warning: this machine's copy {weights} of {url}/pretrain/" in out, out
    assert f"/{MODEL} had other bytes than the manifest's" in out, out
    assert "ok (1 local copy removed)" in out, out
    assert not weights.exists()
    run(config_file, url, only=("evaluate",), force=("evaluate",))
    assert evaluated_sha256(config_file, url) == WEIGHTS_SHA256
    assert sha256_of(weights) == WEIGHTS_SHA256


def test_an_object_with_other_bytes_than_its_manifest_is_refused_when_fetched(config_file, url, monkeypatch,
                                                                             capsys):
    import boto3

    run(config_file, url)
    weights = mirror_weights(config_file, url)
    weights.unlink()  # another machine: the weights come from the bucket
    bucket, _, prefix = url[len("s3://"):].partition("/")
    rel = weights.relative_to(mirror_dir(url)).as_posix()
    damaged = bytearray(WEIGHTS)
    damaged[1 << 20] ^= 0xFF  # one byte, past the first MiB; same size
    boto3.client("s3").put_object(Bucket=bucket, Key=f"{prefix}/{rel}", Body=bytes(damaged))

    with pytest.raises(DamagedInput, match=rf"{url}/{rel} has other bytes than its manifest says .* "
                                           r"stage 'pretrain' is damaged in the bucket"):
        run(config_file, url, only=("evaluate",), force=("evaluate",))
    assert not weights.exists()  # the refused download left nothing that looks fetched
    assert not list(weights.parent.glob(".*.partial"))

    # What a user sees: one `error:` line naming the object and the fix, exit 2.
    monkeypatch.setattr(runner, "run_pipeline",
                        functools.partial(run_pipeline, load_stage=load_stage, use_ray=False))
    capsys.readouterr()
    code = main(["run", str(config_file), "-o", f"workdir={url}", "--only", "evaluate", "--force", "evaluate"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"error: {url}/{rel} has other bytes") and "--verify" in err, err
    assert main(["verify", url]) == 1  # and verify finds it in the bucket
    assert f"[pretrain] damaged: {url}/{rel} has other bytes" in capsys.readouterr().out
