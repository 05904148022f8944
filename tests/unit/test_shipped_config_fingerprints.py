"""Every shipped config's stage fingerprints, pinned: a layout change (a module moved, a
config class rewritten) must not change what a stage's fingerprint hashes, or every
user's cached stages would re-run after an upgrade. The pins change only with a
deliberate `code_version` bump or a new config key, and then on purpose:
`python -m tests.unit.test_shipped_config_fingerprints --write` rewrites them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from pipeline.config import load_config
from pipeline.fingerprint import compute_all

ROOT = Path(__file__).resolve().parents[2]
PINS = ROOT / "tests" / "shipped_fingerprints.json"
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


def fingerprints(config: Path) -> dict[str, str]:
    cfg = load_config(config)
    return {stage: fp for stage, (fp, _) in compute_all(cfg, save_cache=False).items()}


def test_every_shipped_config_is_pinned():
    assert sorted(json.loads(PINS.read_text())) == [c.name for c in CONFIGS]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.stem)
def test_shipped_config_fingerprints_are_unchanged(config, monkeypatch):
    monkeypatch.setenv("DATA_DIR", os.environ.get("DATA_DIR", str(ROOT.parent / "shared" / "data")))
    assert fingerprints(config) == json.loads(PINS.read_text())[config.name]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    PINS.write_text(json.dumps({c.name: fingerprints(c) for c in CONFIGS}, indent=1) + "\n")
