from pydantic import Field

from stages.section import Section


class SourceConfig(Section):
    """One corpus source."""

    path: str = Field(description="file, directory or glob; local path or fsspec URL")
    format: str = Field("text", description="text | jsonl")
    text_field: str = Field("text", description="JSONL field holding the document text")
    split: str = Field("paragraph", description="text only: paragraph | line | file")


class IngestConfig(Section):
    sources: list[SourceConfig] = Field(description="corpus sources, read in order")
    normalization: str = Field("NFC", description="Unicode normal form: NFC | NFKC")
    min_chars: int = Field(200, ge=0, description="drop documents shorter than this")
    dedup: str = Field("exact", description="exact | none")
    num_shards: int = Field(4, ge=1, description="Parquet output shards")
