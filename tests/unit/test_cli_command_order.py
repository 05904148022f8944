"""`pretrain --help` lists the commands in the order it always has, although sweep,
report and dashboard now come from the layers above the engine (CommandGroup.before)."""

from cluster.cli import CLUSTER_COMMANDS
from pipeline.cli import build_parser
from sweep.cli import SWEEP_COMMANDS
from views.cli import VIEW_COMMANDS

HELP_ORDER = ["run", "plan", "sweep", "status", "config", "verify", "report", "dashboard", "generate",
              "submit", "jobs", "logs", "stop"]


def test_the_installed_command_lists_every_layer_s_commands_in_the_help_order():
    parser = build_parser([SWEEP_COMMANDS, VIEW_COMMANDS, CLUSTER_COMMANDS])
    (commands,) = [a for a in parser._actions if a.dest == "command"]
    assert list(commands.choices) == HELP_ORDER


def test_the_engine_alone_has_only_its_own_commands():
    (commands,) = [a for a in build_parser()._actions if a.dest == "command"]
    assert list(commands.choices) == ["run", "plan", "status", "config", "verify", "generate"]
