"""The artifact store on S3 (or any S3-compatible server), through s3fs.

Layout under ``s3://bucket/prefix``::

    blobs/<first 2 hex>/<remaining 62 hex>   one immutable object per distinct content
    touch/<first 2 hex>/<remaining 62 hex>   empty: the last reuse of that blob, for gc

**A write is visible only when complete.** Blobs are uploaded straight to their
content key, not to a temp key then copied: S3 makes an object visible only
when its PUT, or the CompleteMultipartUpload of a multipart upload, succeeds, and
then whole; an interrupted upload leaves no object (s3fs aborts the multipart upload
on an error; one left by a killed process is invisible and :meth:`S3ArtifactStore.sweep_temp`
aborts it after the grace period). A temp key and a server-side copy would buy
nothing more and cost a second write of every byte (a multipart copy above 5 GB).
Two writers of the same content both PUT the same bytes to the same key: whichever
lands last, the object is complete and correct. Content up to ``_SMALL_PUT`` goes up
in one conditional PUT (``If-None-Match: *``: stored unless the key exists), which
replaces the HEAD that otherwise checks whether the blob is already there.

**Memory.** Uploads stream from the file on disk: each request's body is a
``_FileRegion`` (a read-only, seekable view of one byte range of the file) that
botocore reads for its checksums and aiohttp streams in 64 KiB pieces, so a put
holds a few MiB whatever the file's size. Files up to ``_SINGLE_PUT_MAX`` go up in
one PUT, larger ones as a multipart upload of ``_PART``-byte parts, ``_PARTS_IN_FLIGHT``
at once. (s3fs's ``put_file`` reads every part into a bytes object, plus a copy, so
with its defaults a 64 MiB file costs 130 MiB of memory; its multipart loop is
followed here, only the bodies differ.) Streams are spooled to a local temp file
while being hashed (the key is their hash, known only at the end), then uploaded
the same way.

**Retries.** botocore's own retry handler does them, configured by the standard
``AWS_RETRY_MODE`` / ``AWS_MAX_ATTEMPTS`` (default here: ``standard``, 8 attempts):
exponential back-off with jitter on throttling (503 SlowDown) and transient 5xx and
connection errors; s3fs's own retry loop is set to one try so the two do not multiply.
A 403 is not retried: it fails at once with an error naming the bucket.

**Credentials and endpoint** come only from the standard AWS chain (environment,
``~/.aws/config`` and ``credentials``, ``AWS_PROFILE``, instance roles...); the endpoint
of an S3-compatible server from ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` or the
profile's ``endpoint_url``. Reprise never reads, stores or prints a secret; a URL with
credentials in it is refused.

**gc.** S3 cannot tell live processes, so the grace period protects fresh writes: a
put refreshes the blob's age (a new object, or for content already present a tiny
``touch/`` object once the blob is over ``_TOUCH_AFTER`` seconds old) and gc re-reads
a doomed blob's age just before deleting it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any, BinaryIO, cast
from urllib.parse import urlsplit

from reprise.core._atomic import TMP_PREFIX, atomic_write
from reprise.core._hashing import hash_bytes, hash_file, new_hasher
from reprise.core._units import parse_size
from reprise.core.errors import ConfigError, IntegrityError, StoreError
from reprise.store._artifacts import _CHUNK, BaseArtifactStore, _check_copy_flags, _check_hash
from reprise.store._blobcache import DEFAULT_CACHE_SIZE, BlobCache, default_cache_dir

__all__ = ["S3ArtifactStore"]

_SMALL_PUT = 8 << 20  # up to this, a put sends bytes from memory in one conditional PUT
_SINGLE_PUT_MAX = 100 << 20  # larger files go up in parts (s3fs's threshold too)
_PART = 32 << 20  # multipart part size (S3: 5 MiB to 5 GiB, at most 10,000 parts)
_PARTS_IN_FLIGHT = 4  # streamed from disk: costs connections, not memory
_MAX_PARTS = 10_000
_READ_BLOCK = 4 << 20  # ranged GETs of a streamed read (a few are held at once)
_TOUCH_AFTER = 60.0
_DEFAULT_ATTEMPTS = 8


class _StaleCopy(Exception):
    """A cached copy whose bytes do not hash to its name (see ``copy_to``)."""


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


# errors of os.link that mean "no link here" (another filesystem, no hard links, too many
# links), not a failure: the caller copies instead
_NO_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EOPNOTSUPP,
                      errno.ENOTSUP, errno.EACCES})


def _link_beside(src: Path, dest: Path) -> Path | None:
    """A hard link to the read-only file ``src`` under a temp name beside ``dest`` (for the
    caller to rename onto ``dest``), or None where no link can be made or ``src`` is
    writable by its owner (a link would let the loader change the cached copy). A
    ``FileNotFoundError`` (``src`` evicted meanwhile) is the caller's."""
    if os.stat(src).st_mode & 0o222:
        return None
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
    try:
        os.link(src, tmp)
    except OSError as exc:
        if exc.errno in _NO_LINK:
            return None
        raise
    return tmp


