"""What the data stages and the trainers share.

packed.py   the on-disk format of a tokenized dataset (Arrow IPC shards + index.json)
row_writer.py, example_writer.py   write shards of it (one token column; several columns)
loader.py   ExampleLoader: memory-mapped, rank-sharded, resumable batches (torch), made
            by the batch builder its caller hands it (an objective's: stages.objectives)
mixing.py   MixtureLoader: several datasets by weight, one source per global batch (dataset.mixture)
hashing.py  seeded hashing of document ids (train/validation split, tokenizer sample)
parallel.py map a function over work items as Ray tasks, or in process without Ray
"""
