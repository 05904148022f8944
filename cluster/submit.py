"""`pretrain submit CONFIG --address http://HEAD:8265`: the same driver, as a Ray Job.

The job runs `python -m pipeline.cli run CONFIG ...` on the head node, in a copy of
this project (the runtime_env's working_dir). Paths are resolved here, before
submitting: in the job, the working directory is that temporary copy, so a relative
workdir would vanish with it.

A sweep (a config with a `sweep:` section, or a `-o key=[v1,v2]` axis) is submitted as
one job running `python -m cluster.cli sweep CONFIG ...`: its driver and every point
join the job's cluster (ray.address=auto), and the workdir is the sweep root. Every
point is validated here first, so a bad point is refused before anything is sent.

Secrets (WANDB_API_KEY, ...) travel as runtime_env env_vars taken from the caller's
environment; only their names are ever printed. Ray keeps the runtime_env in its job
table (visible on the Ray dashboard), so protect the dashboard as you would the key.
"""

from __future__ import annotations

import os
import secrets
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from cluster.connection import connect, dashboard_url, is_local_address
from cluster.errors import ClusterError
from cluster.resources import check_fits, required_resources
from storage.mounts import is_shared_storage
from storage.urls import is_url

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# Never uploaded: the local virtualenv (the cluster has its own), outputs, VCS history.
UPLOAD_EXCLUDES = [".venv", "runs", "reports", ".git", ".pytest_cache", "**/__pycache__",
                   "*.egg-info", "wandb", "build"]
