"""Sweeps: one experiment per point of a grid or list of overrides, sharing the stage
outputs the points have in common.

expand.py turns a config's sweep: section and -o axes into validated points, children.py
runs each point as a child `pretrain run`, run.py plans and drives them and writes the
summary (views.runs_report), cli.py is the `pretrain sweep` command and `pretrain plan`
of a sweep.

Layer: the top one below cluster (`cluster -> sweep -> views -> pipeline -> stages`): a
sweep drives the engine and ends with a view. The sweep: section's schema stays with the
experiment file it is part of (pipeline/sweep_config.py): the engine validates the whole
file and cannot import upwards.
"""
