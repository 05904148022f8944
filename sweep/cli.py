"""The `pretrain sweep` command, and `pretrain plan` of a config with a sweep: section:

    pretrain sweep CONFIG [-o KEY=[V1,V2]] [--max-concurrent N] [--only STAGE] [--from STAGE] [--plan]
    pretrain plan  CONFIG                 # a sweep: its points and the stage outputs they share

`pipeline.cli` registers them with `add_commands` (listed before `status`, where the
engine's help has always shown `sweep`) and hands parsed arguments to `dispatch`, which
returns an exit code (None: not one of these). A ConfigError propagates to the engine's
`main`, which prints it and exits 2, as for `pretrain run`.
"""

from __future__ import annotations

import argparse
import sys

from pipeline.cli import CommandGroup
from pipeline.config import ConfigError, load_config
from pipeline.graph import STAGE_NAMES
from pipeline.planner import Selection, plan_warnings
from pipeline.run_discovery import SWEEP_STORE
from pipeline.status import format_table


def add_commands(subparsers) -> None:
    sweep = subparsers.add_parser(
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


def dispatch(args: argparse.Namespace) -> int | None:
    if args.command == "sweep":
        return _sweep(args)
    # `plan` of one experiment stays the engine's: this reads the config (milliseconds) to tell.
    if args.command == "plan" and load_config(args.config, args.override).sweep is not None:
        return plan_sweep_command(args.config, args.override,
                                  Selection(only=tuple(args.only), from_stage=args.from_stage))
    return None


SWEEP_COMMANDS = CommandGroup(add_commands=add_commands, dispatch=dispatch, before="status")


def _sweep(args) -> int:
    from sweep.expand import expand_sweep
    from sweep.run import run_sweep

    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise ConfigError(f"--max-concurrent {args.max_concurrent}: give 1 or more")
    selection = Selection(only=tuple(args.only), from_stage=args.from_stage)
    if args.plan:
        return plan_sweep_command(args.config, args.override, selection)
    return run_sweep(expand_sweep(args.config, args.override), selection=selection,
                     max_concurrent=args.max_concurrent)


def plan_sweep_command(config: str, overrides: list[str], selection: Selection = Selection()) -> int:
    from sweep.expand import expand_sweep
    from sweep.run import format_plan, plan_sweep

    sweep = expand_sweep(config, overrides)
    decisions, uses = plan_sweep(sweep, selection)
    warnings = [line for p in sweep.points for line in plan_warnings(p.config, decisions[p.name])]
    for line in dict.fromkeys(warnings):  # once, however many points share the data_dir
        print(f"warning: {line}", file=sys.stderr)
    print(f"sweep {sweep.name}: {len(sweep.points)} points under {sweep.where}, "
          f"stage outputs shared in {sweep.location(SWEEP_STORE)}")
    print(format_table(["point", "overrides"],
                       [[p.name, ", ".join(f"{k}={v}" for k, v in p.overrides.items())] for p in sweep.points]))
    print(format_table(["stage", "fingerprint", "read by", "decision"], format_plan(sweep, uses)))
    outputs = len(uses)
    print(f"{outputs} stage outputs for {len(sweep.points)} points "
          f"({len(sweep.points) * len(STAGE_NAMES)} if each point ran alone)")
    return 0
