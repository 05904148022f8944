"""Object-store locations (s3://bucket/prefix, gs://..., memory://...) and the few
operations the stage store needs from them that a plain upload does not give.

Everything goes through fsspec (s3fs for s3://), so credentials and the endpoint come from
where the AWS SDKs look for them: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
AWS_SESSION_TOKEN, AWS_PROFILE and ~/.aws/config, an instance role; AWS_ENDPOINT_URL for
an S3-compatible server (MinIO, Ceph, moto). Nothing here logs or stores a credential.

An object store has no rename, so "write the manifest last, atomically" becomes "upload
every file, then create the manifest key with a conditional put": S3's If-None-Match: *
makes the create succeed for exactly one writer and makes every reader see either no
manifest or the whole one (an object is never visible half-written). The stage lease
(pipeline.object_lease) needs compare-and-swap on one key: If-Match: <etag> on put and
delete. S3 has both since 2024; on other fsspec file systems `create` uses fsspec's
exclusive mode "xb" where it exists, and `replace`/`delete` are not fenced (documented
in object_lease).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pipeline.config import ConfigError


def is_url(location: str | os.PathLike | None) -> bool:
    """Whether a workdir/store setting names an object store rather than a local path."""
    return location is not None and "://" in str(location)


def join(url: str, *parts: str) -> str:
    return "/".join([url.rstrip("/"), *(str(p).strip("/") for p in parts if str(p))])


def filesystem(url: str):
    """(fsspec file system, path inside it) for a URL; a clear error when the protocol's
    package is missing or the bucket cannot be reached."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(url, use_listings_cache=False)  # other drivers write too: list afresh
    except ImportError as error:
        raise ConfigError(f"{url}: reading this object store needs a package that is not installed "
                          f"({error}); for s3:// install s3fs (requirements/runtime.txt has it)") from None
    except ValueError as error:
        raise ConfigError(f"{url}: not a location fsspec knows ({error})") from None


@dataclass(frozen=True)
class ObjectVersion:
    """What a conditional write needs: the object's bytes and its entity tag."""
    data: bytes
    etag: str
    age_seconds: float | None  # by the server's clock, when it says (no clock skew)


class PreconditionFailed(Exception):
    """A conditional write lost: the key exists (create) or changed (replace/delete)."""


class ObjectKeys:
    """Single-key operations with preconditions on one file system."""

    def __init__(self, fs):
        self.fs = fs
        self.is_s3 = "s3" in _protocols(fs)

    # -- reads ----------------------------------------------------------------------------
    def read(self, path: str) -> ObjectVersion | None:
        if self.is_s3:
            bucket, key = _split(path)
            try:
                response = self.fs.call_s3("get_object", Bucket=bucket, Key=key)
            except FileNotFoundError:
                return None
            data = _read_body(self.fs, response["Body"])
            server_now = _http_date(response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date"))
            modified = response.get("LastModified")
            age = (server_now - modified.timestamp()) if server_now and modified else None
            return ObjectVersion(data, response.get("ETag", ""), age)
        try:
            with self.fs.open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        info = self.fs.info(path)
        modified = info.get("mtime") or info.get("LastModified") or info.get("created")
        age = time.time() - _as_timestamp(modified) if modified else None
        return ObjectVersion(data, hashlib.md5(data).hexdigest(), age)

    # -- conditional writes ----------------------------------------------------------------
    def create(self, path: str, data: bytes) -> str:
        """Write `path` only if it does not exist; returns the new etag."""
        if self.is_s3:
            bucket, key = _split(path)
            response = self._conditional("put_object", Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            return response.get("ETag", "")
        try:
            with self.fs.open(path, "xb") as f:
                f.write(data)
        except FileExistsError:
            raise PreconditionFailed(path) from None
        return hashlib.md5(data).hexdigest()

    def replace(self, path: str, data: bytes, etag: str) -> str:
        """Overwrite `path` only if it still has `etag`; returns the new etag."""
        if self.is_s3:
            bucket, key = _split(path)
            return self._conditional("put_object", Bucket=bucket, Key=key, Body=data,
                                     IfMatch=etag).get("ETag", "")
        current = self.read(path)
        if current is None or current.etag != etag:
            raise PreconditionFailed(path)
        self.fs.pipe_file(path, data)  # not fenced: see the module docstring
        return hashlib.md5(data).hexdigest()

    def delete(self, path: str, etag: str) -> None:
        """Delete `path` only if it still has `etag` (gone already counts as deleted)."""
        if self.is_s3:
            bucket, key = _split(path)
            try:
                self._conditional("delete_object", Bucket=bucket, Key=key, IfMatch=etag)
            except FileNotFoundError:
                pass
            return
        current = self.read(path)
        if current is None:
            return
        if current.etag != etag:
            raise PreconditionFailed(path)
        self.fs.rm_file(path)

    def _conditional(self, method: str, **kwargs) -> dict:
        try:
            return self.fs.call_s3(method, **kwargs)
        except FileExistsError:  # s3fs maps 412 PreconditionFailed to FileExistsError
            raise PreconditionFailed(kwargs.get("Key")) from None
        except OSError as error:
            if "PreconditionFailed" in str(error) or "412" in str(error) or "pre-conditions" in str(error):
                raise PreconditionFailed(kwargs.get("Key")) from None
            raise


def put_files(url: str, directory, names) -> None:
    """Upload the files `names` (relative to the local `directory`) to the same names under
    `url`; names missing locally are skipped."""
    from pathlib import Path

    fs, base = filesystem(url)
    for name in names:
        local = Path(directory) / name
        if local.is_file():
            fs.put_file(str(local), join(base, name))


def get_missing_files(url: str, directory, names) -> None:
    """The reverse of put_files for the names the local `directory` lacks and `url` has."""
    from pathlib import Path

    fs, base = filesystem(url)
    for name in names:
        local = Path(directory) / name
        if not local.exists() and fs.exists(join(base, name)):
            local.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(join(base, name), str(local))


def read_json(fs, path: str) -> dict | None:
    try:
        data = fs.cat_file(path)
    except FileNotFoundError:
        return None
    return json.loads(data)


def json_bytes(data) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, default=str) + "\n").encode()


def _protocols(fs) -> tuple[str, ...]:
    protocol = fs.protocol
    return tuple(protocol) if isinstance(protocol, (tuple, list)) else (protocol,)


def _split(path: str) -> tuple[str, str]:
    bucket, _, key = path.partition("/")
    return bucket, key


def _read_body(fs, body) -> bytes:
    """call_s3 hands back aiobotocore's streaming body: read it on s3fs's event loop."""
    from fsspec.asyn import sync

    async def read():
        async with body as stream:
            return await stream.read()

    return sync(fs.loop, read)


def _http_date(value: str | None) -> float | None:
    if not value:
        return None
    from email.utils import parsedate_to_datetime

    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


def _as_timestamp(value) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    return value.timestamp()
