"""The `pretrain` subcommands for reading runs and using a cluster:

    pretrain report    RUN_DIR [RUN_DIR...] [-o DIR]     compare runs (HTML + Markdown)
    pretrain dashboard RUN_DIR [RUN_DIR...] [--port N]   serve the live report on 127.0.0.1
    pretrain submit    CONFIG --address http://HEAD:8265 [-o KEY=VALUE] [--follow]
    pretrain jobs      --address URL  |  logs JOB --address URL  |  stop JOB --address URL

`pipeline.cli` registers them with `add_commands` and hands parsed arguments to
`dispatch`, which returns an exit code (None: not one of these commands). Exit codes
follow `pretrain run`: 0 done, 1 failed (a job that failed, an unreachable cluster),
2 a usage mistake (a RUN_DIR that is not a run, a local workdir for a remote cluster).
The cluster package is imported only by the cluster commands (it pulls in Ray's SDK).
"""

from __future__ import annotations

import argparse
import sys

COMMANDS = ("report", "dashboard", "submit", "jobs", "logs", "stop")


def add_commands(subparsers) -> None:
    report = subparsers.add_parser("report", help="compare runs side by side (HTML + Markdown)")
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories, e.g. runs/demo")
    report.add_argument("-o", "--output", metavar="DIR",
                        help="where to write report.html and report.md (default reports/compare-<names>)")

    dashboard = subparsers.add_parser("dashboard", help="serve the live HTML report of runs on 127.0.0.1")
    dashboard.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    dashboard.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0 = any free)")
    dashboard.add_argument("--host", default="127.0.0.1",
                           help="interface to listen on (default 127.0.0.1: this machine only)")

    submit = subparsers.add_parser("submit", help="run the pipeline as a Ray Job on a cluster")
    submit.add_argument("config", help="experiment YAML inside this project, e.g. configs/demo.yaml")
    _address(submit)
    submit.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key (repeatable), as for `pretrain run`")
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
    from pipeline.config import ConfigError

    try:
        if args.command == "report":
            return _report(args)
        if args.command == "dashboard":
            return _dashboard(args)
        return _cluster_command(args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _report(args) -> int:
    from pipeline.compare import write_comparison

    output_dir = write_comparison(args.run_dirs, args.output)
    print(f"wrote {output_dir / 'report.html'} and {output_dir / 'report.md'}")
    return 0


def _dashboard(args) -> int:
    from pipeline.dashboard import serve

    try:
        return serve(args.run_dirs, args.host, args.port)
    except OSError as error:
        print(f"error: cannot listen on {args.host}:{args.port} ({error.strerror or error}); "
              f"pass another --port", file=sys.stderr)
        return 2


def _cluster_command(args) -> int:
    from cluster.errors import ClusterError

    try:
        return _run_cluster_command(args)
    except ClusterError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130


def _run_cluster_command(args) -> int:
    from cluster import jobs
    from cluster.submit import Submission, submit
    from pipeline.status import format_table

    if args.command == "submit":
        job_id = submit(Submission(args.config, args.address, args.override,
                                   args.force_local_workdir, args.env))
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
