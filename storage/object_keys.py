"""Object-store locations (s3://bucket/prefix, gs://..., memory://...) and the few
operations the stage store needs from them that a plain upload does not give.

Everything goes through fsspec (s3fs for s3://, gcsfs for gs://), so credentials and the
endpoint come from where the cloud SDKs look for them. S3: AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_PROFILE and ~/.aws/config, an instance
role; AWS_ENDPOINT_URL for an S3-compatible server (MinIO, Ceph, moto). GCS: gcsfs's
default chain (GOOGLE_APPLICATION_CREDENTIALS, gcloud's application-default login, the
metadata server of a GCE/GKE machine); STORAGE_EMULATOR_HOST for an emulator
(fake-gcs-server), reached anonymously. Nothing here logs or stores a credential.

An object store has no rename, so "write the manifest last, atomically" becomes "upload
every file, then create the manifest key with a conditional put": the create succeeds for
exactly one writer and every reader sees either no manifest or the whole one (an object
is never visible half-written). The stage lease (storage.object_lease) needs
compare-and-swap on one key. Both are the server's own preconditions:

- S3 (since 2024): create is If-None-Match: *, replace and delete are If-Match: <etag>.
- GCS: the "etag" is the object's generation (a number the server gives each write).
  Create is an upload with ifGenerationMatch=0, replace one with
  ifGenerationMatch=<generation>, delete a DELETE with ifGenerationMatch=<generation>
  (after a read of the generation, for emulators: _gcs_delete); HTTP 412 is
  PreconditionFailed.

On other fsspec file systems `create` uses fsspec's exclusive mode "xb" where it exists,
and `replace`/`delete` are not fenced (documented in object_lease).

Which stores: STORE_SCHEMES, checked before fsspec is asked (it knows ftp://, http:// and
more, and would connect to them first). Opening a run's store (`open_bucket`) asks the
server for the bucket once per process, with short timeouts and one retry: a bucket that
does not exist, refused credentials and an endpoint nobody answers on are each one clear
error within seconds, before a stage or Ray starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from storage.errors import ConfigError
from storage.urls import join


# What a workdir or store URL may name: the stores whose conditional writes the commit and
# the lease rely on (ObjectKeys), and fsspec's in-process memory:// (tests, one process).
STORE_SCHEMES = ("s3", "gs", "gcs", "memory")
# The bucket check's limits: an endpoint nobody answers on fails in seconds, not minutes.
PROBE_CONNECT_SECONDS = 3
PROBE_READ_SECONDS = 5
_reached: set[tuple[str, str, str | None]] = set()


def filesystem(url: str):
    """(fsspec file system, path inside it) for a URL; a clear error when the scheme is not
    a store of runs or the protocol's package is missing."""
    from storage.bucket_fs import url_filesystem

    scheme = url.partition("://")[0].lower()
    if scheme not in STORE_SCHEMES:
        raise ConfigError(f"{url}: {scheme}:// is not an object store a run can live in; use "
                          f"s3://bucket/prefix (AWS S3, or an S3-compatible server named by AWS_ENDPOINT_URL), "
                          f"gs://bucket/prefix, or a local or mounted path")
    try:
        return url_filesystem(url)
    except ImportError as error:
        raise ConfigError(f"{url}: reading this object store needs a package that is not installed "
                          f"({error}); s3:// needs s3fs, gs:// gcsfs (requirements/runtime.txt has both)") from None
    except ValueError as error:
        raise ConfigError(f"{url}: not a location fsspec knows ({error})") from None


def open_bucket(url: str):
    """`filesystem(url)` for a run's store, once its bucket is known to be there (see the
    module docstring)."""
    fs, path = filesystem(url)
    bucket, _, prefix = path.partition("/")
    protocols = _protocols(fs)
    seen = (protocols[0], bucket, os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("STORAGE_EMULATOR_HOST"))
    if seen in _reached or not ({"s3", "gs", "gcs"} & set(protocols)):
        return fs, path
    if "s3" in protocols:
        _check_s3_bucket(fs, url, bucket, prefix)
    else:
        _check_gcs_bucket(fs, url, bucket, prefix)
    _reached.add(seen)
    return fs, path


