"""The engine: config schema, stage graph, fingerprints, artifact store, runner, CLI.

Nothing here imports torch, Ray or DeepSpeed at module load, so `pretrain plan` and
`pretrain status` start fast; stage code is imported only when a stage runs.
"""
