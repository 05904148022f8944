"""The trainer class fit() uses drops Ray Train's datasets callback (and with it the
DatasetManager actor) only when no datasets were given; the hook it overrides still
exists in the pinned Ray. (Every Ray Train run in the suite goes through it.)"""

from __future__ import annotations

from ray.train.torch import TorchTrainer
from ray.train.v2._internal.callbacks.datasets import DatasetsCallback

from stages.training.no_dataset_manager import without_dataset_manager


def noop(config):
    pass


def callback_types(trainer) -> set[str]:
    return {type(c).__name__ for c in trainer._create_default_callbacks()}


def test_no_datasets_no_datasets_callback_and_everything_else_kept():
    plain, lean = TorchTrainer(noop), without_dataset_manager(TorchTrainer)(noop)
    assert DatasetsCallback.__name__ in callback_types(plain)
    assert callback_types(lean) == callback_types(plain) - {DatasetsCallback.__name__}
    assert type(lean).__name__ == "TorchTrainer" and isinstance(lean, TorchTrainer)


def test_datasets_given_keep_the_callback():
    # A callable stands in for a Ray Dataset (Ray Train calls it in the controller), so
    # that no Ray starts here.
    trainer = without_dataset_manager(TorchTrainer)(noop, datasets={"train": lambda: None})
    assert DatasetsCallback.__name__ in callback_types(trainer)


def test_the_placement_group_cleaner_is_replaced_by_the_recorder():
    from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback

    from stages.training.placement_group_guard import PlacementGroupRecorder, recording_placement_group

    plain, lean = TorchTrainer(noop), recording_placement_group(TorchTrainer, "placement-group/x")(noop)
    assert PlacementGroupCleanerCallback.__name__ in callback_types(plain)
    assert callback_types(lean) == (callback_types(plain) - {PlacementGroupCleanerCallback.__name__}
                                    | {PlacementGroupRecorder.__name__})
    (recorder,) = [c for c in lean._create_default_callbacks() if isinstance(c, PlacementGroupRecorder)]
    assert recorder.key == "placement-group/x" and type(lean).__name__ == "TorchTrainer"
