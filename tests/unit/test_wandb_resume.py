"""A stage directory keeps its wandb run: reopened (a resumed stage or task) it logs into
the same run id, without re-sending the steps that run holds; another directory, or the
same one emptied by a forced re-run, opens a new run. Runs are grouped by
tracking.wandb.group (a sweep's name) or the experiment name, and tracking keys change no
fingerprint. Offline wandb, read back from the runs' own `.wandb` logs."""

from __future__ import annotations

import struct
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from wandb.proto import wandb_internal_pb2

from pipeline.config import load_config
from pipeline.fingerprint import compute_all
from pipeline.wandb_stage_log import log_stage
from stages.finetune.task_tracking import TaskMetricsLog
from stages.tracking import RUN_ID_FILE, MetricsLog, open_tracker
from storage.local_store import LocalArtifactStore

# The `.wandb` file is a LevelDB-style log: a 7-byte file header (":W&B", magic, version),
# then 32 KiB blocks of records, each with a 7-byte header (crc32, length, type) and a
# piece of a serialized `Record` protobuf; types FULL=1, FIRST=2, MIDDLE=3, LAST=4.
BLOCK_BYTES, HEADER_BYTES, RECORD_ENDS = 32768, 7, (1, 4)


def read_records(wandb_file: Path) -> list:
    data, records, pending, position = wandb_file.read_bytes(), [], b"", HEADER_BYTES
    assert data[:4] == b":W&B", f"{wandb_file} is not a wandb log"
    while position + HEADER_BYTES <= len(data):
        if BLOCK_BYTES - position % BLOCK_BYTES < HEADER_BYTES:  # block trailer: padding
            position += BLOCK_BYTES - position % BLOCK_BYTES
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + HEADER_BYTES])
        end = position + HEADER_BYTES + length
        if kind == 0 or end > len(data):  # the writer is not done with this record yet
            break
        pending += data[position + HEADER_BYTES:end]
        position = end
        if kind in RECORD_ENDS:
            records.append(wandb_internal_pb2.Record.FromString(pending))
            pending = b""
    return records


def offline_runs(output_dir: Path, timeout: float = 30.0) -> list[dict]:
    """Each offline-run-* folder under output_dir/wandb, oldest first: its run id, group,
    tags, name, whether it asked to resume, and the steps of its history. Waits for each
    log's exit record: wandb-core writes on for a moment after finish() returns."""
    runs = []
    # offline-run-<YYYYmmdd_HHMMSS>-<id>, then -1, -2, ... when a run reopens within the second
    for folder in sorted((Path(output_dir) / "wandb").glob("offline-run-*")):
        (wandb_file,) = folder.glob("run-*.wandb")
        deadline = time.time() + timeout
        records = read_records(wandb_file)
        while not any(r.HasField("exit") for r in records) and time.time() < deadline:
            time.sleep(0.1)
            records = read_records(wandb_file)
        (run,) = [r.run for r in records if r.HasField("run")]
        runs.append({"id": run.run_id, "group": run.run_group, "tags": list(run.tags), "name": run.display_name,
                     "resume": run.resume, "steps": [r.history.step.num for r in records if r.HasField("history")]})
    return runs


def experiment(group: str | None = None, tags: tuple[str, ...] = ()):
    wandb = SimpleNamespace(mode="offline", project="pp-tests", entity=None, group=group, tags=list(tags))
    return SimpleNamespace(name="point-a", tracking=SimpleNamespace(wandb=wandb))


def train(output_dir: Path, steps: range, resume_from_step: int | None = None, stage: str = "pretrain",
          **tracker_options) -> None:
    """What a training stage's rank 0 does with its tracker: open, trim the log to the
    checkpoint it resumes from, log."""
    tracker = open_tracker(experiment=tracker_options.pop("experiment", experiment()), stage=stage,
                           fingerprint="fp0123456789", output_dir=output_dir, **tracker_options)
    if resume_from_step is not None:
        tracker.metrics_log.drop_records_after(resume_from_step)
    for step in steps:
        tracker.log({"loss": 1.0 / step}, step=step)
    tracker.finish()


