"""`pretrain status` fits the terminal (one line per stage, headline metrics with their
verdicts), --wide and --json hold the rest, a folder of runs gives a line per run;
`plan` warns about a missing data_dir and, like `sweep --plan`, writes nothing;
`pretrain config` prints the key reference."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cluster.cli import main
from pipeline.graph import STAGE_NAMES
from tests.support.synthetic_run import write_run, write_sweep_point
from tests.unit.test_engine import FakeStages, config_file, run  # noqa: F401  (fixture)


def status(capsys, *args: str) -> tuple[int, str]:
    code = main(["status", *args])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("columns", [80, 120])
def test_status_fits_the_terminal_one_line_per_stage(tmp_path, capsys, monkeypatch, columns):
    workdir = write_run(tmp_path / "run")
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out = status(capsys, str(workdir))
    lines = out.splitlines()
    assert code == 0 and max(len(line) for line in lines) <= columns, out
    assert lines[0] == f"{workdir}: done, 7s"
    assert [line.split()[0] for line in lines[3:]] == list(STAGE_NAMES)  # no wrapped rows
    rows = {line.split()[0]: line for line in lines[3:]}
    assert "val_loss=6.83  final_loss=6.77" in rows["pretrain"]
    assert "2 above, 3 ≈ chance, 1 below baseline" in rows["evaluate"]  # the report's verdicts
    if columns == 120:
        assert "best wikitext2/bits_per_byte=2.105 (baseline 8)" in rows["evaluate"]
        assert "train_tokens=121,216  validation_tokens=3,776" in rows["dataset"]


def test_wide_shows_every_key_metric_and_json_every_metric(tmp_path, capsys, monkeypatch):
    workdir = write_run(tmp_path / "run", fail="finetune")
    monkeypatch.setenv("COLUMNS", "80")
    code, out = status(capsys, str(workdir), "--wide")
    assert code == 0 and out.splitlines()[0].startswith(f"{workdir}: failed (finetune), ")
    assert max(len(line) for line in out.splitlines()) > 80  # not cut
    assert "tokens_per_second=1.931e+04" in out

    code, out = status(capsys, str(workdir), "--json")
    data = json.loads(out)
    assert code == 0 and data["state"] == "failed" and data["describe"] == "failed (finetune)"
    stages = {s["stage"]: s for s in data["stages"]}
    assert stages["pretrain"]["metrics"]["resumed_from_step"] == 0  # every metric, not the headline
    assert stages["finetune"]["error"].startswith("RuntimeError: CUDA <out> of memory")
    assert stages["evaluate"]["state"] == "not run" and data["wall_seconds"] == 4.0


def test_a_folder_of_runs_gives_one_line_per_run_with_its_state(tmp_path, capsys, monkeypatch):
    write_run(tmp_path / "runs" / "full", name="full")
    write_run(tmp_path / "runs" / "only", name="only", stop_before="finetune", selected=["ingest", "pretrain"])
    sweep = tmp_path / "runs" / "lr-sweep"
    write_sweep_point(sweep, "lr-1e-3", sweep="lr-sweep", name="a")
    index = json.loads((sweep / "sweep.json").read_text())
    index["points"].append({"name": "lr-3e-3", "overrides": {}, "workdir": "lr-3e-3"})  # not started
    (sweep / "sweep.json").write_text(json.dumps(index))
    monkeypatch.setenv("COLUMNS", "80")

    code, out = status(capsys, str(tmp_path / "runs"))
    lines = out.splitlines()
    assert code == 0 and max(len(line) for line in lines) <= 80, out
    assert lines[0].startswith("4 runs (3 done, 1 never run) under ")  # cut at 80 columns
    rows = {line.split()[0]: line.split() for line in lines[3:]}
    assert rows["only"][1:3] == ["done", "2/2"] and rows["full"][1:3] == ["done", "7/7"]
    assert rows["lr-sweep/lr-1e-3"][1] == "done" and rows["lr-sweep/lr-3e-3"][1:3] == ["never", "run"]

    code, out = status(capsys, str(sweep))
    assert out.splitlines()[0].startswith("sweep lr-sweep: 2 points (1 done, 1 never run)")
    code, out = status(capsys, str(tmp_path / "runs"), "--json")
    runs = {Path(r["run_dir"]).name: r for r in json.loads(out)["runs"]}
    assert runs["only"]["describe"] == "done (finetune, evaluate, report not selected)"
    assert runs["lr-3e-3"]["state"] == "never run"
    assert main(["status", str(tmp_path / "empty-folder-that-is-missing")]) == 2


def tree(root: Path) -> dict[str, int]:
    """Every file and folder under `root` with its size and modification time."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            info = path.lstat()  # latest/<stage> links may point at folders not written yet
            found[str(path.relative_to(root))] = (info.st_size, info.st_mtime_ns)
    return found


