"""The fsspec file system for a bucket URL (s3://, gs://, ...), the same in the driver
(pipeline.object_store) and in a task on any node (stages.staging).

Listings are never cached: other drivers and other nodes' tasks write under the same
prefix. A GCS emulator (STORAGE_EMULATOR_HOST, which gcsfs reads itself) gets two
departures from what real GCS gets, both because an emulator is not Google: no
credentials (token="anon"; the default chain would offer this machine's Google login to
it), and gcsfs's core class, not the default gcsfs.GCSFileSystem (since 2026 its
ExtendedGcsFileSystem, which asks the Storage Control API over gRPC for each bucket's
type: an emulator does not serve it, and every call waited out a 30-60 s timeout).
"""

from __future__ import annotations

import os


def url_filesystem(url: str):
    """(file system, path inside it) for `url`."""
    if url.split("://", 1)[0] in ("gs", "gcs") and os.environ.get("STORAGE_EMULATOR_HOST"):
        from gcsfs.core import GCSFileSystem

        fs = GCSFileSystem(token="anon", use_listings_cache=False)
        return fs, fs._strip_protocol(url)
    import fsspec

    return fsspec.core.url_to_fs(url, use_listings_cache=False)
