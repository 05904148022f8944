"""Running the pipeline on a Ray cluster: Ray Jobs submission (`pretrain submit`, `jobs`,
`logs`, `stop`) and ready-to-use cluster definitions (launcher YAML, KubeRay manifests).

Imports go cluster -> pipeline -> stages; nothing here is imported by the engine. The
installed `pretrain` command is cli.py, which hands the cluster commands to pipeline.cli.
"""
