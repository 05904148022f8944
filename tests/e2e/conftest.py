"""One finished tiny GPT run for every end-to-end module (the pipeline takes about a
minute on 2 cores; tests that damage it work on a copy)."""

from __future__ import annotations

import pytest

from tests.e2e.cli import pretrain_cli

CONFIG = "configs/gpt-tiny.yaml"


@pytest.fixture(scope="session")
def ray_address(ray_session) -> str:
    return ray_session.get_runtime_context().gcs_address


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory, ray_address):
    workdir = tmp_path_factory.mktemp("e2e") / "gpt-tiny"
    args = (CONFIG, "-o", f"workdir={workdir}", "-o", f"ray.address={ray_address}")
    result = pretrain_cli("run", *args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return workdir, args, result
