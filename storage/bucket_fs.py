"""The fsspec file system for a bucket URL (s3://, gs://, ...), the same in the driver
(storage.object_keys) and in a task on any node (storage.node_transfer).

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


def url_filesystem(url: str, options: dict | None = None):
    """(file system, path inside it) for `url`; `options` from `connection_options` of
    another process (the driver's) take the place of this process's environment."""
    options = dict(options or {})
    given = options.pop("emulator", None)
    if url.split("://", 1)[0] in ("gs", "gcs") and (given or os.environ.get("STORAGE_EMULATOR_HOST")):
        from gcsfs.core import GCSFileSystem

        # The driver's emulator, when it told us; else gcsfs reads STORAGE_EMULATOR_HOST.
        endpoint = {"endpoint_url": given if "://" in given else f"http://{given}"} if given else {}
        fs = GCSFileSystem(token="anon", use_listings_cache=False, **endpoint)
        return fs, fs._strip_protocol(url)
    import fsspec

    return fsspec.core.url_to_fs(url, use_listings_cache=False, **options)


def connection_options(url: str) -> dict:
    """How this process reaches `url`'s store, as explicit options for `url_filesystem`
    in a Ray task: its workers may have started before the driver's environment had the
    endpoint and credentials (a cluster started earlier, a test's session Ray), as
    stages.training.launch.ray_storage does for Ray Train. Empty when the environment
    names none: each node then uses its own chain (instance role, ~/.aws, gcloud)."""
    scheme = url.split("://", 1)[0]
    if scheme in ("gs", "gcs"):
        emulator = os.environ.get("STORAGE_EMULATOR_HOST")
        return {"emulator": emulator} if emulator else {}
    if scheme not in ("s3", "s3a"):
        return {}
    options: dict = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    client = {key: value for key, value in (("endpoint_url", endpoint), ("region_name", region)) if value}
    if client:
        options["client_kwargs"] = client
    if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
        options.update(key=os.environ["AWS_ACCESS_KEY_ID"], secret=os.environ["AWS_SECRET_ACCESS_KEY"])
        if os.environ.get("AWS_SESSION_TOKEN"):
            options["token"] = os.environ["AWS_SESSION_TOKEN"]
    return options
