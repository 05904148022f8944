"""What a stage receives when it runs: its config, where to write, what it reads.

Stages type it with the protocol stages.context.StageContext (they never import the
engine), which this class satisfies."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stages.tracking import MetricsLog
from storage.node_transfer.driver import NodeTransfer


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
    input_digests: name -> content digest of every file the stage reads besides its input
                 stages (its StageSpec.input_files), as they joined the fingerprint
    output_url:  the object-store URL output_dir is uploaded to, None for a local store;
                 Ray Train checkpoints go there directly (they must outlive this machine)
    node_transfer: an object-store run's way for tasks and workers on other nodes to
                 fetch and upload their files (storage.node_transfer); None for a local store
    """

    name: str
    config: Any
    experiment: Any
    output_dir: Path
    inputs: dict[str, Path] = field(default_factory=dict)
    input_manifests: dict[str, dict] = field(default_factory=dict)
    fingerprint: str = ""
    input_digests: dict[str, str] = field(default_factory=dict)
    output_url: str | None = None
    node_transfer: NodeTransfer | None = None

    @property
    def metrics_log(self) -> MetricsLog:
        return MetricsLog(self.output_dir / "metrics.jsonl")
