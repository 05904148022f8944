"""One wandb run per finished stage, logged by the engine from the stage's manifest.

The runner calls `log_stage(cfg, manifest, output_dir)` right after writing a manifest:
the run is grouped by tracking.wandb.group (a sweep's name) or else the experiment,
tagged with stage, fingerprint and tracking.wandb.tags, and holds the
stage's config, its metrics as summary, the data stages' statistics as a wandb.Table,
and for the report stage report.html/report.md/metrics.json as an artifact.

Stages that stream their own wandb runs while they work (pretrain, and finetune with one
run per task, via `stages.tracking.open_tracker`) are left out, so no stage execution gets
two runs; their runs' summaries hold what this one would.
Tracking never fails a stage: every error becomes a warning. Offline mode writes under
`<stage dir>/wandb/offline-run-*` (`wandb sync` uploads it later).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from stages.tracking import run_group, run_tags

STREAMS_ITS_OWN_RUN = ("pretrain", "finetune")
STATS_STAGES = ("ingest", "tokenizer", "dataset")
REPORT_FILES = ("report.html", "report.md", "metrics.json")


def log_stage(cfg, manifest: dict[str, Any], output_dir: Path) -> bool:
    """True if a wandb run was written; False if wandb is disabled, the stage logs its
    own run, or wandb failed (with a warning)."""
    wandb_config = cfg.tracking.wandb
    stage = manifest["stage"]
    if wandb_config.mode == "disabled" or stage in STREAMS_ITS_OWN_RUN:
        return False
    try:
        _log(cfg, wandb_config, manifest, Path(output_dir))
        return True
    except Exception as error:  # noqa: BLE001 - tracking must never fail a stage
        warnings.warn(f"wandb logging of stage '{stage}' failed, the stage's results are "
                      f"unaffected: {type(error).__name__}: {error}", stacklevel=2)
        return False


def _log(cfg, wandb_config, manifest: dict, output_dir: Path) -> None:
    import wandb

    stage, fingerprint = manifest["stage"], manifest["fingerprint"]
    run = wandb.init(
        project=wandb_config.project, entity=wandb_config.entity, mode=wandb_config.mode,
        dir=str(output_dir), group=run_group(cfg), job_type=stage,
        name=f"{cfg.name}-{stage}-{fingerprint[:8]}", tags=run_tags(cfg, stage, fingerprint),
        config={"stage": stage, "fingerprint": fingerprint, "code_version": manifest.get("code_version"),
                "inputs": manifest.get("inputs", {}), stage: manifest.get("config", {})},
        reinit="create_new")
    try:
        metrics = {k: v for k, v in manifest.get("metrics", {}).items()
                   if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
        run.summary.update({**metrics, "wall_seconds": manifest.get("wall_seconds")})
        if stage in STATS_STAGES and metrics:
            table = wandb.Table(columns=["statistic", "value"],
                                data=[[key, str(value)] for key, value in metrics.items()])
            run.log({f"{stage}/stats": table})
        if stage == "report":
            artifact = wandb.Artifact(f"{cfg.name}-report", type="report",
                                      metadata={"fingerprint": fingerprint})
            for name in REPORT_FILES:
                if (output_dir / name).is_file():
                    artifact.add_file(str(output_dir / name))
            run.log_artifact(artifact)
    finally:
        run.finish()
