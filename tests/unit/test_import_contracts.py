"""The import direction the design promises, checked as kedro does: import-linter's
contracts in pyproject.toml ([tool.importlinter]) hold, no module imports itself through
a chain of others, and the engine's StageContext is what stages type their `ctx` with."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

from pipeline.context import StageContext as EngineStageContext
from stages.context import StageContext

REPO_ROOT = Path(__file__).resolve().parents[2]
# The packages import-linter reads: the cycle check below covers every one of them.
ROOT_PACKAGES = tuple(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"])


def test_the_import_contracts_in_pyproject_hold():
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint_imports)], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_module_imports_itself_through_others():
    # acyclic_siblings (pyproject.toml) compares the children of each package; a cycle
    # through a package's own __init__ (a registry in __init__.py whose entries import
    # it back) is only seen module by module. Function-local imports count.
    graph = grimp.build_graph(*ROOT_PACKAGES, cache_dir=None)
    cycles = {}
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back:
                cycle = (module, *back)
                cycles.setdefault(frozenset(cycle), " -> ".join(cycle))
    assert not cycles, f"{len(cycles)} import cycles:\n" + "\n".join(sorted(cycles.values()))


def test_the_engines_stage_context_satisfies_the_stages_protocol(tmp_path):
    ctx = EngineStageContext(name="report", config=object(), experiment=object(),
                             output_dir=tmp_path / "out")
    assert isinstance(ctx, StageContext)


def test_stages_read_only_what_the_protocol_declares():
    declared = {name for name in vars(StageContext) if not name.startswith("_")}
    read = {match.group(1) for path in (REPO_ROOT / "stages").rglob("*.py")
            for match in re.finditer(r"\bctx\.([a-z_]+)", path.read_text(encoding="utf-8"))}
    assert read, "no stage reads ctx.<attribute>: the pattern is stale"
    assert read <= declared, f"stages read ctx.{sorted(read - declared)}: declare them in stages/context.py"
