"""Stage fingerprints: hash(stage name, its resolved config, code version, inputs)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pipeline.config import ExperimentConfig
from pipeline.graph import STAGES, StageSpec


def stage_identity(spec: StageSpec, cfg: ExperimentConfig, input_fps: dict[str, str]) -> dict:
    """Everything that decides a stage's output; its hash is the fingerprint."""
    section = getattr(cfg, spec.name)
    identity = {
        "stage": spec.name,
        "config": section.model_dump(mode="json"),
        "experiment": {key: _experiment_value(cfg, key) for key in spec.experiment_keys},
        "code_version": spec.code_version,
        "inputs": {name: input_fps[name] for name in spec.inputs},
    }
    files = {key: _file_digest(getattr(section, key)) for key in spec.file_keys
             if getattr(section, key) is not None}
    if files:  # only then: a stage without such files keeps the fingerprint it had
        identity["files"] = files
    return identity


def _file_digest(path: str) -> str:
    """sha256 of the file's bytes; a missing file hashes as such (the stage itself then
    fails with a clear error naming the key)."""
    file = Path(path).expanduser()
    if not file.is_file():
        return f"missing:{file}"
    return hashlib.sha256(file.read_bytes()).hexdigest()


def _experiment_value(cfg: ExperimentConfig, key: str) -> Any:
    # data_dir is fingerprinted as the resolved path: "../shared/data" from two working
    # directories are two different corpora.
    return str(cfg.resolved_data_dir) if key == "data_dir" else getattr(cfg, key)


def fingerprint_of(identity: dict) -> str:
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def compute_all(cfg: ExperimentConfig) -> dict[str, tuple[str, dict]]:
    """stage name -> (fingerprint, identity), in graph order. Reads only the files that
    `file_keys` name (small config files), never stage outputs."""
    out: dict[str, tuple[str, dict]] = {}
    for spec in STAGES:
        identity = stage_identity(spec, cfg, {n: out[n][0] for n in spec.inputs})
        out[spec.name] = (fingerprint_of(identity), identity)
    return out
