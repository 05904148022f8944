"""What the data stages and the trainers share.

packed.py   the on-disk format of a tokenized dataset (Arrow IPC shards + index.json)
loader.py   PackedSequenceLoader: memory-mapped, rank-sharded, resumable batches (torch)
mixing.py   MixtureLoader: several datasets by weight, one source per global batch (dataset.mixture)
hashing.py  seeded hashing of document ids (train/validation split, tokenizer sample)
parallel.py map a function over work items as Ray tasks, or in process without Ray
"""