def _check_s3_bucket(fs, url: str, bucket: str, prefix: str) -> None:
    from botocore.exceptions import BotoCoreError, NoCredentialsError

    # Its own client (the run's keeps botocore's patient retries for the long haul), with
    # the run's options otherwise: credentials and endpoint are found the same way.
    options = {key: value for key, value in fs.storage_options.items()
               if key != "skip_instance_cache"}
    config = {**options.pop("config_kwargs", {}), "connect_timeout": PROBE_CONNECT_SECONDS,
              "read_timeout": PROBE_READ_SECONDS, "retries": {"total_max_attempts": 2, "mode": "standard"}}
    probe = type(fs)(**options, config_kwargs=config, skip_instance_cache=True)
    probe.retries = 1  # s3fs's own retry loop (a class setting), on top of botocore's
    endpoint = options.get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL")
    where = f" at {endpoint} (AWS_ENDPOINT_URL)" if endpoint else ""
    try:
        # A listing of the run's prefix, as the store makes: it needs no more permission
        # than the run does (a HEAD of the bucket would, where a policy grants one prefix).
        probe.call_s3("list_objects_v2", Bucket=bucket, Prefix=_folder(prefix), MaxKeys=1)
    except FileNotFoundError:
        raise ConfigError(f"{url}: the bucket '{bucket}' does not exist{where}; create it first "
                          f"(`aws s3 mb s3://{bucket}`), or fix the URL in workdir/store") from None
    except PermissionError as error:
        raise ConfigError(f"{url}: access to the bucket '{bucket}' was refused{where} ({error}); check the "
                          f"credentials (AWS_PROFILE, or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)") from None
    except NoCredentialsError:
        raise ConfigError(f"{url}: no credentials for S3; set AWS_PROFILE, or AWS_ACCESS_KEY_ID / "
                          f"AWS_SECRET_ACCESS_KEY") from None
    except (OSError, BotoCoreError) as error:
        raise ConfigError(f"{url}: cannot reach the object store{where or ' (AWS S3)'}: {error}; check "
                          f"AWS_ENDPOINT_URL and the network, then run again") from None


def _folder(prefix: str) -> str:
    return prefix.strip("/") + "/" if prefix.strip("/") else ""


def _check_gcs_bucket(fs, url: str, bucket: str, prefix: str) -> None:
    import asyncio

    import aiohttp
    from fsspec.asyn import FSTimeoutError, sync

    endpoint = os.environ.get("STORAGE_EMULATOR_HOST")
    where = f" at {endpoint} (STORAGE_EMULATOR_HOST)" if endpoint else ""
    # gcsfs retries each request 6 times with backoff (over 30 s, logging each failure with
    # its traceback): the check sends the request without that decorator, twice at most.
    request = getattr(type(fs)._request, "__wrapped__", None)

    async def list_one():
        for attempt in range(2):
            try:
                # Objects, not the bucket's metadata: roles/storage.objectAdmin may not read that.
                if request is None:
                    return await fs._call("GET", "b/{}/o", bucket, prefix=_folder(prefix), maxResults=1)
                return await request(fs, "GET", "b/{}/o", bucket, prefix=_folder(prefix), maxResults=1)
            except (aiohttp.ClientError, asyncio.TimeoutError):
                if attempt:
                    raise
                await asyncio.sleep(0.5)

    deadline = 2 * (PROBE_CONNECT_SECONDS + PROBE_READ_SECONDS)
    try:
        sync(fs.loop, list_one, timeout=deadline)
    except FSTimeoutError:
        raise ConfigError(f"{url}: the object store{where or ' (Google Cloud Storage)'} did not answer within "
                          f"{deadline} s; check the network and credentials, then run again") from None
    except FileNotFoundError:
        raise ConfigError(f"{url}: the bucket '{bucket}' does not exist{where}; create it first "
                          f"(`gcloud storage buckets create gs://{bucket}`), or fix the URL in workdir/store") from None
    except Exception as error:  # noqa: BLE001 - gcsfs raises aiohttp's, google-auth's and its own
        if isinstance(error, PermissionError) or str(error).startswith("Forbidden"):
            raise ConfigError(f"{url}: access to the bucket '{bucket}' was refused{where}; check the "
                              f"credentials (GOOGLE_APPLICATION_CREDENTIALS, or `gcloud auth "
                              f"application-default login`)") from None
        raise ConfigError(f"{url}: cannot reach the object store{where or ' (Google Cloud Storage)'}: "
                          f"{type(error).__name__}: {error}; check the network and credentials, then run "
                          f"again") from None


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
        protocols = _protocols(fs)
        self.is_s3 = "s3" in protocols
        self.is_gcs = "gs" in protocols or "gcs" in protocols

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
        if self.is_gcs:
            return _gcs_read(self.fs, path)
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
        if self.is_gcs:
            return _gcs_upload(self.fs, path, data, if_generation_match="0")  # 0: no live object
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
        if self.is_gcs:
            return _gcs_upload(self.fs, path, data, if_generation_match=etag)
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
        if self.is_gcs:
            _gcs_delete(self.fs, path, etag)
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


