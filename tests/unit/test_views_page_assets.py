"""The runs page's script and style are package data of `views`: read through
importlib.resources, and named by pyproject.toml's package-data globs so that a wheel
carries them (an installed `pretrain report ROOT` would otherwise fail on import)."""

import tomllib
from fnmatch import fnmatch
from importlib.resources import files
from pathlib import Path

import pytest

from views import page_assets

ROOT = Path(__file__).resolve().parents[2]


def _glob_matches(path: str, pattern: str) -> bool:
    """setuptools' package-data glob: `*` stays within one folder."""
    parts, wanted = path.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(fnmatch(p, w) for p, w in zip(parts, wanted))


def test_every_page_file_is_package_data_found_through_importlib_resources():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["views"]
    for name in (*page_assets.STYLE_FILES, *page_assets.SCRIPT_FILES):
        assert files("views").joinpath(page_assets.STATIC, name).is_file(), name
        assert any(_glob_matches(f"{page_assets.STATIC}/{name}", p) for p in patterns), f"{name} not in package-data"


def test_the_inlined_script_and_style_cannot_close_their_tags():
    assert "uPlot" in page_assets.SCRIPT and "uplot" in page_assets.STYLE.lower()
    assert "</script" not in page_assets.SCRIPT.lower() and "</style" not in page_assets.STYLE.lower()


def test_a_missing_static_file_is_an_error_naming_it():
    with pytest.raises(FileNotFoundError, match="runs_page_gone.js"):
        page_assets.read_static(("runs_page_gone.js",))