def _send_all(src: IO[bytes], out: IO[bytes], path: Path) -> None:
    """Copy the whole of ``src`` into ``out`` in the kernel."""
    size, offset = os.fstat(src.fileno()).st_size, 0
    while offset < size:
        sent = os.sendfile(out.fileno(), src.fileno(), offset, size - offset)
        if sent == 0:
            raise StoreError(f"the cached copy {path} shrank while being copied")
        offset += sent


class _FileRegion(io.RawIOBase):
    """A read-only, seekable view of ``length`` bytes of a file from ``offset``: an upload
    body that botocore and aiohttp read in pieces (and rewind for a retry), so no part
    is ever held whole in memory. Written here because neither s3fs nor botocore offers
    one: s3fs reads each part into bytes, and botocore would send a plain file to its end.
    """

    def __init__(self, path: Path, offset: int, length: int) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._start, self._length, self._pos = offset, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = (0, self._pos, self._length)[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self._length - self._pos)
        if n <= 0:
            return 0
        got = os.preadv(self._fd, [memoryview(buffer)[:n]], self._start + self._pos)
        self._pos += got
        return got

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


def _endpoint() -> str:
    return (os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            or "the default AWS endpoint")


class S3ArtifactStore(BaseArtifactStore):
    """Content-addressed blobs in ``s3://bucket/prefix`` with a local read-through cache.

    ``cache_dir`` / ``cache_size`` (bytes; 0 turns the cache off) default to
    ``REPRISE_ARTIFACTS_CACHE_DIR`` / ``REPRISE_ARTIFACTS_CACHE_SIZE``, then
    ``~/.cache/reprise/blobs`` and 5 GiB.
    """

    def __init__(self, url: str, *, cache_dir: str | os.PathLike[str] | None = None,
                 cache_size: int | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("s3", "s3a"):
            raise ConfigError(f"{parts.scheme}:// is not an S3 URL; use s3://bucket/prefix.")
        if "@" in parts.netloc or parts.password is not None:
            # never echo the URL: it holds a secret
            raise ConfigError(
                "The S3 artifact store URL has credentials in it; remove them and use the "
                "standard AWS chain instead (AWS_PROFILE, AWS_ACCESS_KEY_ID/"
                "AWS_SECRET_ACCESS_KEY, ~/.aws/credentials or an instance role).")
        if not parts.netloc or parts.query or parts.fragment:
            raise ConfigError(  # not echoed: a query string may hold a token
                "The S3 artifact store URL is not of the form s3://bucket/prefix (a bucket, "
                "an optional prefix, no ?query or #fragment); fix [artifacts] url or "
                "REPRISE_ARTIFACTS_URL.")
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/")
        self.url = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        self.root = f"{self.bucket}/{self.prefix}".rstrip("/")
        self._fs: Any = None
        self._fs_pid = 0
        self._conditional = True  # the server honours If-None-Match on PUT (S3 since 2024)
        if cache_size is None:
            env = os.environ.get("REPRISE_ARTIFACTS_CACHE_SIZE")
            cache_size = parse_size(env, "REPRISE_ARTIFACTS_CACHE_SIZE") if env else \
                DEFAULT_CACHE_SIZE
        if cache_dir is None or str(cache_dir) == "":
            cache_dir = os.environ.get("REPRISE_ARTIFACTS_CACHE_DIR") or default_cache_dir()
        self.cache = BlobCache(cache_dir, cache_size) if cache_size > 0 else None

    # -- the connection ------------------------------------------------------------------
    @property
    def fs(self) -> Any:
        # a forked child makes its own: the parent's event-loop thread is not in the child
        if self._fs is None or self._fs_pid != os.getpid():
            import s3fs  # lazily: slow to import, and only S3 stores need it

            attempts = os.environ.get("AWS_MAX_ATTEMPTS") or str(_DEFAULT_ATTEMPTS)
            if not attempts.isdigit() or int(attempts) < 1:
                raise ConfigError(f"AWS_MAX_ATTEMPTS must be a whole number >= 1, got "
                                  f"{attempts!r}.")
            # total attempts, first included, as AWS_MAX_ATTEMPTS means (botocore's
            # "max_attempts" key in this dict would count retries only)
            retries = {"mode": os.environ.get("AWS_RETRY_MODE") or "standard",
                       "total_max_attempts": int(attempts)}
            fs = s3fs.S3FileSystem(
                use_listings_cache=False,  # other processes write and delete meanwhile
                skip_instance_cache=True,  # its own client, for the endpoint in force now
                config_kwargs={"retries": retries},
            )
            fs.retries = 1  # botocore retries (config above); s3fs's loop would multiply them
            self._fs, self._fs_pid = fs, os.getpid()
        return self._fs

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Denied, missing-bucket and unreachable-endpoint errors become one clear error;
        none of them prints a credential (the messages name only the bucket and endpoint)."""
        try:
            yield
        except PermissionError:
            raise ConfigError(
                f"S3 refused to {action} in bucket {self.bucket!r} (prefix {self.prefix!r}): "
                "access denied. Check the credentials the standard AWS chain finds "
                "(AWS_PROFILE, AWS_ACCESS_KEY_ID, ~/.aws/credentials, instance role) allow "
                "s3:GetObject, s3:PutObject, s3:DeleteObject and s3:ListBucket there, and "
                f"that the endpoint ({_endpoint()}) is the right server.") from None
        except Exception as exc:
            name = type(exc).__name__
            if name in ("NoCredentialsError", "PartialCredentialsError"):
                raise ConfigError(
                    f"No AWS credentials found for the S3 artifact store s3://{self.bucket}: "
                    "set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or use "
                    "~/.aws/credentials or an instance role.") from None
            if name in ("EndpointConnectionError", "ConnectTimeoutError",
                        "ClientConnectorError", "ConnectionError"):
                raise StoreError(
                    f"Cannot reach the S3 endpoint {_endpoint()} to {action} in bucket "
                    f"{self.bucket!r}: {name}. Check AWS_ENDPOINT_URL_S3 / the profile's "
                    "endpoint_url and the network.") from None
            raise

    def _key(self, h: str, folder: str = "blobs") -> str:
        _check_hash(h)
        return f"{self.root}/{folder}/{h[:2]}/{h[2:]}"

    def _split(self, path: str) -> tuple[str, str]:
        bucket, _, key = path.partition("/")
        return bucket, key

    def _head(self, h: str, folder: str = "blobs") -> dict[str, Any] | None:
        bucket, key = self._split(self._key(h, folder))
        try:
            with self._errors("read"):
                return cast(dict[str, Any],
                            self.fs.call_s3("head_object", Bucket=bucket, Key=key))
        except FileNotFoundError:
            return None

    def _head_or_missing(self, h: str) -> dict[str, Any]:
        head = self._head(h)
        if head is None:
            raise self._missing(h)
        return head

    # -- writes ----------------------------------------------------------------------------
    def _present(self, h: str, size: int) -> bool:
        """True when the blob is there with ``size`` bytes; then its age is refreshed for
        gc (see the module docstring) if it is older than ``_TOUCH_AFTER``."""
        head = self._head(h)
        if head is None or int(head["ContentLength"]) != size:
            return False
        modified: datetime = head["LastModified"]
        if time.time() - modified.timestamp() > _TOUCH_AFTER:
            with self._errors("write"):
                self.fs.pipe_file(self._key(h, "touch"), b"")
        return True

    @contextlib.contextmanager
    def _bucket_must_exist(self) -> Iterator[None]:
        """A write's not-found can only mean the bucket."""
        try:
            yield
        except FileNotFoundError:
            raise ConfigError(
                f"S3 bucket {self.bucket!r} does not exist at {_endpoint()}: create it, or "
                "fix [artifacts] url / REPRISE_ARTIFACTS_URL or AWS_ENDPOINT_URL_S3.") from None

    def _upload(self, path: Path, h: str, size: int) -> None:
        from fsspec.asyn import sync

        with self._bucket_must_exist(), self._errors("write"):
            # straight to the content key: visible only once complete (module docstring)
            sync(self.fs.loop, self._put_streamed, path, self._key(h), size)

    async def _put_streamed(self, path: Path, target: str, size: int) -> None:
        bucket, key = self._split(target)
        if size <= _SINGLE_PUT_MAX:
            with _FileRegion(path, 0, size) as body:
                await self.fs._call_s3("put_object", Bucket=bucket, Key=key, Body=body)
            return
        import asyncio

        part = max(_PART, -(-size // _MAX_PARTS))
        upload = await self.fs._call_s3("create_multipart_upload", Bucket=bucket, Key=key)
        upload_id = upload["UploadId"]
        gate = asyncio.Semaphore(_PARTS_IN_FLIGHT)

        async def send(number: int, offset: int) -> dict[str, Any]:
            async with gate:
                with _FileRegion(path, offset, min(part, size - offset)) as body:
                    done = await self.fs._call_s3(
                        "upload_part", Bucket=bucket, Key=key, UploadId=upload_id,
                        PartNumber=number, Body=body)
            return {"PartNumber": number, "ETag": done["ETag"]}

        try:
            parts = await asyncio.gather(
                *(send(i + 1, offset) for i, offset in enumerate(range(0, size, part))))
            await self.fs._call_s3("complete_multipart_upload", Bucket=bucket, Key=key,
                                   UploadId=upload_id, MultipartUpload={"Parts": parts})
        except BaseException:
            with contextlib.suppress(Exception):  # else sweep_temp aborts it later
                await self.fs._call_s3("abort_multipart_upload", Bucket=bucket, Key=key,
                                       UploadId=upload_id)
            raise

    def _put_data(self, data: bytes, h: str) -> None:
        """Small content from memory in one request: a conditional PUT (``If-None-Match:
        *``) stores it unless the key exists, instead of a HEAD then a PUT; on a server
        that refuses conditional writes, a HEAD then a PUT."""
        bucket, key = self._split(self._key(h))
        with self._bucket_must_exist():
            if self._conditional:
                try:
                    with self._errors("write"):
                        self.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data,
                                        IfNoneMatch="*")
                    return
                except FileExistsError:  # 412: there already (checked, and aged, below)
                    pass
                except Exception as exc:
                    # a server without conditional writes (501 NotImplemented), or a
                    # botocore older than 1.35 that does not know the parameter
                    if "NotImplemented" not in str(exc) and \
                            type(exc).__name__ != "ParamValidationError":
                        raise
                    self._conditional = False
            if self._present(h, len(data)):
                return
            with self._errors("write"):
                self.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data)

    def _put_local(self, path: Path, size: int, h: str | None = None) -> str:
        """Store a local file (hashed here unless ``h`` is given); return its hash."""
        if size <= _SMALL_PUT:
            with open(path, "rb") as f:
                data = f.read(size + 1)
            if len(data) != size:
                raise StoreError(f"{path} changed while it was being stored; store it again.")
            h = hash_bytes(data) if h is None else h
            self._put_data(data, h)
            return h
        h = hash_file(path) if h is None else h
        if not self._present(h, size):
            self._upload(path, h, size)
        return h

    def put_file(self, path: str | os.PathLike[str]) -> tuple[str, int]:
        src = Path(path)
        before = src.stat()
        h = self._put_local(src, before.st_size)
        after = src.stat()
        if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            # nothing references h yet; take back what may not be its bytes
            self.delete(h)
            raise StoreError(f"{src} changed while it was being stored; store it again.")
        return h, before.st_size

    def put_bytes(self, data: bytes) -> tuple[str, int]:
        if len(data) > _SMALL_PUT:
            return self.put_stream([bytes(data)])
        h, data = hash_bytes(data), bytes(data)
        self._put_data(data, h)
        if self.cache is not None and len(data) <= self.cache.limit:
            tmp = self.cache.temp_path()
            try:
                tmp.write_bytes(data)
                self.cache.adopt(h, tmp, len(data))
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
        return h, len(data)

    def put_stream(self, chunks: Iterable[bytes]) -> tuple[str, int]:
        """Spool to a local temp file while hashing (the key is the hash), upload it, then
        keep the file as the blob's cached copy."""
        import tempfile

        hasher, size = new_hasher(), 0
        if self.cache is not None:
            tmp = self.cache.temp_path()
        else:
            fd, name = tempfile.mkstemp(prefix=".tmp-reprise-")
            os.close(fd)
            tmp = Path(name)
        try:
            with open(tmp, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                    hasher.update(chunk)
                    size += len(chunk)
            h = self._put_local(tmp, size, str(hasher.hexdigest()))
            if self.cache is not None and size <= self.cache.limit:
                self.cache.adopt(h, tmp, size)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        return h, size

    # -- reads -----------------------------------------------------------------------------
    def exists(self, h: str) -> bool:
        return self._head(h) is not None

    def size(self, h: str) -> int:
        return int(self._head_or_missing(h)["ContentLength"])

    def mtime(self, h: str) -> float:
        """The last put of the blob: its own LastModified or its last reuse's touch."""
        times = [cast(datetime, self._head_or_missing(h)["LastModified"]).timestamp()]
        touch = self._head(h, "touch")
        if touch is not None:
            times.append(cast(datetime, touch["LastModified"]).timestamp())
        return max(times)

    def _get(self, h: str, sinks: Callable[[int], list[IO[bytes]]]) -> tuple[int, str] | None:
        """GET the blob once, writing its body into each of ``sinks(size)`` (called when the
        size arrives with the headers; an empty list: nothing is read, None returned) and
        hashing it on the way; return ``(size, hash)``. A missing blob is the GET's own 404
        (``ArtifactNotFoundError``): no HEAD before it."""
        from fsspec.asyn import sync

        try:
            with self._errors("read"):
                return cast("tuple[int, str] | None",
                            sync(self.fs.loop, self._get_hashed, self._key(h), sinks))
        except FileNotFoundError:
            raise self._missing(h) from None

    async def _get_hashed(self, target: str, sinks: Callable[[int], list[IO[bytes]]]
                          ) -> tuple[int, str] | None:
        from s3fs.core import S3_RETRYABLE_ERRORS

        bucket, key = self._split(target)
        for attempt in range(3):
            # botocore retries the request; a body cut off half-way is fetched again here
            resp = await self.fs._call_s3("get_object", Bucket=bucket, Key=key)
            body, size = resp["Body"], int(resp["ContentLength"])
            try:
                files = sinks(size)
                if not files:
                    return None
                for f in files:  # empty them: a retry starts over
                    f.seek(0)
                    f.truncate()
                hasher, got = new_hasher(), 0
                while chunk := await body.read(_CHUNK):
                    for f in files:
                        f.write(chunk)
                    hasher.update(chunk)
                    got += len(chunk)
                if got == size:
                    for f in files:
                        f.flush()
                    return size, str(hasher.hexdigest())
                if attempt == 2:
                    raise StoreError(f"S3 sent {got} of the {size} bytes of {target}.")
            except S3_RETRYABLE_ERRORS:
                if attempt == 2:
                    raise
            finally:
                body.close()
        raise AssertionError("unreachable")  # pragma: no cover

    def _download(self, h: str, dest: Path, limit: int) -> tuple[int, str] | None:
        """GET the blob into ``dest``, hashing while writing; None (nothing written) when
        it is larger than ``limit``. One request: the size comes with the body."""
        with open(dest, "wb") as f:
            return self._get(h, lambda size: [f] if size <= limit else [])

    def _cached(self, h: str) -> tuple[Path, bool] | None:
        """The blob's verified cached copy and whether it was filled just now; None when
        there is no cache or the blob is over its limit."""
        if self.cache is None:
            return None
        cache = self.cache
        path = cache.lookup(_check_hash(h))
        if path is not None:
            return path, False
        filled = cache.fill(h, lambda dest: self._download(h, dest, cache.limit))
        return None if filled is None else (filled, True)

    def open(self, h: str) -> BinaryIO:
        """Through the cache when the blob fits (filled and verified on a miss), else a
        stream from the bucket."""
        for _ in range(3):  # a concurrent eviction between lookup and open: fill again
            found = self._cached(h)
            if found is None:
                break
            with contextlib.suppress(FileNotFoundError):
                return open(found[0], "rb")
        return self._stream(h)

    def get_bytes(self, h: str, *, verify: bool = False,
                  expected_size: int | None = None) -> bytes:
        """As the base class; a cached copy that fails the check (an unsynced cache entry
        after a power loss, see :meth:`copy_to`) is dropped and the blob fetched again,
        verified on fill, instead of failing."""
        try:
            return super().get_bytes(h, verify=verify, expected_size=expected_size)
        except IntegrityError:
            if self.cache is None or self.cache.lookup(_check_hash(h)) is None:
                raise
            self.cache.discard(h)
            return super().get_bytes(h, verify=verify, expected_size=expected_size)

    def copy_to(self, h: str, dest: str | os.PathLike[str], *, verify: bool = False,
                durable: bool = True, link: bool = False) -> Path:
        """Write the blob to the file ``dest`` atomically (a temp file beside it, fsynced
        unless ``durable`` is false, renamed); return ``dest`` as a Path.

        A cache hit is copied (hashed on the way when ``verify``; a cached copy that does
        not match is dropped and fetched again). A miss is one GET (no HEAD first) whose
        body is written as it arrives into the temp file beside ``dest`` and into the
        cache (when the blob fits its limit) while being hashed: the bytes cross the
        network once and are never read back; they are always verified, and ``dest``
        appears only if they hash to ``h`` (else ``IntegrityError``, and neither ``dest``
        nor a cache entry is made).

        With ``link`` (a throwaway, read-only destination: a load's temp copy), ``dest``
        is a hard link to the cache's read-only (0o444) copy instead: a hit is linked (then
        hashed through the link when ``verify``: the very inode handed out is checked), a
        miss is written into the cache alone and linked, so its bytes hit the disk once.
        Where a link cannot be made (``dest`` on another filesystem, a cache entry that is
        not read-only, a blob over the cache's limit) ``dest`` is a copy as without
        ``link``. The cache may evict the entry meanwhile: the link keeps the inode.

        One fsync when ``durable``: ``dest``'s bytes before the rename, so that ``dest`` is
        never seen partial, even after a power loss. The folder is not fsynced after the
        rename: a power loss may forget the rename, and ``dest`` is then as before the call
        (with at worst the whole temp file, ``.tmp-…``, beside it, as when the power goes
        between the fsync and the rename); the blob is still in the bucket. The cache entry
        is not fsynced either: it is a copy of the bucket's blob, and a power loss can leave
        an unsynced one empty or short. The verified reads, ``copy_to(verify=True)`` and
        ``get_bytes(verify=True)`` (what the materializers load through), hash a cached
        copy before using it and fetch the blob again when it does not match, so they never
        pass such an entry on; an unverified ``open`` trusts the entry as a local store's
        reads trust its files. An fsync per entry would cost every get a second journal
        commit to guard against what the verified reads already catch.
        """
        _check_hash(h)
        _check_copy_flags(durable, link)
        if self.cache is not None:
            path = self.cache.lookup(h)
            if path is not None:
                with contextlib.suppress(FileNotFoundError):  # evicted meanwhile: fetch
                    placed = self._link_cached(h, path, dest, verify) if link else None
                    if placed is None:  # not linked: copied
                        placed = self._copy_cached(h, path, dest, verify, durable)
                    if placed:
                        return Path(dest)
                    self.cache.discard(h)  # wrong bytes: fetched again below, verified
        return self._fetch_to(h, dest, durable=durable, link=link)

    def _copy_cached(self, h: str, path: Path, dest: str | os.PathLike[str],
                     verify: bool, durable: bool = True) -> bool:
        """Copy the cached ``path`` to ``dest``; False (``dest`` untouched) when ``verify``
        and its bytes do not hash to ``h``."""
        with open(path, "rb") as src:
            try:
                with atomic_write(dest, sync_dir=False, fsync=durable) as out:
                    if verify:  # one read: hashed and written chunk by chunk
                        hasher = new_hasher()
                        while chunk := src.read(_CHUNK):
                            hasher.update(chunk)
                            out.write(chunk)
                        if hasher.hexdigest() != h:
                            raise _StaleCopy
                    else:  # in the kernel
                        _send_all(src, out, path)
            except _StaleCopy:
                return False
        return True

    def _link_cached(self, h: str, path: Path, dest: str | os.PathLike[str],
                     verify: bool) -> bool | None:
        """Hard-link the cached ``path`` to ``dest``, hashed through the link when
        ``verify``; False (``dest`` untouched) when its bytes do not hash to ``h``, None
        when no link can be made (the caller copies)."""
        tmp = _link_beside(path, Path(dest))
        if tmp is None:
            return None
        try:
            if verify and hash_file(tmp) != h:
                _unlink_quietly(tmp)
                return False
            os.replace(tmp, dest)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        return True

    def _fetch_to(self, h: str, dest: str | os.PathLike[str], *, durable: bool = True,
                  link: bool = False) -> Path:
        """One GET into a temp file beside ``dest`` and, when it fits, the cache; with
        ``link``, into the cache alone, then ``dest`` linked to it."""
        cache = self.cache
        with contextlib.ExitStack() as stack:
            files: list[IO[bytes]] = []
            cached: list[IO[bytes]] = []

            def sinks(size: int) -> list[IO[bytes]]:
                if files:  # a retry: the same files, emptied by the caller
                    return files
                if cache is not None and size <= cache.limit:
                    tmp = cache.temp_path()
                    stack.callback(_unlink_quietly, tmp)  # unless adopted first
                    cached.append(stack.enter_context(open(tmp, "wb")))
                if not (link and cached):
                    files.append(stack.enter_context(
                        atomic_write(dest, sync_dir=False, fsync=durable)))
                files.extend(cached)
                return files

            # never None: sinks always gives at least one file
            size, digest = cast("tuple[int, str]", self._get(h, sinks))
            if digest != h:  # leaving the block removes the temp files
                raise self._corrupt(h, "the bytes S3 sent do not hash to its name")
            if cached and cache is not None:
                tmp = Path(cached[0].name)
                cached[0].close()
                if link and len(files) == 1:  # dest is not written: link it, else copy
                    os.chmod(tmp, 0o444)  # before linking: dest is as read-only as the entry
                    linked = _link_beside(tmp, Path(dest))
                    if linked is not None:
                        os.replace(linked, dest)
                    else:
                        with open(tmp, "rb") as src, \
                                atomic_write(dest, sync_dir=False, fsync=False) as out:
                            _send_all(src, out, tmp)
                cache.adopt(h, tmp, size)
        return Path(dest)

    def _stream(self, h: str) -> BinaryIO:
        try:
            with self._errors("read"):
                return cast(BinaryIO, self.fs.open(self._key(h), "rb", block_size=_READ_BLOCK))
        except FileNotFoundError:
            raise self._missing(h) from None

    def verify(self, h: str) -> bool:
        """Hash the bucket's bytes (not the cache's: fsck checks the store itself)."""
        hasher = new_hasher()
        with self._stream(h) as f:
            while chunk := f.read(_CHUNK):
                hasher.update(chunk)
        return bool(hasher.hexdigest() == h)

    # -- maintenance -----------------------------------------------------------------------
    def delete(self, h: str) -> bool:
        there = self.exists(h)
        with self._errors("delete"):
            self.fs.rm([self._key(h), self._key(h, "touch")])
        if self.cache is not None:
            self.cache.discard(h)
        return there

    def iter_hashes(self) -> Iterator[str]:
        with self._errors("list"):
            found = self.fs.find(f"{self.root}/blobs")
        hashes = []
        for path in found:
            prefix, rest = str(path).rstrip("/").split("/")[-2:]
            if len(prefix) == 2 and len(rest) == 62:
                with contextlib.suppress(Exception):
                    hashes.append(_check_hash(prefix + rest))
        yield from sorted(hashes)

    def sweep_temp(self, older_than: float = 3600.0) -> int:
        """Abort multipart uploads under the prefix started over ``older_than`` seconds
        ago (left by killed writers: invisible, but S3 bills their parts); return how
        many. A bucket lifecycle rule AbortIncompleteMultipartUpload does the same."""
        cutoff, removed = time.time() - older_than, 0
        bucket, prefix = self.bucket, f"{self.prefix}/blobs/" if self.prefix else "blobs/"
        kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
        while True:
            with self._errors("list uploads"):
                page = self.fs.call_s3("list_multipart_uploads", **kwargs)
            for up in page.get("Uploads", []):
                if up["Initiated"].timestamp() <= cutoff:
                    with self._errors("abort an upload"), \
                            contextlib.suppress(FileNotFoundError):
                        self.fs.call_s3("abort_multipart_upload", Bucket=bucket,
                                        Key=up["Key"], UploadId=up["UploadId"])
                        removed += 1
            if not page.get("IsTruncated"):
                return removed
            kwargs.update(KeyMarker=page["NextKeyMarker"],
                          UploadIdMarker=page["NextUploadIdMarker"])
