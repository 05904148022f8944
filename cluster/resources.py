"""Does the cluster have what the config asks for? Checked before submitting, because a
Ray Train run that asks for more than the cluster has waits forever instead of failing.

A cluster with an autoscaler may grow to fit, so there a shortfall is only a warning.
"""

from __future__ import annotations

import json
import urllib.request

from cluster.errors import ClusterError

TIMEOUT_S = 10


def required_resources(cfg) -> dict[str, float]:
    """What the largest training stage holds at once: one CPU per Ray Train worker
    (`resources_per_worker={"CPU": 1}` in stages/training/launch.py); the driver and the
    Train controller reserve none."""
    return {"CPU": float(max(cfg.pretrain.num_workers, cfg.finetune.num_workers))}


def cluster_resources(dashboard_url: str) -> tuple[dict[str, float], bool]:
    """(total resources of the alive nodes, whether an autoscaler may add nodes)."""
    nodes = _get_json(f"{dashboard_url}/api/v0/nodes?detail=1&limit=10000")
    rows = ((nodes.get("data") or {}).get("result") or {}).get("result") or []
    totals: dict[str, float] = {}
    for node in rows:
        if node.get("state") != "ALIVE":
            continue
        for name, amount in (node.get("resources_total") or {}).items():
            totals[name] = totals.get(name, 0.0) + float(amount)
    status = (_get_json(f"{dashboard_url}/api/cluster_status").get("data") or {}).get("autoscalingStatus")
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
        f"the cluster at {dashboard_url} cannot run {cfg.name}: {shortfall} (pretrain.num_workers="
        f"{cfg.pretrain.num_workers}, finetune.num_workers={cfg.finetune.num_workers}, one CPU each). "
        f"Lower num_workers with -o, or add nodes to the cluster")


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        return json.loads(response.read().decode("utf-8"))
