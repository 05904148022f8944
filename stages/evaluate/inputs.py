"""The files the evaluate stage reads: every task's spec YAML and its data files.

    input_files(experiment)   # {"evaluate.tasks/piqa.yaml": ".../tasks/piqa.yaml",
                              #  "eval/piqa/valid.jsonl": "/data/eval/piqa/valid.jsonl", ...}

Their contents join the stage's fingerprint, so editing a built-in spec, a user's spec or
a data file re-runs the stage, while moving data_dir with the same bytes does not.
"""

from __future__ import annotations

from pathlib import Path

from stages.evaluate.spec import builtin_spec_path, resolve_task_spec
from storage.file_tree import local_tree

SPEC_PREFIX = "evaluate.tasks"


def spec_path(task: str) -> Path:
    if task.endswith((".yaml", ".yml")) or "/" in task:
        return Path(task).expanduser()
    return builtin_spec_path(task)


def task_files(tasks: list[str], data_dir: Path, prefix: str = SPEC_PREFIX) -> dict[str, str]:
    """Each task's spec file (named `prefix/<file>`) and its data files (relative to data_dir)."""
    files: dict[str, str] = {}
    for task in tasks:
        path = spec_path(task)
        files[f"{prefix}/{task if '/' in task else path.name}"] = str(path)
        for split in resolve_task_spec(task).splits.values():
            aligned = [str(Path(split.path).parent / name) for name in split.aligned.values()]
            for relative in (split.path, split.labels, *aligned):
                if relative and (Path(data_dir) / relative).is_dir():  # a folder of Parquet shards
                    files.update(local_tree(Path(data_dir) / relative, relative))
                elif relative:
                    files[relative] = str(Path(data_dir) / relative)
    return files


def input_files(experiment) -> dict[str, str]:
    return task_files(experiment.evaluate.tasks, experiment.resolved_data_dir)
