"""Tasks from the Hugging Face Hub (`finetune.source: hub`), in the same form as the official files.

Each task kind converts its Hub dataset in its own folder (`glue/hub.py`, `squad/hub.py`,
`conll/hub.py`), in `*_from_dataset` functions, so the rest of the stage cannot tell
where a task came from. What they share is here: `load_dataset`, which needs the network
(or the datasets cache) and fails with a message that says what was asked for, and the
column check.
"""

from __future__ import annotations


def load_split(path: str, name: str | None, split: str, revision: str | None = None):
    import datasets

    try:
        return datasets.load_dataset(path, name, split=split, revision=revision)
    except Exception as error:  # offline, renamed dataset, no such split: say what was asked for
        where = f"{path}" + (f" ({name})" if name else "") + (f" at {revision}" if revision else "")
        raise RuntimeError(
            f"finetune.source is 'hub' but {where} split {split!r} could not be loaded from the Hugging "
            f"Face Hub: {type(error).__name__}: {error}. Check the network (or set HF_HUB_OFFLINE=1 with "
            "a filled cache), or use finetune.source: files with the official files under data_dir") from error


def check_columns(dataset, needed: list[str], where: str, error: type[Exception]) -> None:
    """Raise `error` (the task kind's data error) naming the missing columns."""
    missing = [column for column in needed if column not in dataset.column_names]
    if missing:
        raise error(f"{where}: columns {dataset.column_names} lack {missing}; the finetune stage "
                    "reads the layout of the Hub datasets named in stages/finetune/<task kind>/hub.py")
