"""`<workdir>/latest/<stage>`: the fingerprint folder of each stage that the workdir's last
run used, as pipeline.json records it, for people and scripts that want a fixed path
(`runs/demo/latest/pretrain/hf`).

Each is a relative symlink (`../pretrain/<fp>`; a sweep point's into the shared store),
so a workdir moved as a whole keeps working. Where a link cannot be made (a file system
without symlinks), a small text file holds that same relative path instead; an
object-store workdir gets a small object `latest/<stage>` holding the stage's URL (a
local workdir whose store is in a bucket, a text file holding it). A
link is replaced atomically (made beside it, then renamed over it), and may point at a
folder that is not finished yet: the run writes them when it starts, as pipeline.json.

`latest` is no stage name (pipeline.graph.STAGE_NAMES), and nothing reads the workdir's
folders as stages except by those names.
"""

from __future__ import annotations

import os
from pathlib import Path

LATEST = "latest"


def write_latest_links(cfg, fingerprints: dict, echo=print) -> None:
    """Point `<workdir>/latest/<stage>` at every stage's folder for this run. A pointer
    that cannot be written is a warning, never a failed run."""
    names = {stage: fp for stage, (fp, _) in fingerprints.items()}
    try:
        if cfg.workdir_url:
            _write_objects(cfg, names)
            return
        latest = Path(cfg.resolved_workdir) / LATEST
        latest.mkdir(parents=True, exist_ok=True)
        symlinks = can_symlink(latest) and not cfg.store_url
        for stage, fp in names.items():
            if cfg.store_url:  # a local workdir whose stages live in a bucket: their URLs
                target = f"{cfg.store_url}/{stage}/{fp}"
            else:
                target = os.path.relpath(Path(cfg.resolved_store) / stage / fp, latest)
            write_pointer(latest / stage, target, symlink=symlinks)
    except OSError as error:
        echo(f"warning: could not write {LATEST}/ pointers in the workdir ({error}); the run goes on")


def write_pointer(path: Path, target: str, *, symlink: bool = True) -> None:
    """`path` -> `target` (relative to path's folder, or a URL): a symlink, or a text
    file holding the target. Replaces what is there atomically."""
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    if staging.is_symlink() or staging.exists():
        staging.unlink()
    if symlink:
        os.symlink(target, staging, target_is_directory=True)
    else:
        staging.write_text(target + "\n", encoding="utf-8")
    os.replace(staging, path)


def can_symlink(directory: Path) -> bool:
    probe = directory / f".symlink-probe.{os.getpid()}"
    try:
        os.symlink(".", probe)
    except (OSError, NotImplementedError):
        return False
    probe.unlink()
    return True


def _write_objects(cfg, names: dict) -> None:
    from storage.artifact_store import open_store

    remote = open_store(cfg.workdir_url, cfg.resolved_workdir)
    store_url = (cfg.store_url or cfg.workdir_url).rstrip("/")
    for stage, fp in names.items():
        remote.put_small(f"{LATEST}/{stage}", f"{store_url}/{stage}/{fp}\n".encode())