@pytest.fixture(autouse=True)
def quiet_wandb(monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")


def test_a_resumed_stage_continues_its_run_without_resending_steps(tmp_path):
    train(tmp_path, range(1, 6))              # killed after step 5, last checkpoint at step 3
    train(tmp_path, range(4, 9), resume_from_step=3)
    first, resumed = offline_runs(tmp_path)
    assert (tmp_path / RUN_ID_FILE).read_text().strip() == first["id"] == resumed["id"]
    assert not first["resume"] and resumed["resume"]
    # Steps 4 and 5 were trained again: wandb keeps the first attempt's (a run's steps
    # only go up), metrics.jsonl the second's, each step once.
    assert first["steps"] == [1, 2, 3, 4, 5] and resumed["steps"] == [6, 7, 8]
    assert [r["step"] for r in MetricsLog(tmp_path / "metrics.jsonl").read()] == list(range(1, 9))


def test_another_directory_opens_another_run(tmp_path):
    train(tmp_path / "a", range(1, 3))
    train(tmp_path / "b", range(1, 3))
    (run_a,), (run_b,) = offline_runs(tmp_path / "a"), offline_runs(tmp_path / "b")
    assert run_a["id"] != run_b["id"] and run_b["steps"] == [1, 2]


def test_a_forced_rerun_opens_a_new_run_and_a_resume_does_not(tmp_path):
    store = LocalArtifactStore(tmp_path)
    train(store.prepare("pretrain", "fp0123456789", keep_partial=True), range(1, 3))
    train(store.prepare("pretrain", "fp0123456789", keep_partial=True), range(3, 5))   # a resume
    resumed_ids = {run["id"] for run in offline_runs(store.stage_dir("pretrain", "fp0123456789"))}
    train(store.prepare("pretrain", "fp0123456789", keep_partial=False), range(1, 3))  # --force
    (forced,) = offline_runs(store.stage_dir("pretrain", "fp0123456789"))
    assert len(resumed_ids) == 1 and forced["id"] not in resumed_ids and forced["steps"] == [1, 2]


def test_a_resumed_task_skips_only_its_own_steps(tmp_path):
    """Finetune tasks share metrics.jsonl: a task's run holds its own steps, not another's."""
    rte = TaskMetricsLog(tmp_path / "metrics.jsonl", "rte")
    rte.log({"step": 50, "loss": 0.5})
    for attempt_steps in (range(1, 4), range(3, 6)):  # resumed from its checkpoint at step 2
        train(tmp_path / "sst2", attempt_steps, resume_from_step=attempt_steps.start - 1, stage="finetune", task="sst2",
              metrics_log=TaskMetricsLog(tmp_path / "metrics.jsonl", "sst2"))
    first, resumed = offline_runs(tmp_path / "sst2")
    assert first["id"] == resumed["id"] and resumed["steps"] == [4, 5]
    assert resumed["name"] == "point-a-finetune-sst2-fp012345"


def test_runs_are_grouped_by_the_configured_group_and_tagged(tmp_path):
    train(tmp_path / "sweep", range(1, 2), experiment=experiment(group="lr-sweep", tags=("lr-sweep", "v2")))
    train(tmp_path / "plain", range(1, 2))
    (swept,), (plain,) = offline_runs(tmp_path / "sweep"), offline_runs(tmp_path / "plain")
    assert swept["group"] == "lr-sweep" and swept["name"] == "point-a-pretrain-fp012345"
    assert swept["tags"] == ["pretrain", "fp0123456789", "lr-sweep", "v2"]
    assert plain["group"] == "point-a" and plain["tags"] == ["pretrain", "fp0123456789"]
    # The engine's end-of-stage runs group the same way.
    manifest = {"stage": "tokenizer", "fingerprint": "fp0123456789", "metrics": {"vocab_size": 512}}
    assert log_stage(experiment(group="lr-sweep", tags=("lr-sweep",)), manifest, tmp_path / "tokenizer")
    (stage_run,) = offline_runs(tmp_path / "tokenizer")
    assert stage_run["group"] == "lr-sweep" and stage_run["tags"] == ["tokenizer", "fp0123456789", "lr-sweep"]


def test_tracking_keys_change_no_fingerprint(tmp_path):
    (tmp_path / "data" / "corpus").mkdir(parents=True)
    (tmp_path / "data" / "corpus" / "a.txt").write_text("One book.\n\nTwo paragraphs.\n")
    config = tmp_path / "experiment.yaml"
    config.write_text(f"name: point-a\nworkdir: {tmp_path / 'work'}\ndata_dir: {tmp_path / 'data'}\n"
                      "ingest:\n  sources:\n    - path: corpus/*.txt\n")
    plain = load_config(config)
    swept = load_config(config, ["tracking.wandb.group=lr-sweep", "tracking.wandb.tags=[lr-sweep, v2]",
                                 "tracking.wandb.mode=offline"])
    assert swept.tracking.wandb.group == "lr-sweep" and swept.tracking.wandb.tags == ["lr-sweep", "v2"]
    assert plain.tracking.wandb.group is None and plain.tracking.wandb.tags == []
    assert {stage: fp for stage, (fp, _) in compute_all(plain).items()} == {
        stage: fp for stage, (fp, _) in compute_all(swept).items()}
