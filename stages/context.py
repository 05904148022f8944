"""What a stage reads from the context the engine hands it, as a typing Protocol.

Stages sit below the engine (`cluster -> pipeline -> stages`, pyproject.toml's import
contracts), so they type `run(ctx: StageContext)` with this protocol instead of importing
the engine's dataclass; `pipeline.context.StageContext` satisfies it
(tests/unit/test_import_contracts.py), and a test may pass any object with these attributes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from stages.tracking import MetricsLog
from storage.node_transfer.driver import NodeTransfer


@runtime_checkable
class StageContext(Protocol):
    """Read-only to a stage.

    config:      the stage's own validated config section (a pydantic model)
    experiment:  the whole validated experiment config (seed, data_dir, ray, tracking)
    output_dir:  where the stage writes; the same directory when an interrupted stage runs
                 again, so it finds its own partial progress there
    inputs:      upstream stage name -> that stage's finished output directory
    input_manifests: upstream stage name -> its manifest (metrics, files, config)
    fingerprint: this stage's fingerprint (e.g. the Ray Train run name)
    input_digests: name -> content digest of every file the stage reads besides its input
                 stages, as they joined the fingerprint
    output_url:  the object-store URL output_dir is uploaded to (None: a local store);
                 what must outlive this machine (Ray Train checkpoints) goes there directly
    metrics_log: the stage's metrics.jsonl in output_dir
    node_transfer: an object-store run's storage.node_transfer.driver.NodeTransfer (None
                 for a local store); the stage hands it to stages.ray_tasks' map_tasks,
                 map_where_files_are, forget_files, bring_to_driver and to Ray Train's fit
    """

    @property
    def config(self) -> Any: ...

    @property
    def experiment(self) -> Any: ...

    @property
    def output_dir(self) -> Path: ...

    @property
    def inputs(self) -> dict[str, Path]: ...

    @property
    def input_manifests(self) -> dict[str, dict]: ...

    @property
    def fingerprint(self) -> str: ...

    @property
    def input_digests(self) -> dict[str, str]: ...

    @property
    def output_url(self) -> str | None: ...

    @property
    def metrics_log(self) -> MetricsLog: ...

    @property
    def node_transfer(self) -> NodeTransfer | None: ...
