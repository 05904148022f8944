"""`latest/<stage>` of an object-store workdir (s3://, moto's server on loopback, plain
stage functions, no Ray): an object per stage holding the URL of the stage's folder, and
the run reads as before (status counts no `latest` stage)."""

from __future__ import annotations

import json

from pipeline.config import load_config
from pipeline.graph import STAGE_NAMES
from pipeline.status import stage_rows
from tests.unit.test_s3_engine import FakeStages, bucket, config_file, objects, run  # noqa: F401 (fixtures)


def test_a_bucket_workdir_gets_an_object_per_stage_holding_its_url(bucket, config_file):
    url = f"{bucket}/runs/x"
    run(config_file, FakeStages(), [f"workdir={url}"])
    stored = objects(url)
    fingerprints = json.loads(stored["runs/x/pipeline.json"])["stages"]
    for stage in STAGE_NAMES:
        assert stored[f"runs/x/latest/{stage}"].decode() == f"{url}/{stage}/{fingerprints[stage]}\n"
        assert f"runs/x/{stage}/{fingerprints[stage]}/out.txt" in stored
    assert [row["state"] for row in stage_rows(url)] == ["done"] * len(STAGE_NAMES)
    assert load_config(config_file, [f"workdir={url}"]).workdir_url == url
