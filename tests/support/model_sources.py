"""A ModelSource for tests that need one without a real model folder: the fields a
resolver would fill for a pipeline model folder at `path`."""

from __future__ import annotations

from pathlib import Path

from stages.training.model_source import ModelSource


def folder_source(path: str | Path, family: str = "gpt", *, tokenizer: str | Path | None = None,
                  max_seq_len: int | None = None) -> ModelSource:
    folder = Path(path)
    return ModelSource(format="pretrained", path=str(folder), family=family,
                       config_file=str(folder / "model_config.json"), weights_file=str(folder / "model.safetensors"),
                       tokenizer=str(tokenizer or folder / "tokenizer.json"), max_seq_len=max_seq_len)