# Passed from the caller's environment when set there (values never printed).
PASSED_ENV_VARS = ("WANDB_API_KEY", "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_MODE", "WANDB_BASE_URL",
                   "HF_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                   "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                   "GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "DATA_DIR")


@dataclass
class Submission:
    config: str
    address: str
    overrides: list[str] = field(default_factory=list)
    force_local_workdir: bool = False
    extra_env: list[str] = field(default_factory=list)  # more variable names to pass
    max_concurrent: int | None = None  # a sweep's points running at once (`pretrain sweep --max-concurrent`)


@dataclass
class PreparedJob:
    """Everything `submit_job` receives; built without touching the network."""

    entrypoint: str
    runtime_env: dict
    submission_id: str
    metadata: dict
    workdir: str
    passed_env: list[str]
    config: object  # the validated ExperimentConfig for the resource check (a sweep's most demanding point)
    num_points: int | None = None  # a sweep's points; None for one run


def prepare(submission: Submission, environ: dict[str, str] | None = None) -> PreparedJob:
    """Validate the config (every point of a sweep) and the workdir, and build the job (no network)."""
    from pipeline.config import ConfigError, load_config

    environ = dict(os.environ if environ is None else environ)
    config_in_project = _config_in_project(submission.config)
    try:
        sweep = _sweep_or_none(submission)
        cfg = None if sweep else load_config(submission.config, submission.overrides)
    except ConfigError as error:
        raise ClusterError(str(error), exit_code=2) from None
    _check_max_concurrent(submission, sweep)
    if sweep:
        name, workdir, data_cfg = sweep.name, sweep.where, sweep.points[0].config
    else:
        name, data_cfg = cfg.name, cfg
        workdir = cfg.workdir_url or str(cfg.resolved_workdir)
    _check_workdir(workdir, submission)
    # In the job the driver must join the job's own cluster, whatever ray.address says
    # (a sweep's points get these overrides too, so they join it as well).
    overrides = [*submission.overrides, f"workdir={workdir}", "ray.address=auto"]
    # An axis over data_dir keeps its own values: one data_dir override would pin it.
    if not is_url(data_cfg.data_dir) and not (sweep and any("data_dir" in p.overrides for p in sweep.points)):
        overrides.append(f"data_dir={data_cfg.resolved_data_dir}")
    concurrency = ["--max-concurrent", str(submission.max_concurrent)] if submission.max_concurrent else []
    entrypoint = " ".join(shlex.quote(part) for part in [
        # `sweep` is not an engine command: the whole `pretrain` (cluster.cli) runs it.
        "python", "-m", *(("cluster.cli", "sweep") if sweep else ("pipeline.cli", "run")), config_in_project,
        *[arg for override in overrides for arg in ("-o", override)], *concurrency])
    names = [n for n in (*PASSED_ENV_VARS, *submission.extra_env) if n in environ]
    runtime_env = {
        "working_dir": str(PROJECT_ROOT),
        "excludes": UPLOAD_EXCLUDES,
        "env_vars": {"PYTHONUNBUFFERED": "1", **{n: environ[n] for n in names}},
    }
    submission_id = f"pretrain-{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    metadata = {"experiment": name, "config": config_in_project, "workdir": workdir}
    if sweep is None:
        return PreparedJob(entrypoint, runtime_env, submission_id, metadata, workdir, names, cfg)
    metadata.update({"sweep": "true", "points": str(len(sweep.points))})  # Ray keeps strings only
    return PreparedJob(entrypoint, runtime_env, submission_id, metadata, workdir, names,
                       _most_demanding(sweep.points), len(sweep.points))


def _sweep_or_none(submission: Submission):
    """The submission's sweep (sweep.expand.Sweep, every point validated), or None when
    it is one run. A sweep has a `sweep:` section (after -o) or an -o axis, told apart
    as `pretrain sweep` does (sweep.expand.split_overrides: `-o finetune.tasks=[a,b]`
    is one value, `-o finetune.tasks=[[a],[b]]` an axis)."""
    from pipeline.config import load_config
    from sweep.expand import expand_sweep, flatten, split_overrides

    lists = [o for o in submission.overrides if isinstance(_override_value(o), list)]
    base = load_config(submission.config, [o for o in submission.overrides if o not in lists])
    axes, _ = split_overrides(lists, flatten(base.model_dump(mode="json")))
    if base.sweep is None and not axes:
        return None
    return expand_sweep(submission.config, submission.overrides)


def _override_value(override: str):
    """KEY=VALUE's value as load_config reads it (YAML); None when it does not parse
    (load_config then reports it, naming the flag)."""
    from pipeline.config import ConfigError, parse_override

    try:
        return parse_override(override)[1]
    except ConfigError:
        return None


def _most_demanding(points) -> object:
    """The point config that needs the most GPUs, then CPUs: if it fits, every point does."""
    def need(point) -> tuple[float, float]:
        needs = required_resources(point.config)
        return needs.get("GPU", 0.0), needs["CPU"]

    return max(points, key=need).config


def _check_max_concurrent(submission: Submission, sweep) -> None:
    if submission.max_concurrent is None:
        return
    if sweep is None:
        raise ClusterError(
            f"--max-concurrent is for sweeps, and {submission.config} with these overrides is one "
            f"run: add a `sweep:` section or an axis (-o key=[v1,v2]), or drop --max-concurrent",
            exit_code=2)
    if submission.max_concurrent < 1:
        raise ClusterError(f"--max-concurrent {submission.max_concurrent}: give 1 or more", exit_code=2)


def submit(submission: Submission, echo=print) -> str:
    """Submit; returns the job id. Nothing is written locally."""
    job = prepare(submission)
    client = connect(submission.address)
    check_fits(job.config, dashboard_url(submission.address), echo)
    if job.passed_env:
        echo(f"passing environment variables: {', '.join(job.passed_env)} (values not shown)")
    try:
        job_id = client.submit_job(entrypoint=job.entrypoint, runtime_env=job.runtime_env,
                                   submission_id=job.submission_id, metadata=job.metadata)
    except Exception as error:  # noqa: BLE001
        raise ClusterError(f"the cluster at {submission.address} refused the job: "
                           f"{type(error).__name__}: {_without_secrets(str(error), job)}") from None
    if job.num_points:
        echo(f"submitted job {job_id}: a sweep of {job.num_points} points under {job.workdir}")
    else:
        echo(f"submitted job {job_id}: workdir {job.workdir}")
    return job_id


def _config_in_project(config: str) -> str:
    """The config's path relative to the project (it travels inside working_dir)."""
    path = Path(config).resolve()
    if not path.is_file():
        raise ClusterError(f"config file {config} does not exist (try one of configs/*.yaml)", exit_code=2)
    try:
        return str(path.relative_to(PROJECT_ROOT))
    except ValueError:
        raise ClusterError(
            f"config {config} is outside the project {PROJECT_ROOT}; only the project directory "
            f"is uploaded to the cluster: copy the file under {PROJECT_ROOT / 'configs'}", exit_code=2) from None


def _check_workdir(workdir: str, submission: Submission) -> None:
    if is_local_address(submission.address) or is_shared_storage(workdir) or submission.force_local_workdir:
        return
    raise ClusterError(
        f"workdir {workdir} is on this machine's local disk, but the cluster at {submission.address} "
        f"is another machine: its nodes could not read each other's stage outputs. Set a shared "
        f"workdir (an NFS/EFS mount present on every node, e.g. -o workdir=/mnt/shared/runs/NAME), "
        f"or pass --force-local-workdir if that path is shared in a way this check cannot see",
        exit_code=2)


def _without_secrets(text: str, job: PreparedJob) -> str:
    for name in job.passed_env:
        value = job.runtime_env["env_vars"].get(name)
        if value:
            text = text.replace(value, f"<{name}>")
    return text
