"""Config of the ingest stage: which files to read and how to clean them.

Only pydantic here: the engine loads this module at startup to validate the YAML.
"""

from typing import Literal

from pydantic import Field, model_validator

from stages.section import Section


class SourceConfig(Section):
    """One corpus source: a file, a directory (every file under it) or a glob."""

    path: str = Field(
        description="file, directory or glob (e.g. 'corpus/gutenberg/*.txt'); relative paths "
        "resolve against the experiment's data_dir, absolute paths and URLs (s3://, gs://, "
        "https://...) are read as they are; .gz/.bz2/.zst files are decompressed")
    format: Literal["text", "jsonl"] = Field(
        "text", description="text: plain UTF-8 text; jsonl: one JSON object per line")
    text_field: str = Field(
        "text", description="jsonl only: the field of each JSON object that holds the document")
    split: Literal["paragraph", "line", "file"] = Field(
        "paragraph", description="text only: how a file becomes documents: paragraph = "
        "blank-line separated blocks, line = every non-blank line, file = the whole file")

    @model_validator(mode="after")
    def _options_match_format(self) -> "SourceConfig":
        if self.format == "jsonl" and self.split != "paragraph":
            raise ValueError(
                "'split' applies to format 'text' only (every JSONL line is one document); "
                "remove 'split' from this source")
        if self.format == "text" and self.text_field != "text":
            raise ValueError(
                "'text_field' applies to format 'jsonl' only; remove it or set format: jsonl")
        return self


class IngestConfig(Section):
    """Clean, filter and deduplicate a corpus into Parquet shards of documents."""

    sources: list[SourceConfig] = Field(
        min_length=1, description="corpus sources, read in this order; on duplicates, the "
        "first occurrence in this order (files sorted by path within a source) is kept")
    normalization: Literal["NFC", "NFKC"] = Field(
        "NFC", description="Unicode normal form: NFC keeps characters as written; NFKC also "
        "folds compatibility forms (ligatures, full-width letters, non-breaking spaces)")
    unwrap_lines: bool = Field(
        True, description="join the lines of a paragraph with a space (Project Gutenberg "
        "hard-wraps prose at ~70 columns); false keeps the line breaks (verse, code)")
    min_chars: int = Field(
        20, ge=0, description="drop documents with fewer characters after cleaning (chapter "
        "headings, page numbers); 20 drops ~0.3% of Gutenberg text, 200 drops ~14%")
    dedup: Literal["exact", "none"] = Field(
        "exact", description="exact: drop a document whose cleaned text equals an earlier "
        "one anywhere in the corpus (licence boilerplate repeated across books); none: keep all")
    num_shards: int = Field(
        4, ge=1, le=100_000, description="Parquet output shards (contiguous ranges of "
        "documents, balanced by bytes); downstream stages work on them in parallel")
