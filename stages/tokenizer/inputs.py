"""The files the tokenizer stage reads besides the ingest stage: with tokenizer.from, the
folder's tokenizer files (only those: its weights do not change the tokenizer). Each
is listed whether or not it exists, so that one appearing or going away re-runs the
stage. Light on purpose: no tokenizers import."""

from __future__ import annotations

from pathlib import Path

FROM = "tokenizer.from"
# Every file stages/tokenizer/from_folder.py may read.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "special_tokens_map.json", "tokenizer_config.json")


def input_files(experiment) -> dict[str, str]:
    folder = experiment.tokenizer.from_
    if folder is None:
        return {}
    root = Path(folder).expanduser()
    return {f"{FROM}/{name}": str(root / name) for name in TOKENIZER_FILES}
