"""The installed `pretrain` command (pyproject.toml's [project.scripts]): the engine's
commands (`pipeline.cli`: run, plan, status, config, verify, generate), `sweep`
(sweep/cli.py), `report` and `dashboard` (views/cli.py), plus the ones that use a Ray
cluster:

    pretrain submit    CONFIG --address http://HEAD:8265 [-o KEY=VALUE] [--follow]
    pretrain submit    CONFIG --address URL -o pretrain.lr=[1e-3,3e-3] [--max-concurrent N]   # a sweep
    pretrain jobs      --address URL  |  logs JOB --address URL  |  stop JOB --address URL

A config with a `sweep:` section, or an -o axis (a list value, as for `pretrain sweep`),
is submitted as one job running `pretrain sweep` on the cluster; every point is validated
before anything is sent.

It lives here, in the top layer (`cluster -> sweep -> views -> pipeline -> stages`),
because the engine imports none of the packages above it: this module hands their
commands to `pipeline.cli.main`. `python -m cluster.cli` is `pretrain` without the
install (a submitted sweep runs it on the head node).
Exit codes follow `pretrain run`: 0 done, 1 failed (a job that failed, an unreachable
cluster), 2 a usage mistake (a local workdir for a remote cluster, a bad sweep point).
The rest of the cluster package is imported only when one of these commands runs (it
pulls in Ray's SDK).
"""

from __future__ import annotations

import argparse
import sys

from pipeline import cli as engine_cli
from sweep.cli import SWEEP_COMMANDS
from views.cli import VIEW_COMMANDS

COMMANDS = ("submit", "jobs", "logs", "stop")


def main(argv: list[str] | None = None) -> int:
    return engine_cli.main(argv, extra_commands=[SWEEP_COMMANDS, VIEW_COMMANDS, CLUSTER_COMMANDS])


def add_commands(subparsers) -> None:
    submit = subparsers.add_parser("submit", help="run the pipeline as a Ray Job on a cluster")
    submit.add_argument("config", help="experiment YAML inside this project, e.g. configs/demo.yaml")
    _address(submit)
    submit.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key (repeatable), as for `pretrain run`; a list value "
                             "is a sweep axis, as for `pretrain sweep` (-o pretrain.lr=[1e-3,3e-3])")
    submit.add_argument("--max-concurrent", type=int, metavar="N",
                        help="for a sweep: points running at once on the cluster (default "
                             "sweep.max_concurrent, else as many as the cluster's CPUs hold)")
    submit.add_argument("--follow", action="store_true",
                        help="stream the job's logs until it ends; exit 0 only if it succeeded")
    submit.add_argument("--force-local-workdir", action="store_true",
                        help="submit even though the workdir looks local to this machine")
    submit.add_argument("--env", action="append", default=[], metavar="NAME",
                        help="also pass this environment variable to the job (repeatable; value never shown)")

    jobs = subparsers.add_parser("jobs", help="list the Ray Jobs of a cluster")
    _address(jobs)
    for name, help_text in (("logs", "print a job's logs"), ("stop", "stop a running job")):
        sub = subparsers.add_parser(name, help=help_text)
        sub.add_argument("job_id", metavar="JOB", help="the job id `pretrain submit` printed")
        _address(sub)
        if name == "logs":
            sub.add_argument("--follow", action="store_true", help="keep streaming until the job ends")


def _address(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", required=True, metavar="URL",
                        help="the Ray dashboard of the cluster's head, e.g. http://HEAD:8265")


def dispatch(args: argparse.Namespace) -> int | None:
    if getattr(args, "command", None) not in COMMANDS:
        return None
    from cluster.errors import ClusterError
    from pipeline.config import ConfigError

    try:
        return _run_cluster_command(args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ClusterError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130


CLUSTER_COMMANDS = engine_cli.CommandGroup(add_commands=add_commands, dispatch=dispatch)


def _run_cluster_command(args) -> int:
    from cluster import jobs
    from cluster.submit import Submission, submit
    from pipeline.status import format_table

    if args.command == "submit":
        job_id = submit(Submission(args.config, args.address, args.override,
                                   args.force_local_workdir, args.env, args.max_concurrent))
        print(job_id)
        if not args.follow:
            print(f"follow it: pretrain logs {job_id} --address {args.address} --follow")
            return 0
        return _report_final(job_id, jobs.follow(args.address, job_id))
    if args.command == "jobs":
        rows = jobs.list_jobs(args.address)
        columns = ["job", "status", "experiment", "start", "end", "message"]
        print(format_table(columns, [[r[c] for c in columns] for r in rows]) if rows else "no jobs")
        return 0
    if args.command == "logs":
        if args.follow:
            return _report_final(args.job_id, jobs.follow(args.address, args.job_id))
        print(jobs.job_logs(args.address, args.job_id), end="")
        return 0
    stopped = jobs.stop_job(args.address, args.job_id)
    print(f"stop requested for {args.job_id}" if stopped else f"{args.job_id} had already ended")
    return 0


def _report_final(job_id: str, status: str) -> int:
    print(f"job {job_id}: {status}", file=sys.stderr if status != "SUCCEEDED" else sys.stdout)
    return 0 if status == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
