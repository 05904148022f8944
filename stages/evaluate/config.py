"""The `evaluate` section: which zero- and few-shot tasks score the pretrained model.

Light on purpose (pydantic and the spec loader, no torch): the engine imports it to
validate an experiment file, and `plan` reads the task specs to fingerprint their files.
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from stages.evaluate.spec import builtin_task_names, check_task_list, resolve_task_spec
from stages.section import Section


class EvaluateConfig(Section):
    tasks: list[str] = Field(
        default_factory=list,
        description="evaluation tasks, each a built-in name (" + ", ".join(builtin_task_names())
        + ") or the path of a task spec YAML (stages/evaluate/tasks/*.yaml show the format); "
        "empty = the stage does nothing")
    shots: int | dict[str, int] = Field(
        0, description="demonstrations in each prompt: one number for every task, or a mapping "
        "task -> shots (tasks not named get 0); perplexity tasks take none")
    seed: int = Field(
        1234, description="seed for drawing the demonstrations and the max_examples subset "
        "(lm-evaluation-harness's default fewshot seed, so k-shot prompts match it)")
    max_examples: int | None = Field(
        None, ge=1, description="score a seeded subset of this many examples per task; null = all")
    batch_size: int = Field(16, ge=1, description="rows per forward pass on each worker")
    num_workers: int = Field(
        1, ge=1, description="Ray tasks that split every task's examples between them (data "
        "parallel); results are merged in example order, so the numbers do not depend on it")
    cpus_per_worker: int = Field(1, ge=1, description="CPU threads each worker's torch uses")
    gpus_per_worker: float = Field(0, ge=0, description="GPUs per worker (0: CPU)")
    snapshots: bool = Field(
        False, description="also score every intermediate model the pretrain stage kept "
        "(pretrain.snapshot_every) on the same prompts, in the driver: snapshots.json and the "
        "report's scores-against-training-tokens plots")
    max_length: int | None = Field(
        None, ge=8, description="context in tokens; prompts longer than it are cut from the left "
        "(counted as num_truncated); null = the model's max_seq_len (T5: 512)")

    @field_validator("tasks")
    @classmethod
    def _tasks_resolve(cls, tasks: list[str]) -> list[str]:
        return check_task_list(tasks)

    @model_validator(mode="after")
    def _shots_name_listed_tasks(self) -> "EvaluateConfig":
        if isinstance(self.shots, dict):
            names = {resolve_task_spec(t).name for t in self.tasks} | set(self.tasks)
            unknown = sorted(set(self.shots) - names)
            if unknown:
                raise ValueError(f"shots names tasks that are not in evaluate.tasks: {', '.join(unknown)}")
            if any(k < 0 for k in self.shots.values()):
                raise ValueError("shots must be >= 0")
        elif self.shots < 0:
            raise ValueError("shots must be >= 0")
        return self

    def shots_for(self, task: str, spec_name: str) -> int:
        if isinstance(self.shots, int):
            return self.shots
        return self.shots.get(task, self.shots.get(spec_name, 0))
