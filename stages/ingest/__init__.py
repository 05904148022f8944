"""Ingest stage: corpus files -> cleaned, deduplicated documents (Parquet shards).

run.py orchestrates and documents the output format; config.py is the YAML section;
sources.py finds and reads files, clean.py cleans text, staging.py cleans one file,
sharding.py deduplicates and writes the shards.
"""
