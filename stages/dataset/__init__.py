"""Dataset stage: documents + tokenizer -> packed rows of token ids (Arrow shards).

run.py orchestrates; config.py is the YAML section; packing.py turns one ingest shard into
examples with the objective's writer (`stages.objectives`); stats.py reads a finished
split's statistics back; mixture.py assigns documents to the parts of dataset.mixture.
The on-disk format lives in `stages.data.packed`, its writers beside it.
"""
