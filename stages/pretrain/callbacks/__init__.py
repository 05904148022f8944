"""What the pretraining loop drives besides the optimizer steps, one callback each (after
OLMo-core's train/callbacks): the loop (stages/pretrain/train_loop.py) trains, checkpoints
and resumes; the callbacks, called in list order at each hook (base.py), do the rest.

    tracking.py            Progress: rank 0's progress line; Tracking: the last value of
                           each metric, and rank 0's metrics.jsonl and wandb
    evaluation.py          InLoopEval: validation loss and pretrain.eval_tasks, every
                           eval_every steps (collective)
    sampling.py            Samples: pretrain.samples' generations
    snapshots.py           WeightExport: model/ at the end, snapshots every snapshot_every
                           steps (collective)
    checkpoint_summary.py  the summary each checkpoint records (its metrics, the callbacks'
                           own entries)
"""
