"""What a stage receives when it runs: its config, where to write, what it reads."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class MetricsLog:
    """Append-only JSONL metrics file in a stage's output directory.

    Every record gets a wall-clock `time`; training adds `step`. One file per stage run
    so that the report stage can plot curves without knowing who wrote them.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def log(self, record: dict[str, Any]) -> None:
        line = json.dumps({"time": time.time(), **record}, default=float)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with open(self.path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]


@dataclass
class StageContext:
    """Everything a stage function needs; the engine builds it, the stage only reads it.

    name:        stage name ("ingest", "tokenizer", ...)
    config:      the stage's own validated config section (a pydantic model)
    experiment:  the whole validated experiment config (seed, data_dir, ray, tracking)
    output_dir:  where the stage writes; stable per fingerprint, so an interrupted stage
                 finds its own partial progress here when it is run again
    inputs:      upstream stage name -> that stage's finished output directory
    input_manifests: upstream stage name -> its manifest (metrics, files, config)
    fingerprint: this stage's fingerprint (used e.g. as the Ray Train run name)
    """

    name: str
    config: Any
    experiment: Any
    output_dir: Path
    inputs: dict[str, Path] = field(default_factory=dict)
    input_manifests: dict[str, dict] = field(default_factory=dict)
    fingerprint: str = ""

    @property
    def metrics_log(self) -> MetricsLog:
        return MetricsLog(self.output_dir / "metrics.jsonl")
