"""Is a workdir storage that every node of a cluster sees?

Each stage writes `<workdir>/<stage>/<fingerprint>/` and later stages (on other nodes)
read it, so on a multi-node cluster the workdir must be a URL (s3://, gs://) or a
network filesystem mounted at the same path everywhere. A local disk path works only
when the cluster is this machine.
"""

from __future__ import annotations

from pathlib import Path

# Filesystem types of /proc/mounts that are shared between machines.
NETWORK_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph",
                       "glusterfs", "fuse.glusterfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs",
                       "fuse.mountpoint-s3", "fuse.ceph", "9p", "efs", "wekafs")


def is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def filesystem_type(path: Path, mounts_file: Path = Path("/proc/mounts")) -> str | None:
    """The type of the filesystem holding `path` (the longest matching mount point)."""
    try:
        lines = mounts_file.read_text().splitlines()
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


def is_shared_storage(workdir: str, mounts_file: Path = Path("/proc/mounts")) -> bool:
    if is_url(workdir):
        return True
    return filesystem_type(Path(workdir), mounts_file) in NETWORK_FILESYSTEMS
