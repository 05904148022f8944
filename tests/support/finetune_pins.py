"""Fixed-seed fine-tuning results, pinned so that a refactor cannot change them unseen.

    assert_pinned("gpt/sst2", ctx.output_dir, "sst2")

The integration tests that fine-tune GPT, BERT and T5 on SST-2, SQuAD and CoNLL-2003 call
this on their finished stage. It compares the task's dev (and test) scores from
metrics.json and its logged training curve (loss and lr per logged step, dev scores per
epoch) with `finetune_pins.json`, recorded from the code before the change (issue 16:
fine-tuning as task families). Run the tests with PIN_FINETUNE_RECORD=1 to record new
values after a change that is meant to alter results, and say why in the commit.

Wall-clock figures (seconds, examples per second) are left out, and so are record keys
added since the pins were taken: pins say "these numbers did not move" (beyond float
rounding, FLOAT_REL_TOL), not "nothing new was logged".
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

PINS_PATH = Path(__file__).with_name("finetune_pins.json")
RECORD_ENV = "PIN_FINETUNE_RECORD"
WALL_CLOCK = {"seconds", "examples_per_s"}
CURVE_KEYS = {"step", "epoch", "loss", "lr"}


def pinned_facts(output_dir: Path, task: str) -> dict[str, Any]:
    metrics = json.loads((Path(output_dir) / task / "metrics.json").read_text(encoding="utf-8"))
    scores = {key: value for key, value in metrics.items()
              if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in WALL_CLOCK}
    curve = []
    with open(Path(output_dir) / "metrics.jsonl", encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if record.get("task") != task:
                continue
            kept = {key: value for key, value in record.items()
                    if key in CURVE_KEYS or key.startswith(("dev_", "test_"))}
            if set(kept) - {"step", "epoch"}:
                curve.append(kept)
    return {"scores": scores, "curve": curve}


def assert_pinned(name: str, output_dir: Path, task: str) -> None:
    actual = pinned_facts(output_dir, task)
    if os.environ.get(RECORD_ENV):
        _record(name, actual)
        return
    pins = json.loads(PINS_PATH.read_text(encoding="utf-8"))
    assert name in pins, f"no pinned results for {name!r} in {PINS_PATH}: record them with {RECORD_ENV}=1"
    expected = pins[name]
    missing = sorted(set(expected["scores"]) - set(actual["scores"]))
    assert not missing, f"{name}: metrics.json lost pinned keys {missing}"
    changed = {key: (value, actual["scores"][key]) for key, value in expected["scores"].items()
               if not _same(value, actual["scores"][key])}
    assert not changed, f"{name}: pinned scores changed (pinned, now): {changed}"
    assert len(actual["curve"]) == len(expected["curve"]), (
        f"{name}: {len(actual['curve'])} curve records, {len(expected['curve'])} pinned")
    for pinned, now in zip(expected["curve"], actual["curve"]):
        differs = {key: (value, now.get(key)) for key, value in pinned.items() if not _same(value, now.get(key))}
        assert not differs, f"{name}: curve record at step {pinned.get('step')} changed (pinned, now): {differs}"


# Floats agree to float rounding, not bit for bit: the same code on another CPU (AVX2
# against AVX-512 / AMX kernels, which sum in another order) moved fine-tuning losses by
# ~1e-8 relative; a change of method moves them by far more.
FLOAT_REL_TOL = 1e-6


def _same(pinned: Any, now: Any) -> bool:
    if isinstance(pinned, float) and isinstance(now, (int, float)):
        return math.isclose(pinned, now, rel_tol=FLOAT_REL_TOL, abs_tol=1e-9) or (
            math.isnan(pinned) and math.isnan(now))
    return pinned == now


def _record(name: str, facts: dict[str, Any]) -> None:
    # Tasks of one run (and tests on other workers) may record at once: read-modify-write under a lock.
    with open(Path(tempfile.gettempdir()) / "finetune_pins.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pins = json.loads(PINS_PATH.read_text(encoding="utf-8")) if PINS_PATH.is_file() else {}
        pins[name] = facts
        PINS_PATH.write_text(json.dumps(pins, indent=1, sort_keys=True) + "\n", encoding="utf-8")
