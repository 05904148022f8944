"""Config of the ingest stage: which files to read and how to clean them.

Only pydantic here: the engine loads this module at startup to validate the YAML.
"""

from typing import Literal

from pydantic import Field, model_validator

from stages.section import Section


class SourceConfig(Section):
    """One corpus source: a file, a directory (every file under it), a glob, or a Hugging
    Face dataset."""

    path: str = Field(
        description="file, directory or glob (e.g. 'corpus/gutenberg/*.txt'); relative paths "
        "resolve against the experiment's data_dir, absolute paths and URLs (s3://, gs://, "
        "https://...) are read as they are; .gz/.bz2/.zst files are decompressed. For format "
        "huggingface: a datasets.save_to_disk directory, else a Hub dataset name")
    format: Literal["text", "jsonl", "parquet", "csv", "huggingface"] = Field(
        "text", description="text: plain UTF-8 text; jsonl: one JSON object per line; "
        "parquet / csv: one document per row; huggingface: a datasets.Dataset, one document "
        "per row (load_from_disk for a directory, else load_dataset(path, streaming=True)). "
        "Every record format keeps the other fields as JSON in the `metadata` column")
    text_field: str = Field(
        "text", description="jsonl, parquet, csv, huggingface: the field (column) that holds "
        "the document")
    split: Literal["paragraph", "line", "file"] = Field(
        "paragraph", description="text only: how a file becomes documents: paragraph = "
        "blank-line separated blocks, line = every non-blank line, file = the whole file")
    csv_delimiter: str = Field(
        ",", min_length=1, max_length=1, description="csv only: the field separator "
        "(\"\\t\" for TSV); the first row names the columns")
    hf_split: str = Field(
        "train", description="huggingface only: the split to read (train, validation, ...)")
    hf_config_name: str | None = Field(
        None, description="huggingface only, Hub datasets: the configuration name (the "
        "second argument of datasets.load_dataset, e.g. 'wikitext-103-raw-v1')")

    @model_validator(mode="after")
    def _options_match_format(self) -> "SourceConfig":
        # A key set for another format is a mistake: say which format it belongs to.
        owners = {"split": ("text",), "text_field": _RECORD_FORMATS,
                  "csv_delimiter": ("csv",), "hf_split": ("huggingface",),
                  "hf_config_name": ("huggingface",)}
        defaults = type(self).model_fields
        for key in sorted(self.model_fields_set & owners.keys()):
            if self.format not in owners[key] and getattr(self, key) != defaults[key].default:
                formats = " / ".join(f"'{name}'" for name in owners[key])
                raise ValueError(
                    f"'{key}' applies to format {formats} only, not "
                    f"'{self.format}'; remove '{key}' from this source or change its format")
        return self


_RECORD_FORMATS = ("jsonl", "parquet", "csv", "huggingface")


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
    max_chars: int | None = Field(
        None, ge=1, description="drop documents with more characters after cleaning; null: "
        "no limit")
    min_words: int = Field(0, ge=0, description="drop documents with fewer whitespace-separated "
                           "words (Gopher: 50)")
    max_non_letter_fraction: float | None = Field(
        None, ge=0, le=1, description="drop documents where more than this fraction of the "
        "non-space characters are not letters (tables, numbers, markup); null: off")
    max_duplicate_line_fraction: float | None = Field(
        None, ge=0, le=1, description="drop documents where more than this fraction of the "
        "lines repeat an earlier line of the same document (Gopher: 0.3); null: off")
    max_mean_word_length: float | None = Field(
        None, gt=0, description="drop documents whose mean word length exceeds this "
        "(Gopher: 10; catches base64 and URL dumps); null: off")
    strip_gutenberg: bool = Field(
        False, description="cut each text file to what lies between Project Gutenberg's "
        "'*** START OF THE/THIS PROJECT GUTENBERG EBOOK ... ***' and '*** END OF ...' lines "
        "(the licence header and footer); files without the markers are kept whole")
    invalid_utf8: Literal["replace", "skip", "fail"] = Field(
        "replace", description="bytes that are not UTF-8: replace (with U+FFFD, counted), "
        "skip (drop the documents that hold any, counted) or fail (error naming file:line)")
    on_error: Literal["fail", "skip"] = Field(
        "fail", description="a malformed record (bad JSON line, missing text field) or an "
        "unreadable file (truncated .gz): fail = stop with an error naming file and line; "
        "skip = skip that record (or the whole file) and count it in the stats")
    dedup: Literal["exact", "near", "none"] = Field(
        "exact", description="exact: drop a document whose cleaned text equals an earlier "
        "one anywhere in the corpus (licence boilerplate repeated across books); near: also "
        "drop near-duplicates of an earlier document (MinHash + LSH, see minhash_*); none")
    minhash_ngram: int = Field(5, ge=1, description="near dedup: words per shingle")
    minhash_permutations: int = Field(128, ge=8, le=1024,
                                      description="near dedup: MinHash signature length")
    minhash_bands: int = Field(
        16, ge=1, description="near dedup: LSH bands (permutations / bands rows each); more "
        "bands find more candidates at lower similarity")
    minhash_threshold: float = Field(
        0.8, gt=0, le=1, description="near dedup: estimated Jaccard similarity of word "
        "shingles at or above which a candidate counts as a duplicate")
    minhash_clustering: Literal["pairs", "components"] = Field(
        "pairs", description="near dedup: which documents a verified pair drops. pairs: the "
        "later document of each pair, so a document goes only for an earlier one it is itself "
        "similar to; components: datatrove's rule, one document (the first in corpus order) "
        "kept per connected component of the pairs, so a chain of partial overlaps drops "
        "every document on it but the first")
    @model_validator(mode="after")
    def _consistent(self) -> "IngestConfig":
        if self.minhash_permutations % self.minhash_bands:
            raise ValueError(
                f"minhash_permutations ({self.minhash_permutations}) must be a multiple of "
                f"minhash_bands ({self.minhash_bands}); e.g. 128 permutations and 16 bands")
        if self.max_chars is not None and self.max_chars < self.min_chars:
            raise ValueError(f"max_chars ({self.max_chars}) is below min_chars "
                             f"({self.min_chars}); raise max_chars or lower min_chars")
        return self

    num_shards: int = Field(
        4, ge=1, le=100_000, description="Parquet output shards (contiguous ranges of "
        "documents, balanced by bytes); downstream stages work on them in parallel")
    block_size_mb: float | None = Field(
        128, ge=0, description="files larger than this (MiB) are cleaned by several tasks, "
        "one per piece of about this size: JSONL and CSV cut at line (record) starts, text "
        "at paragraph starts, Parquet at row groups; the output is the same bytes as when "
        "read whole. Compressed files, text with split 'file' and Hugging Face datasets "
        "are read whole; 0 or null: never split")