def test_plan_warns_about_a_missing_data_dir_and_writes_nothing(config_file, capsys):
    workdir = config_file.parent / "work"
    (config_file.parent / "data" / "corpus").mkdir()
    (config_file.parent / "data" / "corpus" / "a.txt").write_text("some text\n")  # hashed, cached
    run(config_file, FakeStages(), only=("ingest", "tokenizer"))  # a run there already
    # Changed since: a plan hashes it anew, and must not save that in the hash cache.
    (config_file.parent / "data" / "corpus" / "a.txt").write_text("other text\n")
    before = tree(config_file.parent)
    assert (workdir / ".cache" / "input-hashes.json").is_file()

    missing = config_file.parent / "no-data"
    assert main(["plan", str(config_file), "-o", f"data_dir={missing}", "-o", "seed=3"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0].startswith(f"warning: data_dir {missing} does not exist (stages ingest, ")
    assert f"workdir {workdir} (last run: done (dataset, pretrain, finetune, evaluate, report not selected))" \
        in captured.out
    assert main(["sweep", str(config_file), "--plan", "-o", "seed=[4,5]", "-o", f"data_dir={missing}"]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("warning: data_dir") == 1 and "2 points" in captured.out
    assert main(["plan", str(config_file), "-o", "pretrain.lr=0.002"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert tree(config_file.parent) == before  # no hash cache, index, point folder or store


def test_config_prints_the_key_reference_whole_or_one_section(capsys):
    assert main(["config"]) == 0
    whole = capsys.readouterr().out
    assert whole.startswith("name ") and "pretrain.lr " in whole and "ingest.sources[].path " in whole
    assert main(["config", "ray"]) == 0
    section = capsys.readouterr().out
    keys = [line.split()[0] for line in section.splitlines() if not line.startswith(" ")]
    assert keys == ["ray.address", "ray.num_cpus"] and "    CPUs for the embedded local Ray" in section
    assert main(["config", "pretrian"]) == 2
    assert "error: no config section or key 'pretrian'; did you mean 'pretrain'?" in capsys.readouterr().err


def test_finetune_headline_is_each_tasks_first_score_with_its_verdict():
    from pipeline.status import headline

    metrics = {"sst2/accuracy": 0.51, "sst2/accuracy_baseline": 0.509, "sst2/accuracy_ci95_low": 0.476,
               "sst2/accuracy_ci95_high": 0.542, "sst2/train_examples": 256, "mrpc/f1": 0.8,
               "mrpc/accuracy": 0.7, "cola/matthews_corrcoef": 0.1, "stsb/pearson": 0.2}
    assert headline("finetune", metrics) == ["sst2/accuracy=0.51 ≈ chance", "mrpc/f1=0.8",
                                             "cola/matthews_corrcoef=0.1", "+1 tasks"]


def test_evaluate_headline_counts_verdicts_and_sets_unreliable_tasks_apart(tmp_path):
    from pipeline.status import headline

    workdir = write_run(tmp_path / "run")
    (manifest,) = workdir.glob("evaluate/*/manifest.json")
    metrics = json.loads(manifest.read_text())["metrics"]
    metrics["sst2/num_truncated"] = 150  # of 200 prompts cut: the report marks sst2 unreliable
    assert headline("evaluate", metrics) == ["2 above, 3 ≈ chance, 0 below baseline", "1 unreliable (prompts cut)",
                                             "best wikitext2/bits_per_byte=2.105 (baseline 8)"]
