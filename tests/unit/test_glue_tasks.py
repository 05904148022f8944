"""GLUE task specs and the TSV reader, on the real files and on small broken copies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stages.finetune.glue.reader import TaskDataError, read_split
from stages.finetune.tasks import get_task, task_names

SST2 = get_task("sst2")


def write_sst2(root: Path, split: str, lines: list[str]) -> Path:
    """A data_dir whose glue_data/SST-2/<split>.tsv holds `lines` (header included)."""
    path = root / "glue_data" / "SST-2" / f"{split}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_sst2_dev_is_read_in_full(data_dir):
    dev = read_split(SST2, data_dir, "dev")
    assert len(dev) == 872
    assert np.bincount(dev.labels).tolist() == [428, 444]  # negative, positive
    assert dev.texts[0] == ("it 's a charming and often affecting journey .",)  # trailing space stripped
    assert dev.labels[0] == 1 and dev.ids[:3] == ["0", "1", "2"]


def test_sst2_train_and_test_sizes(data_dir):
    assert len(read_split(SST2, data_dir, "train")) == 67_349
    test = read_split(SST2, data_dir, "test")
    assert len(test) == 1821 and test.labels is None
    assert test.ids[:2] == ["0", "1"]  # from the file's index column
    assert test.texts[0] == ("uneasy mishmash of styles and genres .",)


@pytest.mark.parametrize("task, rows, label_counts", [
    ("cola", 1043, [322, 721]), ("mrpc", 408, [129, 279]), ("rte", 277, [146, 131]),
    ("wnli", 71, [40, 31]), ("qnli", 5463, [2702, 2761]), ("stsb", 1500, None),
])
def test_other_glue_dev_sets_match_published_counts(data_dir, task, rows, label_counts):
    spec = get_task(task)
    dev = read_split(spec, data_dir, "dev")
    assert len(dev) == rows and all(len(t) == len(spec.text_columns) for t in dev.texts)
    if label_counts is None:
        assert spec.is_regression and 0.0 <= dev.labels.min() and dev.labels.max() <= 5.0
    else:
        assert np.bincount(dev.labels).tolist() == label_counts


def test_unbalanced_quote_stays_inside_its_field(tmp_path):
    # With csv's default quoting the first `"` would swallow the tab, the newline and
    # the next row; GLUE files must be read with QUOTE_NONE.
    write_sst2(tmp_path, "dev", ["sentence\tlabel", 'he said " it was fine\t1', "awful\t0"])
    dev = read_split(SST2, tmp_path, "dev")
    assert dev.texts == [('he said " it was fine',), ("awful",)]
    assert dev.labels.tolist() == [1, 0]


def test_row_with_wrong_column_count_names_file_and_line(tmp_path):
    path = write_sst2(tmp_path, "dev", ["sentence\tlabel", "fine\t1", "a\ttab inside\t0"])
    with pytest.raises(TaskDataError, match=rf"{path}:3: expected 2 tab-separated columns .* found 3"):
        read_split(SST2, tmp_path, "dev")


def test_label_outside_label_set_names_file_line_and_valid_labels(tmp_path):
    path = write_sst2(tmp_path, "train", ["sentence\tlabel", "fine\t1", "meh\t2"])
    with pytest.raises(TaskDataError, match=rf"{path}:3: label='2' is not a label of task 'sst2' \(valid: 0, 1\)"):
        read_split(SST2, tmp_path, "train")


def test_header_without_needed_columns_is_explained(tmp_path):
    path = write_sst2(tmp_path, "dev", ["text\tlabel", "fine\t1"])
    with pytest.raises(TaskDataError, match=rf"{path}:1: header .* needs \['sentence'\]"):
        read_split(SST2, tmp_path, "dev")


def test_missing_file_says_where_glue_belongs(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"SST-2/dev.tsv: not found .*glue_data"):
        read_split(SST2, tmp_path, "dev")


def test_unknown_task_lists_valid_names():
    with pytest.raises(ValueError) as error:
        get_task("sst-2")
    message = str(error.value)
    assert "did you mean 'sst2'" in message
    assert all(name in message for name in task_names())
    assert {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"} <= set(task_names())


def test_training_subset_is_seeded_and_in_file_order(data_dir):
    train = read_split(SST2, data_dir, "train")
    first, again, other = (train.sample(200, seed) for seed in (0, 0, 1))
    assert len(first) == 200 and first.ids == again.ids and first.ids != other.ids
    positions = [int(i) for i in first.ids]
    assert positions == sorted(positions)
    assert first.texts[0] == train.texts[positions[0]]
    assert train.sample(None, 0) is train and train.sample(10**6, 0) is train


def test_stage_refuses_tasks_with_missing_files_before_training(tmp_path, data_dir):
    from stages.finetune.run import check_task_files

    check_task_files([SST2, get_task("rte")], data_dir)  # all files present
    with pytest.raises(FileNotFoundError, match=r"QNLI/train.tsv.*remove those tasks from finetune.tasks"):
        check_task_files([SST2, get_task("qnli")], data_dir)
