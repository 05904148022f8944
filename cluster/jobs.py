"""`pretrain jobs`, `pretrain logs JOB`, `pretrain stop JOB`, and following a job's logs."""

from __future__ import annotations

import asyncio
import sys
import time

from cluster.connection import connect
from cluster.errors import ClusterError

FINAL_STATES = ("SUCCEEDED", "FAILED", "STOPPED")


def list_jobs(address: str) -> list[dict]:
    """One row per job, newest first: id, status, start/end time, entrypoint, message.
    The runtime_env (which holds passed secrets) is never part of a row."""
    rows = []
    for job in connect(address).list_jobs():
        rows.append({
            "job": job.submission_id or job.job_id or "-", "status": str(job.status.value),
            "start": _time(job.start_time), "end": _time(job.end_time),
            "experiment": (job.metadata or {}).get("experiment", "-"),
            "message": (job.message or "").splitlines()[0][:80] if job.message else "",
        })
    return sorted(rows, key=lambda r: r["start"], reverse=True)


def job_logs(address: str, job_id: str) -> str:
    client = connect(address)
    _check_exists(client, job_id, address)
    return client.get_job_logs(job_id)


def job_status(address: str, job_id: str) -> str:
    client = connect(address)
    _check_exists(client, job_id, address)
    return str(client.get_job_status(job_id).value)


def stop_job(address: str, job_id: str) -> bool:
    """True if a stop was requested, False if the job had already ended."""
    client = connect(address)
    _check_exists(client, job_id, address)
    return bool(client.stop_job(job_id))


def follow(address: str, job_id: str, out=sys.stdout) -> str:
    """Stream the job's logs until it ends; returns its final status."""
    client = connect(address)

    async def stream() -> None:
        async for chunk in client.tail_job_logs(job_id):
            out.write(chunk)
            out.flush()

    try:
        asyncio.run(stream())
    except KeyboardInterrupt:
        print(f"\nstopped following; the job keeps running (`pretrain stop {job_id} --address "
              f"{address}` ends it)", file=sys.stderr)
        raise
    # The log stream can close a moment before the status turns final.
    deadline = time.time() + 30
    status = str(client.get_job_status(job_id).value)
    while status not in FINAL_STATES and time.time() < deadline:
        time.sleep(1)
        status = str(client.get_job_status(job_id).value)
    return status


def wait(address: str, job_id: str, timeout_s: float, poll_s: float = 2.0) -> str:
    """Poll until the job ends or `timeout_s` passes; returns the last status seen."""
    client = connect(address)
    deadline = time.time() + timeout_s
    status = str(client.get_job_status(job_id).value)
    while status not in FINAL_STATES and time.time() < deadline:
        time.sleep(poll_s)
        status = str(client.get_job_status(job_id).value)
    return status


def _check_exists(client, job_id: str, address: str) -> None:
    try:
        client.get_job_info(job_id)
    except Exception:  # noqa: BLE001 - the SDK raises RuntimeError with a 404 body
        raise ClusterError(f"no job '{job_id}' on the cluster at {address}; "
                           f"`pretrain jobs --address {address}` lists the jobs") from None


def _time(milliseconds: int | None) -> str:
    if not milliseconds:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(milliseconds / 1000))
