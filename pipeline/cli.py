"""The `pretrain` command: run, plan, status, config.

Exit codes: 0 success, 1 a stage failed, 2 a usage or config mistake.

These are the engine's commands (and `report` and `dashboard`, pipeline/cli_runs.py);
`python -m pipeline.cli` runs them. The installed `pretrain` (cluster/cli.py) adds the
cluster commands (`submit`, `jobs`, `logs`, `stop`) as a CommandGroup: the engine never
imports the cluster package (`cluster -> pipeline -> stages`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline import cli_generate, cli_runs
from pipeline.config import ConfigError, load_config, parse_override
from pipeline.graph import STAGE_NAMES
from pipeline.planner import Selection, plan, plan_warnings
from pipeline.run_state import last_run_note
from pipeline.status import format_table, render
from pipeline.version import VersionAction
from storage.urls import is_url


@dataclass(frozen=True)
class CommandGroup:
    """Subcommands that a package above the engine adds to `pretrain`: `add_commands`
    registers them on the subparsers, `dispatch` runs parsed arguments and returns an
    exit code, or None when the command is not one of its own."""

    add_commands: Callable[[argparse._SubParsersAction], None]
    dispatch: Callable[[argparse.Namespace], int | None]


REPORT_COMMANDS = CommandGroup(add_commands=cli_runs.add_commands, dispatch=cli_runs.dispatch)
GENERATE_COMMANDS = CommandGroup(add_commands=cli_generate.add_commands, dispatch=cli_generate.dispatch)


def build_parser(extra_commands: Sequence[CommandGroup] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pretrain", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=VersionAction)
    commands = parser.add_subparsers(dest="command", required=True)

    def config_command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("config", help="experiment YAML, e.g. configs/demo.yaml")
        sub.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config key, e.g. -o pretrain.max_steps=2000 (repeatable)")
        sub.add_argument("--only", action="append", default=[], choices=STAGE_NAMES, metavar="STAGE",
                         help="run only this stage (repeatable); its inputs must be finished")
        sub.add_argument("--from", dest="from_stage", choices=STAGE_NAMES, metavar="STAGE",
                         help="run this stage and everything downstream of it")
        sub.add_argument("--force", nargs="?", const="*", action="append", default=[],
                         metavar="STAGE",
                         help="re-run even if cached: the named stage and its downstream, "
                              "or with no name every selected stage")
        return sub

    run = config_command("run", "run every stage that is not cached")
    run.add_argument("--verify", action="store_true",
                     help="before reusing a finished stage, compare every output file's sha256 with "
                          "its manifest (sizes are always compared); damaged stages are rebuilt")
    run.add_argument("--wait-lock", action="store_true",
                     help="when another run is writing a stage of this workdir, wait for it "
                          "(and reuse what it finished) instead of exiting with an error")
    run.add_argument("--sweep-name", help=argparse.SUPPRESS)  # set by `pretrain sweep` for its points
    run.add_argument("-v", "--verbose", action="store_true",
                     help="print everything Ray, DeepSpeed and torch print, every worker's output "
                          "included (by default they go to Ray's log files, named when Ray starts)")
    config_command("plan", "show what would run, what is cached, and why (starts nothing); "
                           "on a sweep, which stage outputs its points share")
    sweep = commands.add_parser(
        "sweep", help="run one experiment per point of a grid or list of overrides, sharing the "
                      "stages they have in common (see the sweep: section)")
    sweep.add_argument("config", help="experiment YAML, with a sweep: section or -o key=[v1,v2] axes")
    sweep.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                       help="a list value is an axis (-o pretrain.lr=[1e-3,3e-3]), anything else "
                            "applies to every point (repeatable)")
    sweep.add_argument("--max-concurrent", type=int, metavar="N",
                       help="points running at once (default sweep.max_concurrent, else as many as "
                            "the Ray cluster's CPUs hold); 1 runs them one after another")
    sweep.add_argument("--only", action="append", default=[], choices=STAGE_NAMES, metavar="STAGE",
                       help="in every point, run only this stage (repeatable)")
    sweep.add_argument("--from", dest="from_stage", choices=STAGE_NAMES, metavar="STAGE",
                       help="in every point, run this stage and everything downstream of it")
    sweep.add_argument("--plan", action="store_true", help="show the points and the shared stages, run nothing")
    status = commands.add_parser(
        "status", help="a run's state and one line per stage (headline metrics, cut to the terminal's "
                       "width); a folder of runs (a sweep's root, runs/): one line per run")
    status.add_argument("run_dir", help="the experiment's workdir, e.g. runs/demo; or a folder of runs")
    status.add_argument("--wide", action="store_true",
                        help="every key metric (scores with intervals and baselines), lines not cut")
    status.add_argument("--json", action="store_true",
                        help="machine-readable: the run's state and every stage's state and metrics")
    reference = commands.add_parser("config", help="print the config key reference: every key, "
                                                   "its default and meaning")
    reference.add_argument("section", nargs="?",
                           help="only this section (or key prefix), e.g. pretrain or pretrain.model")
    verify = commands.add_parser(
        "verify", help="compare every output file of a run directory with its manifest (size, sha256)")
    verify.add_argument("run_dir", help="the experiment's workdir, e.g. runs/demo")
    verify.add_argument("--stage", action="append", choices=STAGE_NAMES, metavar="STAGE",
                        help="check only this stage (repeatable)")
    for group in (REPORT_COMMANDS, GENERATE_COMMANDS, *extra_commands):
        group.add_commands(commands)
    return parser


def main(argv: list[str] | None = None, extra_commands: Sequence[CommandGroup] = ()) -> int:
    args = build_parser(extra_commands).parse_args(argv)
    for group in (REPORT_COMMANDS, GENERATE_COMMANDS, *extra_commands):
        if (exit_code := group.dispatch(args)) is not None:
            return exit_code
    try:
        if args.command == "status":
            return _status(args)
        if args.command == "config":
            return _config_reference(args.section)
        if args.command == "verify":
            from pipeline.verify import verify_run

            return verify_run(_run_location(args.run_dir), args.stage)
        if args.command == "sweep":
            return _sweep(args)
        cfg = load_config(args.config, args.override)
        if args.command == "plan" and cfg.sweep is not None:
            return _plan_sweep(args.config, args.override,
                               Selection(only=tuple(args.only), from_stage=args.from_stage))
        selection = Selection(only=tuple(args.only), from_stage=args.from_stage,
                              force=tuple(args.force))
        if args.command == "plan":
            decisions = plan(cfg, selection)
            for line in plan_warnings(cfg, decisions):
                print(f"warning: {line}", file=sys.stderr)
            print(f"experiment {cfg.name}: workdir {cfg.workdir_url or cfg.resolved_workdir}"
                  f"{last_run_note(cfg)}")
            print(format_table(["stage", "decision", "fingerprint", "why"],
                               [[d.stage, d.action, d.fingerprint, d.reason] for d in decisions]))
            return 0
        if args.verbose:
            from pipeline.worker_console import set_verbose

            set_verbose(True)
        return _run(cfg, selection, args.config, verify=args.verify, wait_lock=args.wait_lock,
                    sweep=args.sweep_name)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        axes = [o for o in getattr(args, "override", []) if _is_list_value(o)]
        if args.command in ("run", "plan") and axes:
            print(f"hint: to run one experiment per value, sweep them: pretrain sweep {args.config} "
                  + " ".join(f"-o {o}" for o in axes), file=sys.stderr)
        return 2


def _status(args) -> int:
    import json
    import shutil

    from pipeline.status import status_json

    location = _run_location(args.run_dir)
    if args.json:
        print(json.dumps(status_json(location), indent=2, default=str))
        return 0
    # $COLUMNS first (shutil's order), then the terminal; a pipe gets 80 columns.
    print(render(location, width=None if args.wide else shutil.get_terminal_size().columns, wide=args.wide))
    return 0


def _config_reference(section: str | None) -> int:
    import os

    from pipeline.config_reference import text_reference

    try:
        print(text_reference(section), flush=True)
    except BrokenPipeError:  # `pretrain config | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _run_location(run_dir: str) -> Path | str:
    """A run folder as a Path; an object-store URL as it is (a Path would fold its //)."""
    return run_dir if is_url(run_dir) else Path(run_dir)


def _is_list_value(override: str) -> bool:
    try:
        return isinstance(parse_override(override)[1], list)
    except ConfigError:
        return False


def _sweep(args) -> int:
    from pipeline.sweep import expand_sweep
    from pipeline.sweep_run import run_sweep

    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise ConfigError(f"--max-concurrent {args.max_concurrent}: give 1 or more")
    selection = Selection(only=tuple(args.only), from_stage=args.from_stage)
    if args.plan:
        return _plan_sweep(args.config, args.override, selection)
    return run_sweep(expand_sweep(args.config, args.override), selection=selection,
                     max_concurrent=args.max_concurrent)


def _plan_sweep(config: str, overrides: list[str], selection: Selection = Selection()) -> int:
    from pipeline.sweep import expand_sweep
    from pipeline.sweep_run import format_plan, plan_sweep

    sweep = expand_sweep(config, overrides)
    decisions, uses = plan_sweep(sweep, selection)
    warnings = [line for p in sweep.points for line in plan_warnings(p.config, decisions[p.name])]
    for line in dict.fromkeys(warnings):  # once, however many points share the data_dir
        print(f"warning: {line}", file=sys.stderr)
    print(f"sweep {sweep.name}: {len(sweep.points)} points under {sweep.where}, "
          f"stage outputs shared in {sweep.location('store')}")
    print(format_table(["point", "overrides"],
                       [[p.name, ", ".join(f"{k}={v}" for k, v in p.overrides.items())] for p in sweep.points]))
    print(format_table(["stage", "fingerprint", "read by", "decision"], format_plan(sweep, uses)))
    outputs = len(uses)
    print(f"{outputs} stage outputs for {len(sweep.points)} points "
          f"({len(sweep.points) * len(STAGE_NAMES)} if each point ran alone)")
    return 0


def _run(cfg, selection: Selection, config_path: str, *, verify: bool = False,
         wait_lock: bool = False, sweep: str | None = None) -> int:
    from pipeline.interrupts import exit_with_parent, interrupted_exit_code, sigterm_as_ctrl_c
    from pipeline.ray_session import RayStartError
    from pipeline.run_models import format_outputs
    from pipeline.runner import StageFailed, run_pipeline

    exit_with_parent()  # a sweep's point: stop when the sweep driver is gone
    try:
        with sigterm_as_ctrl_c():  # SIGTERM (a scheduler, a sweep driver) stops as Ctrl-C does
            run_pipeline(cfg, selection, config_path=config_path, verify=verify, wait_lock=wait_lock,
                         sweep=sweep)
    except RayStartError as error:
        print(f"error: {error}", file=sys.stderr)
        print(error.hint, file=sys.stderr)
        return 1
    except StageFailed as error:
        print(f"error: {error}", file=sys.stderr)
        print(f"the stage wrote no manifest; fix the cause and run the same command again",
              file=sys.stderr)
        return 1
    except (KeyboardInterrupt, SystemExit):
        # Ctrl-C. Inside Ray Train, stages.training.launch.fit kills the run at once
        # (committed checkpoints stay) and raises KeyboardInterrupt.
        print("interrupted: finished stages and committed checkpoints are kept; "
              "run the same command to resume", file=sys.stderr)
        return interrupted_exit_code()
    print(f"done: `pretrain status {cfg.workdir_url or cfg.resolved_workdir}` for the table")
    for line in format_outputs(cfg.workdir_url or cfg.resolved_workdir):  # report, model/, hf/, ...
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
