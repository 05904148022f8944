"""A Ray task whose worker dies (SIGKILL, as an out-of-memory kill ends it) is resubmitted a
bounded number of times, then fails its stage with one line saying which task and what
happened, instead of being retried forever (Ray retries an out-of-memory kill of any task
with max_retries above 0 without limit)."""

from __future__ import annotations

import pytest

from pipeline.config import load_config
from pipeline.planner import Selection
from pipeline.runner import StageFailed, run_pipeline
from stages.ray_tasks import SYSTEM_RETRIES, RayTaskFailed, describe_failure, map_tasks, ray_is_up
from tests.support.ray_task_faults import killed_worker, square


@pytest.mark.ray
def test_a_killed_worker_fails_the_stage_after_bounded_retries(ray_session, tmp_path):
    """Through the engine, as `pretrain run` runs a stage: its StageFailed is the CLI's
    `error:` line."""
    assert ray_is_up()
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    config_file = tmp_path / "experiment.yaml"
    config_file.write_text(f"name: unit\nworkdir: {tmp_path / 'runs'}\ndata_dir: {tmp_path}\n"
                           "ingest:\n  sources:\n    - path: corpus/*.txt\n")

    def load_stage(spec):
        return lambda ctx: map_tasks(killed_worker, [str(attempts)], desc=f"[{spec.name}] workers")

    with pytest.raises(StageFailed) as failed:
        run_pipeline(load_config(config_file), Selection(), echo=lambda *_: None, load_stage=load_stage,
                     use_ray=False)
    message = str(failed.value)
    assert message.startswith("stage 'ingest' failed: RayTaskFailed: Ray task killed_worker (1 of 1, [ingest] "
                              "workers): its worker process died, 3 times (WorkerCrashedError: "), message
    assert "\n" not in message
    assert len(list(attempts.iterdir())) == 1 + SYSTEM_RETRIES  # the first attempt and two retries
    assert map_tasks(square, [1, 2, 3], desc="[evaluate] workers") == [1, 4, 9]  # Ray still serves


def test_an_out_of_memory_kill_says_what_ran_out_and_where():
    ray = pytest.importorskip("ray")
    failure = ray.exceptions.OutOfMemoryError(
        "Task was killed due to the node running low on memory.\nMemory on the node (IP: 10.0.0.1) ...")
    message = describe_failure(failure, "answer_share", 1, 2, "[evaluate] workers", 3)
    assert message.startswith("Ray task answer_share (2 of 2, [evaluate] workers) ran out of memory: Ray's memory "
                              "monitor killed its worker, 3 times (OutOfMemoryError: Task was killed due to the "
                              "node running low on memory.)"), message
