"""The `pretrain` command: run, plan, status, config.

Exit codes: 0 success, 1 a stage failed, 2 a usage or config mistake.

These are the engine's commands (and `generate`, pipeline/cli_generate.py);
`python -m pipeline.cli` runs them. The packages above the engine add theirs as a
CommandGroup: `sweep` (sweep/cli.py), `report` and `dashboard` (views/cli.py), and the
cluster commands (`submit`, `jobs`, `logs`, `stop`); the installed `pretrain`
(cluster/cli.py) gathers them all. The engine never imports those packages
(`cluster -> sweep -> views -> pipeline -> stages`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline import cli_generate
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
    exit code, or None when the command is not one of its own (it sees every command
    first: `sweep`'s takes `plan` of a config with a sweep: section). `before`: the
    engine command they are listed before in `pretrain --help` (None: at the end)."""

    add_commands: Callable[[argparse._SubParsersAction], None]
    dispatch: Callable[[argparse.Namespace], int | None]
    before: str | None = None


def build_parser(extra_commands: Sequence[CommandGroup] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pretrain", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=VersionAction)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, add_command in ENGINE_COMMANDS:
        for group in extra_commands:
            if group.before == name:
                group.add_commands(commands)
        add_command(commands)
    for group in extra_commands:
        if group.before is None:
            group.add_commands(commands)
    return parser


def add_config_command(commands, name: str, help_text: str) -> argparse.ArgumentParser:
    """A command that takes an experiment YAML and the stage selection (run, plan)."""
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


def _add_run(commands) -> None:
    run = add_config_command(commands, "run", "run every stage that is not cached")
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


def _add_plan(commands) -> None:
    add_config_command(commands, "plan", "show what would run, what is cached, and why (starts nothing); "
                                         "on a sweep, which stage outputs its points share")


def _add_status(commands) -> None:
    status = commands.add_parser(
        "status", help="a run's state and one line per stage (headline metrics, cut to the terminal's "
                       "width); a folder of runs (a sweep's root, runs/): one line per run")
    status.add_argument("run_dir", help="the experiment's workdir, e.g. runs/demo; or a folder of runs")
    status.add_argument("--wide", action="store_true",
                        help="every key metric (scores with intervals and baselines), lines not cut")
    status.add_argument("--json", action="store_true",
                        help="machine-readable: the run's state and every stage's state and metrics")


def _add_config(commands) -> None:
    reference = commands.add_parser("config", help="print the config key reference: every key, "
                                                   "its default and meaning")
    reference.add_argument("section", nargs="?",
                           help="only this section (or key prefix), e.g. pretrain or pretrain.model")


def _add_verify(commands) -> None:
    verify = commands.add_parser(
        "verify", help="compare every output file of a run directory with its manifest (size, sha256)")
    verify.add_argument("run_dir", help="the experiment's workdir, e.g. runs/demo")
    verify.add_argument("--stage", action="append", choices=STAGE_NAMES, metavar="STAGE",
                        help="check only this stage (repeatable)")


# In `pretrain --help` order; a CommandGroup's `before` names one of these.
ENGINE_COMMANDS = (("run", _add_run), ("plan", _add_plan), ("status", _add_status),
                   ("config", _add_config), ("verify", _add_verify),
                   ("generate", cli_generate.add_commands))


def main(argv: list[str] | None = None, extra_commands: Sequence[CommandGroup] = ()) -> int:
    args = build_parser(extra_commands).parse_args(argv)
    try:
        for dispatch in (cli_generate.dispatch, *(group.dispatch for group in extra_commands)):
            if (exit_code := dispatch(args)) is not None:
                return exit_code
        if args.command == "status":
            return _status(args)
        if args.command == "config":
            return _config_reference(args.section)
        if args.command == "verify":
            from pipeline.verify import verify_run

            return verify_run(_run_location(args.run_dir), args.stage)
        cfg = load_config(args.config, args.override)
        if args.command == "plan" and cfg.sweep is not None:  # `pretrain plan` passes it to sweep/cli.py
            raise ConfigError(f"{args.config} has a sweep: section; `pretrain plan` plans sweeps "
                              "(the engine's own commands plan one experiment)")
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
