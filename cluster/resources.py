"""Does the cluster have what the config asks for? Checked before submitting, because a
Ray Train run that asks for more than the cluster has waits forever instead of failing.

A cluster with an autoscaler may grow to fit, so there a shortfall is only a warning.
"""

from __future__ import annotations

import json
import time
import urllib.request

from cluster.errors import ClusterError

TIMEOUT_S = 10
READY_WAIT_S = 10  # how long a just-started head may take to list itself


STAGES = ("pretrain", "finetune")  # the training stages; they run one after another


def required_resources(cfg) -> dict[str, float]:
    """What the largest training stage holds at once. Each Ray Train worker reserves one
    CPU (`resources_per_worker={"CPU": 1}` in stages/training/launch.py) and, with
    `gpus_per_worker` >= 1, that many GPUs; the driver and the Train controller reserve
    none. Stages run one after another, so the need is the maximum over stages, not the sum.
    "GPU" is present only when some stage asks for GPUs."""
    needs = {"CPU": float(max(_section(cfg, stage).num_workers for stage in STAGES))}
    gpus = max(_stage_gpus(cfg, stage) for stage in STAGES)
    if gpus > 0:
        needs["GPU"] = float(gpus)
    return needs


def _section(cfg, stage: str):
    return getattr(cfg, stage)


def _stage_gpus(cfg, stage: str) -> int:
    section = _section(cfg, stage)
    return section.num_workers * section.gpus_per_worker


def cluster_resources(dashboard_url: str) -> tuple[dict[str, float], bool]:
    """(total resources of the alive nodes, whether an autoscaler may add nodes).

    A head that has just started may not list itself or report its autoscaling status
    yet (a live cluster always has its head node alive): ask again for up to
    READY_WAIT_S seconds before taking the answer."""
    deadline = time.monotonic() + READY_WAIT_S
    while True:
        nodes = _get_json(f"{dashboard_url}/api/v0/nodes?detail=1&limit=10000")
        rows = ((nodes.get("data") or {}).get("result") or {}).get("result") or []
        alive = [node for node in rows if node.get("state") == "ALIVE"]
        status = (_get_json(f"{dashboard_url}/api/cluster_status").get("data") or {}).get("autoscalingStatus")
        if (alive and status) or time.monotonic() >= deadline:
            break
        time.sleep(1)
    totals: dict[str, float] = {}
    for node in alive:
        for name, amount in (node.get("resources_total") or {}).items():
            totals[name] = totals.get(name, 0.0) + float(amount)
    return totals, may_grow(status)


def may_grow(autoscaling_status: str | None) -> bool:
    """False only when the autoscaler's report shows a cluster with no worker node types
    to add (e.g. `ray start --head` alone); anything unclear counts as able to grow."""
    if not autoscaling_status or "Worker node types:" not in autoscaling_status:
        return True
    return bool(autoscaling_status.split("Worker node types:", 1)[1].strip())


def check_fits(cfg, dashboard_url: str, echo=print) -> None:
    """Raise ClusterError if a fixed-size cluster lacks what the config needs."""
    try:
        totals, autoscaling = cluster_resources(dashboard_url)
    except (OSError, ValueError) as error:
        echo(f"warning: could not read the cluster's resources ({error}); submitting anyway")
        return
    missing = {name: (need, totals.get(name, 0.0)) for name, need in required_resources(cfg).items()
               if totals.get(name, 0.0) < need}
    if not missing:
        return
    shortfall = ", ".join(f"{need:g} {name} needed, {have:g} present" for name, (need, have) in missing.items())
    if autoscaling:
        echo(f"warning: the cluster has too few resources right now ({shortfall}); its autoscaler "
             f"should add nodes, otherwise the job waits for them")
        return
    raise ClusterError(
        f"the cluster at {dashboard_url} cannot run {cfg.name}: {shortfall} "
        f"({'; '.join(_why(cfg, name) for name in missing)}). "
        f"{' '.join(_remedy(cfg, name, have) for name, (_, have) in missing.items())}")


def _why(cfg, resource: str) -> str:
    """Which config keys make up the need for `resource`."""
    if resource == "GPU":
        return ", ".join(f"{stage}.num_workers={_section(cfg, stage).num_workers} x {stage}.gpus_per_worker="
                         f"{_section(cfg, stage).gpus_per_worker}" for stage in STAGES if _stage_gpus(cfg, stage))
    return (", ".join(f"{stage}.num_workers={_section(cfg, stage).num_workers}" for stage in STAGES)
            + f", one {resource} each")


def _remedy(cfg, resource: str, have: float) -> str:
    if resource == "GPU" and have == 0:
        keys = " ".join(f"-o {stage}.gpus_per_worker=0" for stage in STAGES if _stage_gpus(cfg, stage))
        return f"The cluster has no GPUs: train on CPUs with {keys}, or add GPU nodes to the cluster."
    if resource == "GPU":
        return "Lower num_workers with -o, or add GPU nodes to the cluster."
    return "Lower num_workers with -o, or add nodes to the cluster."


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        return json.loads(response.read().decode("utf-8"))
