"""`pretrain --version`: the package version, and the git commit when the code runs from a
checkout (with "+ uncommitted changes" when the tree differs from it); the version alone
from an installed package or when git is missing."""

from __future__ import annotations

import argparse
import functools
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGE = "pretrain-pipeline"
SOURCE_ROOT = Path(__file__).resolve().parents[1]  # the checkout holding pipeline/, if any


def version_text() -> str:
    try:
        version = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        version = "(not installed)"
    commit = git_commit(SOURCE_ROOT)
    return f"pretrain {version}" + (f" (git {commit})" if commit else "")


@functools.cache
def code_commit() -> str | None:
    """The full commit of the code this process runs (`git_commit` with 40 digits), asked
    of git once: the code loaded does not change under a running process, and a test
    session or a sweep writes many pipeline.json files."""
    return git_commit(SOURCE_ROOT, digits=40)


def git_commit(root: Path = SOURCE_ROOT, digits: int = 12) -> str | None:
    """'<sha>' or '<sha> + uncommitted changes' (`digits` long; 40 = the full `git
    rev-parse HEAD`, as a run records it in pipeline.json); None outside a git checkout."""
    if not (root / ".git").exists():
        return None
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", f"--short={digits}", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):  # no git on this machine
        return None
    return sha.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


class VersionAction(argparse.Action):
    """--version, computed only when asked (it runs git)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="print the version (and git commit) and exit"):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()
