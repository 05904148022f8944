"""The `pretrain` subcommands for reading runs:

    pretrain report    RUN_DIR [RUN_DIR...] [-o DIR]     compare runs (HTML + Markdown)
    pretrain report    ROOT [-o DIR]                     every run under ROOT: sweep.html, sweep.md
    pretrain dashboard RUN_DIR [RUN_DIR...] [--port N]   serve the live report on 127.0.0.1
    pretrain dashboard ROOT [--port N]                   every run under ROOT, live, in one table

ROOT is one folder that is not a run itself but holds runs (a sweep's root, runs/).

`pipeline.cli` registers them with `add_commands` (listed before `generate`) and hands
parsed arguments to `dispatch`, which returns an exit code (None: not one of these
commands); the installed `pretrain` (cluster/cli.py) passes VIEW_COMMANDS to it. Exit codes
follow `pretrain run`: 0 done, 2 a usage mistake (a RUN_DIR that is not a run, a port in use).
"""

from __future__ import annotations

import argparse
import sys
from storage.urls import is_url

from pipeline.cli import CommandGroup

COMMANDS = ("report", "dashboard")


def add_commands(subparsers) -> None:
    report = subparsers.add_parser("report", help="compare runs side by side (HTML + Markdown)")
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="run directories, e.g. runs/demo; or one folder of runs (a sweep's root) "
                             "for a table of every run under it")
    report.add_argument("-o", "--output", metavar="DIR",
                        help="where to write report.html and report.md (default reports/compare-<names>); "
                             "for a folder of runs, sweep.html and sweep.md (default: that folder)")

    dashboard = subparsers.add_parser("dashboard", help="serve the live HTML report of runs on 127.0.0.1")
    dashboard.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                           help="run directories; or one folder of runs (a sweep's root): every run "
                                "under it in one sortable table, updated live")
    dashboard.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0 = any free)")
    dashboard.add_argument("--host", default="127.0.0.1",
                           help="interface to listen on (default 127.0.0.1: this machine only)")


def dispatch(args: argparse.Namespace) -> int | None:
    if getattr(args, "command", None) not in COMMANDS:
        return None
    from pipeline.config import ConfigError

    try:
        if args.command == "report":
            return _report(args)
        return _dashboard(args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


VIEW_COMMANDS = CommandGroup(add_commands=add_commands, dispatch=dispatch, before="generate")


def _report(args) -> int:
    from views.compare import write_comparison
    from pipeline.run_discovery import bucket_sweep_points, is_runs_root

    if len(args.run_dirs) == 1 and is_url(args.run_dirs[0]):
        points = bucket_sweep_points(args.run_dirs[0])
        if points is not None:  # a sweep's root in a bucket: its points, as sweep.json names them
            return _report_bucket_sweep(args.run_dirs[0], points, args.output)
    if is_runs_root(args.run_dirs):
        from views.runs_report import write_runs_report

        html_path, markdown_path = write_runs_report(args.run_dirs[0], args.output)
        print(f"wrote {html_path} and {markdown_path}")
        return 0
    output_dir = write_comparison(args.run_dirs, args.output)
    print(f"wrote {output_dir / 'report.html'} and {output_dir / 'report.md'}")
    return 0


def _report_bucket_sweep(url: str, points: list[str], output: str | None) -> int:
    """sweep.html and sweep.md of a bucket sweep: into `output`, or into this machine's
    mirror of the root and uploaded beside sweep.json (where `pretrain sweep` puts them)."""
    from storage.mirror import mirror_dir
    from storage.object_keys import put_files
    from storage.urls import join
    from views.runs_report import write_runs_report

    html_path, markdown_path = write_runs_report(url, output or mirror_dir(url), run_dirs=points)
    if output:
        print(f"wrote {html_path} and {markdown_path}")
        return 0
    put_files(url, html_path.parent, [html_path.name, markdown_path.name])
    print(f"wrote {join(url, html_path.name)} and {join(url, markdown_path.name)}")
    return 0


def _dashboard(args) -> int:
    from views.dashboard import serve

    try:
        return serve(args.run_dirs, args.host, args.port)
    except OSError as error:
        print(f"error: cannot listen on {args.host}:{args.port} ({error.strerror or error}); "
              f"pass another --port", file=sys.stderr)
        return 2
