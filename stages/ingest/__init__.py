"""Ingest stage: corpus files -> cleaned, deduplicated documents (Parquet shards).

run.py orchestrates and documents the output format; config.py is the YAML section;
sources.py finds files and reads text files, records.py reads JSONL / CSV / Parquet /
Hugging Face records, clean.py cleans text, staging.py cleans one file,
sharding.py deduplicates and writes the shards.
"""
