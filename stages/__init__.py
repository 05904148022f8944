"""Stage code: one package per stage, plus what stages share (models, data, training).

A stage is a plain function `run(ctx) -> dict` (metrics). Model and data code here
never import Ray, DeepSpeed or the engine (`pipeline`).
"""
