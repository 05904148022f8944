"""Ray Train runs without the Ray Data actor that our runs never use.

Ray Train V2 (pinned: 2.60) adds a DatasetsCallback to every run, and that callback starts
a `DatasetManager` actor whether or not the trainer was given Ray Data datasets. Our
training loops read their Arrow shards themselves (stages/data/loader.py) and never pass
`datasets=`, so the actor only costs a process that imports Ray Data: measured here, 2.75
CPU-seconds per run, and 1.4 s of an empty 2-worker run's 17 s on an idle 2-core machine
(benchmarks and the suite start dozens of runs). Without the callback the workers get no
dataset shard provider, which only `ray.train.get_dataset_shard` reads.
"""

from __future__ import annotations


def without_dataset_manager(trainer_class: type) -> type:
    """A subclass of the Ray Train V2 trainer `trainer_class` that drops the datasets
    callback when it was given no datasets (and keeps it when it was)."""
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback

    # Called by DataParallelTrainer.fit() on the driver; the callbacks then travel to the
    # controller, where DatasetsCallback would start the actor.
    assert hasattr(trainer_class, "_create_default_callbacks"), (
        "Ray Train no longer has DataParallelTrainer._create_default_callbacks: "
        "update stages/training/no_dataset_manager.py for this Ray version")

    class WithoutDatasetManager(trainer_class):
        def _create_default_callbacks(self):
            callbacks = super()._create_default_callbacks()
            if self.datasets:
                return callbacks
            return [c for c in callbacks if not isinstance(c, DatasetsCallback)]

    WithoutDatasetManager.__name__ = WithoutDatasetManager.__qualname__ = trainer_class.__name__
    return WithoutDatasetManager