# -- GCS: the JSON API through gcsfs's own session and credentials (fs.call) ---------------
READ_ATTEMPTS = 5  # a lease is rewritten every 10 s: even one retry is rare


def _gcs_read(fs, path: str) -> ObjectVersion | None:
    """The object's metadata first (its generation, `updated`, and the server's Date),
    then the bytes of exactly that generation: a rewrite between the two 404s the second
    GET, and the read starts over, so bytes and generation always belong together."""
    bucket, key = _split(path)
    for _ in range(READ_ATTEMPTS):
        try:
            headers, body = fs.call("GET", "b/{}/o/{}", bucket, key)
        except FileNotFoundError:
            return None
        resource = json.loads(body)
        try:
            _, data = fs.call("GET", "b/{}/o/{}", bucket, key, alt="media", generation=resource["generation"])
        except FileNotFoundError:
            continue
        server_now = _http_date(headers.get("Date")) or time.time()
        updated = resource.get("updated")
        age = server_now - _rfc3339(updated) if updated else None
        return ObjectVersion(data, str(resource["generation"]), age)
    raise OSError(f"{path}: rewritten during each of {READ_ATTEMPTS} reads (or the server does not "
                  f"serve an object by its generation)")


def _gcs_upload(fs, path: str, data: bytes, *, if_generation_match: str) -> str:
    """One multipart upload with ifGenerationMatch; returns the new generation. gcsfs's
    pipe_file(mode="create") sends ifGenerationMatch=0 the same way, but takes no other
    generation and does not say which one it wrote, so create and replace both come here.
    (Multipart, not uploadType=media: fake-gcs-server 1.54 ignores the precondition on a
    media upload.)"""
    import uuid
    from urllib.parse import quote

    bucket, key = _split(path)
    boundary = uuid.uuid4().hex  # never inside the JSON part or, in practice, the data
    body = b"".join([
        f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
        json.dumps({"name": key}).encode(),
        f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
        data,
        f"\r\n--{boundary}--".encode()])
    try:
        resource = fs.call("POST", f"{fs._location}/upload/storage/v1/b/{quote(bucket, safe='')}/o",
                           uploadType="multipart", ifGenerationMatch=if_generation_match,
                           headers={"Content-Type": f'multipart/related; boundary="{boundary}"'},
                           data=body, json_out=True)
    except FileExistsError:  # gcsfs raises it for HTTP 412, a failed precondition
        raise PreconditionFailed(path) from None
    fs.invalidate_cache(path)
    return str(resource["generation"])


def _gcs_delete(fs, path: str, generation: str) -> None:
    """DELETE with ifGenerationMatch, which real GCS enforces. The read before it answers
    for servers that do not: fake-gcs-server 1.54 deletes whatever generation is live, so
    on it only that read keeps a stale holder off the new holder's object (a rewrite
    between the read and the DELETE would still be lost there, never on GCS)."""
    bucket, key = _split(path)
    try:
        _, body = fs.call("GET", "b/{}/o/{}", bucket, key, fields="generation")
    except FileNotFoundError:
        return
    if str(json.loads(body)["generation"]) != generation:
        raise PreconditionFailed(path)
    try:
        fs.call("DELETE", "b/{}/o/{}", bucket, key, ifGenerationMatch=generation)
    except FileNotFoundError:
        pass
    except FileExistsError:  # HTTP 412
        raise PreconditionFailed(path) from None
    fs.invalidate_cache(path)


def put_files(url: str, directory, names) -> None:
    """Upload the files `names` (relative to the local `directory`) to the same names under
    `url`; names missing locally are skipped."""
    from pathlib import Path

    fs, base = open_bucket(url)
    for name in names:
        local = Path(directory) / name
        if local.is_file():
            fs.put_file(str(local), join(base, name))


def get_missing_files(url: str, directory, names) -> None:
    """The reverse of put_files for the names the local `directory` lacks and `url` has."""
    from pathlib import Path

    fs, base = open_bucket(url)
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
    from fsspec.asyn import FSTimeoutError, sync

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


def _rfc3339(value: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _as_timestamp(value) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    return value.timestamp()
