"""Stage fingerprints: hash(stage name, its resolved config, code version, inputs, data).

`data` holds the content digest of every file the stage reads besides its input stages
(corpus, task files, a DeepSpeed JSON), keyed by a name that does not depend on where
data_dir is mounted; see pipeline.input_files for how digests are cached.
"""

from __future__ import annotations

import hashlib
import json

from pipeline.config import ExperimentConfig
from pipeline.graph import STAGES, StageSpec
from pipeline.input_files import InputHasher

HASH_CACHE = ".cache/input-hashes.json"  # under the workdir


def stage_identity(spec: StageSpec, cfg: ExperimentConfig, input_fps: dict[str, str],
                   hasher: InputHasher | None = None) -> dict:
    """Everything that decides a stage's output; its hash is the fingerprint."""
    section = getattr(cfg, spec.name)
    identity = {
        "stage": spec.name,
        "config": section.model_dump(mode="json"),
        "experiment": {key: getattr(cfg, key) for key in spec.experiment_keys},
        "code_version": spec.code_version,
        "inputs": {name: input_fps[name] for name in spec.inputs},
    }
    files = spec.list_input_files(cfg)
    if files:  # only then: a stage that reads no files keeps the fingerprint it had
        identity["data"] = (hasher or InputHasher(None)).digests(files)
    return identity


def fingerprint_of(identity: dict) -> str:
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def compute_all(cfg: ExperimentConfig, *, save_cache: bool = True) -> dict[str, tuple[str, dict]]:
    """stage name -> (fingerprint, identity), in graph order. Stats every input file and
    hashes only those whose size or mtime changed since the workdir's hash cache saw
    them; never reads stage outputs. `save_cache=False` (a plan) reads the cache but
    writes nothing: the new digests live only in memory."""
    hasher = InputHasher(cfg.resolved_workdir / HASH_CACHE)
    out: dict[str, tuple[str, dict]] = {}
    for spec in STAGES:
        identity = stage_identity(spec, cfg, {n: out[n][0] for n in spec.inputs}, hasher)
        out[spec.name] = (fingerprint_of(identity), identity)
    if save_cache:
        hasher.save()
    return out
