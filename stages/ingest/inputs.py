"""The corpus files the ingest stage reads, named as its `source` column names them:
relative to data_dir where the config path was, so moving the data changes nothing.

    input_files(experiment)   # {"corpus/gutenberg/pg11.txt": "/data/corpus/gutenberg/pg11.txt"}

A source that matches nothing is listed under its config path and hashes as missing (the
stage itself then fails with the full explanation); a Hub dataset is listed by its URL-like
name and joins the fingerprint by name only.
"""

from __future__ import annotations

from storage.file_tree import local_tree
from stages.ingest.sources import resolve_sources


def input_files(experiment) -> dict[str, str]:
    files: dict[str, str] = {}
    sources = experiment.ingest.sources
    for index, source in enumerate(sources):
        try:
            resolved = resolve_sources([source], experiment.resolved_data_dir)
        except (FileNotFoundError, OSError, ValueError):
            files[f"ingest.sources[{index}]: {source.path}"] = f"{experiment.resolved_data_dir}/{source.path}"
            continue
        for file in resolved:
            if file.hf_hub:
                files[file.name] = f"hub://{file.name}"
            elif source.format == "huggingface":  # a save_to_disk folder
                files.update(local_tree(file.url, file.name))
            else:
                files[file.name] = file.url
    return files
