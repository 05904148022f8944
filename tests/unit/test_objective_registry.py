"""The objectives' registry (stages/objectives/registry.py): one objective per name the
dataset config accepts, one per model family, and the torch parts imported only when
asked for, so that the dataset stage and its Ray tasks pick a writer without torch."""

import subprocess
import sys
import typing

from stages.dataset.config import DatasetConfig
from stages.objectives.registry import FAMILY_OF_OBJECTIVE, OBJECTIVE_NAMES


def test_every_dataset_objective_has_one_objective_and_each_family_one():
    assert sorted(OBJECTIVE_NAMES) == sorted(typing.get_args(DatasetConfig.model_fields["objective"].annotation))
    assert len(set(FAMILY_OF_OBJECTIVE.values())) == len(FAMILY_OF_OBJECTIVE)


def test_the_dataset_stage_and_the_registry_import_no_torch():
    code = ("import sys, stages.dataset.run, stages.objectives.registry as r\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
