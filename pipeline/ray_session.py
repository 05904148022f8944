"""Start or connect to Ray on first need, and shut down only what we started."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


class RaySession:
    def __init__(self, ray_config):
        self.ray_config = ray_config
        self.started = False

    def ensure_started(self, echo=print) -> None:
        import ray  # imported here: `plan`, `status` and cached reruns never pay for it

        if ray.is_initialized():
            return
        address = self.ray_config.address
        # Workers must import `stages` whether or not the project is pip-installed.
        pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
        runtime_env = {"env_vars": {"PYTHONPATH": pythonpath}}
        if address:
            echo(f"connecting to Ray at {address}")
            ray.init(address=address, runtime_env=runtime_env)
        else:
            # The dashboard stays on: Ray Train V2 polls controller state through it,
            # and logs an error every second without it.
            ray.init(num_cpus=self.ray_config.num_cpus, runtime_env=runtime_env)
            echo(f"started local Ray ({ray.cluster_resources().get('CPU', 0):.0f} CPUs)")
        self.started = True

    def __enter__(self) -> "RaySession":
        return self

    def __exit__(self, *exc) -> None:
        if self.started:
            import ray

            ray.shutdown()
