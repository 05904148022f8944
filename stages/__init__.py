"""Stage code: one package per stage, plus what stages share (models, data, training).

A stage is a plain function `run(ctx) -> dict` (metrics); `ctx` is typed with the protocol
in stages/context.py. Nothing here imports the engine (`pipeline`) or `cluster`, and model
and data code never import Ray or DeepSpeed either: the import contracts in pyproject.toml
(`lint-imports`); Ray tasks: stages/ray_tasks.py, Ray Train and DeepSpeed: stages/training/.
"""
