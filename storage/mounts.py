"""Which file system holds a path (/proc/mounts), and whether other machines see it.

One reader and one list of network file systems, for both questions that depend on them:
`submit` accepts a local-looking workdir for a multi-node cluster only when every node
sees it (a network file system mounted at the same path), and the stage lock
(storage.stage_lock) uses a lock file with a heartbeat instead of flock exactly there.
Two lists once disagreed, so a workdir `submit` accepted could be flock-locked as if local.
"""

from __future__ import annotations

from pathlib import Path

from storage.urls import is_url

PROC_MOUNTS = Path("/proc/mounts")
# Filesystem types of /proc/mounts that are shared between machines.
NETWORK_FILE_SYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs",
    "fuse.glusterfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs", "fuse.mountpoint-s3", "fuse.ceph",
    "fuse.sshfs", "9p", "afs", "efs", "wekafs",
})


def filesystem_type(path: Path, mounts_file: Path | None = None) -> str | None:
    """The type of the filesystem holding `path` (the longest matching mount point), None
    when the mounts cannot be read."""
    try:
        lines = (mounts_file or PROC_MOUNTS).read_text().splitlines()
    except OSError:
        return None
    path = Path(path).resolve()
    best, best_type = "", None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point = fields[1].replace("\\040", " ")
        if (str(path) == mount_point or str(path).startswith(mount_point.rstrip("/") + "/")) \
                and len(mount_point) > len(best):
            best, best_type = mount_point, fields[2]
    return best_type


def is_network_mount(path: Path, mounts_file: Path | None = None) -> bool:
    return filesystem_type(path, mounts_file) in NETWORK_FILE_SYSTEMS


def is_shared_storage(workdir: str, mounts_file: Path | None = None) -> bool:
    """Whether every node of a cluster sees `workdir`: an object-store URL (file:// is
    this machine's disk) or a path on a network file system."""
    if is_url(workdir) and not workdir.startswith("file://"):
        return True
    return is_network_mount(Path(workdir), mounts_file)
