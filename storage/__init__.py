"""storage: the floor of the house, everything about where bytes live.

Below `stages` in the import contract (`cluster -> pipeline -> stages -> storage`): the
engine and the stages both stand on it, and it imports neither. Its one idea is a
*location*: a local path or an object-store URL (s3://, gs://, memory://), and what one
can do there: keep a stage's artifacts, lock a stage directory, copy files between a node
and the bucket. The engine decides what to store; storage decides how and where (kedro's
io layer, DVC's fs/, OLMo-core's io.py).

urls.py          is a location a URL or a path (one `is_url`), and the URL join
mounts.py        which file system holds a path; which ones other machines see
digest.py        the sha256 of a file, streamed
file_tree.py     what in a stage directory is bookkeeping, temporary or matched by a glob
errors.py        the user's mistake (ConfigError, exit 2), raised here as the config does
artifact_store.py  the protocol both stage stores satisfy
local_store.py   stage artifacts in a local (or mounted) folder: manifest written last
object_store.py  stage artifacts in a bucket, through this machine's mirror
object_keys.py   a bucket's conditional writes (create / replace / delete on one key)
mirror.py        this machine's local folder standing for a bucket prefix
bucket_fs.py     an fsspec file system for a URL, with the endpoint and credentials found
dataset_cache.py a dataset on a URL as a local copy to memory-map
writer_lock.py   the acquire / heartbeat / stale loop both stage locks share
stage_lock.py    one writer per local stage directory (flock, or a lock file on NFS)
object_lease.py  one writer per stage in a bucket (a lease key with compare-and-swap)
node_transfer/   an object-store run's tasks on any node: files in from the bucket, out to it
"""
