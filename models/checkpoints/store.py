"""Checkpoints in S3: ``<run>/checkpoints/<kind>/<version>/`` plus a manifest.

Layout (bucket ``cfg.s3.bucket``)::

    <run_id>/checkpoints/<kind>/<version:08d>/hf/...           save_pretrained files
    <run_id>/checkpoints/<kind>/<version:08d>/state/...        trainer/optimizer state
    <run_id>/checkpoints/<kind>/<version:08d>/manifest.json    version, sha256 per file,
                                                              resolved config, consumed offsets
    <run_id>/checkpoints/<kind>/LATEST                         {"version", "manifest_sha256"}
    <run_id>/checkpoints/<kind>/PROMOTED                       {"versions": [...]}
    <run_id>/checkpoints/<kind>/<version:08d>/gate.json        the gate's decision (``evaluation.gate``)

The writer uploads every file, then the manifest, then ``LATEST``; the
announcement on Kafka only notifies.  With ``gate.enabled`` the trainer writes
a *candidate* (files and manifest, ``LATEST`` untouched) and ``evaluation.gate``
moves ``LATEST`` (and announces) only when the candidate passes its probes.  Readers verify the manifest's sha256
(against the announcement or ``LATEST``) and every file's sha256 before
loading; a mismatch raises ``CorruptCheckpoint`` and the caller keeps the
weights it has.

``ModelSlot`` is the reader's side: the loaded version of one kind, hot-reloaded
from ``LATEST`` when a checkpoint announcement arrives, and when ``LATEST`` polled
every ``s3.latest_poll_s`` changed (the dream generator and the ``latest``
collector policy; the announcement itself and the one watcher of the checkpoints
topic are ``streams.checkpoints``).  The trainer's writing side, retried through
S3 and broker outages, is ``models.checkpoints.writer``.  ``announce`` tells every
reader that a version already written here is ``LATEST``.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import urllib3
from minio import Minio
from minio.error import MinioException, S3Error

from core.config import KafkaConfig
from streams.kafka import Publisher
from streams.topics import Topics

log = logging.getLogger(__name__)

KINDS = ("policy", "world_model")
GATE_FILE = "gate.json"
# what an S3 call raises when the store is down, stalls or answers an error (retried or tolerated
# by the trainer's writer, ``models.checkpoints.writer``, and by ``ModelSlot.poll``)
S3_ERRORS = (MinioException, urllib3.exceptions.HTTPError, OSError)


class CorruptCheckpoint(RuntimeError):
    pass


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_bytes(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def build_manifest(
    kind: str,
    version: int,
    run_id: str,
    local_dir: Path,
    config: dict,
    offsets: dict,
    extra: dict | None = None,
) -> dict:
    files = {}
    for p in sorted(local_dir.rglob("*")):
        if p.is_file():
            files[p.relative_to(local_dir).as_posix()] = {
                "sha256": sha256_file(p),
                "size": p.stat().st_size,
            }
    return {
        "kind": kind,
        "version": version,
        "run_id": run_id,
        "created_at": time.time(),
        "files": files,
        "config": config,
        "offsets": offsets,
        "extra": extra or {},
    }


def manifest_files(manifest: dict, only: str | None = None) -> dict:
    """The manifest's files, or those under the folder ``only`` (e.g. ``"hf/"``)."""
    files = manifest["files"]
    return files if only is None else {r: m for r, m in files.items() if r.startswith(only)}


def verify_manifest_files(manifest: dict, local_dir: Path, only: str | None = None) -> None:
    files = manifest_files(manifest, only)
    if only is not None and not files:
        raise CorruptCheckpoint(
            f"{manifest['kind']} v{manifest['version']}: the manifest lists no file under {only!r}"
        )
    for rel, meta in files.items():
        p = local_dir / rel
        check_digest(manifest, rel, sha256_file(p) if p.exists() else None, meta["sha256"])


def check_digest(manifest: dict, rel: str, got: str | None, want: str) -> None:
    """``CorruptCheckpoint`` unless file ``rel`` exists (``got`` not None) with sha256 ``want``."""
    if got is None:
        raise CorruptCheckpoint(f"{manifest['kind']} v{manifest['version']}: file {rel} is missing")
    if got != want:
        raise CorruptCheckpoint(
            f"{manifest['kind']} v{manifest['version']}: sha256 of {rel} is {got[:12]}, "
            f"manifest says {want[:12]}; refusing to load"
        )


@dataclass
class Saved:
    kind: str
    version: int
    uri: str
    manifest_sha256: str


class CheckpointStore:
    def __init__(self, client: Minio, bucket: str, run_id: str):
        self.client = client
        self.bucket = bucket
        self.run_id = run_id

    def prefix(self, kind: str, version: int | None = None) -> str:
        if kind not in KINDS:
            raise ValueError(f"checkpoint kind must be one of {KINDS}, got {kind!r}")
        base = f"{self.run_id}/checkpoints/{kind}/"
        return base if version is None else f"{base}{version:08d}/"

    def uri(self, kind: str, version: int) -> str:
        return f"s3://{self.bucket}/{self.prefix(kind, version)}"

    # --- writing -------------------------------------------------------
    def save(
        self,
        kind: str,
        version: int,
        local_dir: Path,
        config: dict,
        offsets: dict,
        extra: dict | None = None,
        set_latest: bool = True,
    ) -> Saved:
        local_dir = Path(local_dir)
        manifest = build_manifest(kind, version, self.run_id, local_dir, config, offsets, extra)
        pre = self.prefix(kind, version)
        for rel in manifest["files"]:
            self.client.fput_object(self.bucket, pre + rel, str(local_dir / rel))
        body = json.dumps(manifest, sort_keys=True).encode()
        digest = sha256_bytes(body)
        self._put(pre + "manifest.json", body)
        if set_latest:
            self.set_latest(kind, version, digest)
        return Saved(kind, version, self.uri(kind, version), digest)

    def _put(self, key: str, body: bytes) -> None:
        self.client.put_object(
            self.bucket, key, io.BytesIO(body), len(body), content_type="application/json"
        )

    def _get(self, key: str) -> bytes | None:
        try:
            resp = self.client.get_object(self.bucket, key)
        except S3Error as e:
            if e.code in ("NoSuchKey", "NoSuchObject", "NotFound"):
                return None
            raise
        try:
            return resp.read()
        finally:
            resp.close()
            resp.release_conn()

    def set_latest(self, kind: str, version: int, manifest_sha256: str | None = None) -> None:
        if manifest_sha256 is None:
            body = self._get(self.prefix(kind, version) + "manifest.json")
            if body is None:
                raise KeyError(
                    f"{kind} v{version} has no manifest in s3://{self.bucket}/{self.prefix(kind)}"
                )
            manifest_sha256 = sha256_bytes(body)
        self._put(
            self.prefix(kind) + "LATEST",
            json.dumps(
                {"version": version, "manifest_sha256": manifest_sha256, "updated_at": time.time()}
            ).encode(),
        )

    # --- reading -------------------------------------------------------
    def latest(self, kind: str) -> dict | None:
        body = self._get(self.prefix(kind) + "LATEST")
        return json.loads(body) if body else None

    def versions(self, kind: str) -> list[int]:
        """Versions that have a manifest (an emptied folder some stores keep listing does not count)."""
        out = set()
        base = self.prefix(kind)
        for obj in self.client.list_objects(self.bucket, prefix=base, recursive=True):
            rel = obj.object_name[len(base) :]
            head, _, name = rel.partition("/")
            if name == "manifest.json" and head.isdigit():
                out.add(int(head))
        return sorted(out)

    def newest(self, kind: str) -> dict | None:
        """``{"version", "manifest_sha256"}`` of the newest written version (LATEST or not)."""
        vs = self.versions(kind)
        if not vs:
            return None
        _, digest = self.manifest(kind, vs[-1])
        return {"version": vs[-1], "manifest_sha256": digest}

    # --- gate decisions ----------------------------------------------------
    def write_decision(self, kind: str, version: int, record: dict) -> None:
        """The gate's decision on ``version`` (``decision``: promoted, rejected or superseded)."""
        self._put(
            self.prefix(kind, version) + GATE_FILE,
            json.dumps(
                {"kind": kind, "version": version, "decided_at": time.time(), **record}, default=str
            ).encode(),
        )

    def decision(self, kind: str, version: int) -> dict | None:
        body = self._get(self.prefix(kind, version) + GATE_FILE)
        return json.loads(body) if body else None

    def decisions(self, kind: str) -> dict[int, dict]:
        """Every recorded gate decision of ``kind`` by version."""
        base = self.prefix(kind)
        out = {}
        for obj in self.client.list_objects(self.bucket, prefix=base, recursive=True):
            head, _, name = obj.object_name[len(base) :].partition("/")
            if name == GATE_FILE and head.isdigit():
                rec = self.decision(kind, int(head))
                if rec is not None:
                    out[int(head)] = rec
        return out

    def manifest(
        self, kind: str, version: int, expected_sha256: str | None = None
    ) -> tuple[dict, str]:
        body = self._get(self.prefix(kind, version) + "manifest.json")
        if body is None:
            raise CorruptCheckpoint(f"{kind} v{version}: no manifest at {self.uri(kind, version)}")
        digest = sha256_bytes(body)
        if expected_sha256 and digest != expected_sha256:
            raise CorruptCheckpoint(
                f"{kind} v{version}: manifest sha256 {digest[:12]} != announced {expected_sha256[:12]}"
            )
        return json.loads(body), digest

    def download(
        self,
        kind: str,
        version: int,
        dest: Path,
        expected_sha256: str | None = None,
        only: str | None = None,
    ) -> dict:
        """Download into ``dest`` (replaced atomically) and verify every sha256; ``only``: just
        the files under that folder (readers take ``"hf/"``, the weights they act with, and
        leave the trainer's ``state/``, three times larger, in the store)."""
        manifest, _ = self.manifest(kind, version, expected_sha256)
        dest = Path(dest)
        tmp = Path(
            tempfile.mkdtemp(
                prefix=f".{kind}-{version}-", dir=dest.parent if dest.parent.exists() else None
            )
        )
        try:
            pre = self.prefix(kind, version)
            files = manifest_files(manifest, only)
            if only is not None and not files:
                verify_manifest_files(manifest, tmp, only)  # raises: nothing under ``only``
            for rel in files:
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            # the files at once, each hashed as it streams in (one GET per file; no HEAD first
            # and no second read to hash): the reload's download time is its largest file's
            with ThreadPoolExecutor(max_workers=min(4, max(1, len(files)))) as pool:
                digests = dict(
                    zip(
                        files, pool.map(lambda r: self._fetch(pre + r, tmp / r), files), strict=True
                    )
                )
            for rel, meta in files.items():
                check_digest(manifest, rel, digests[rel], meta["sha256"])
            if dest.exists():
                shutil.rmtree(dest)
            tmp.rename(dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return manifest

    def _fetch(self, key: str, path: Path) -> str | None:
        """Stream object ``key`` into ``path``; its sha256, or None when the object is missing."""
        try:
            resp = self.client.get_object(self.bucket, key)
        except S3Error as e:
            if e.code in ("NoSuchKey", "NoSuchObject", "NotFound"):
                return None
            raise
        h = hashlib.sha256()
        try:
            with open(path, "wb") as f:
                for chunk in resp.stream(1 << 20):
                    h.update(chunk)
                    f.write(chunk)
        finally:
            resp.close()
            resp.release_conn()
        return h.hexdigest()

    # --- promotion and retention ----------------------------------------
    def promoted(self, kind: str) -> list[int]:
        body = self._get(self.prefix(kind) + "PROMOTED")
        return json.loads(body)["versions"] if body else []

    def promote(self, kind: str, version: int) -> None:
        vs = sorted(set(self.promoted(kind)) | {version})
        self._put(self.prefix(kind) + "PROMOTED", json.dumps({"versions": vs}).encode())
        self.set_latest(kind, version)

    def prune(self, kind: str, keep: int) -> list[int]:
        """Delete all but the last ``keep`` versions, never a promoted or LATEST one."""
        vs = self.versions(kind)
        protect = set(self.promoted(kind)) | set(vs[-keep:] if keep > 0 else [])
        lat = self.latest(kind)
        if lat:
            protect.add(lat["version"])
        removed = []
        for v in vs:
            if v in protect:
                continue
            for obj in self.client.list_objects(
                self.bucket, prefix=self.prefix(kind, v), recursive=True
            ):
                self.client.remove_object(self.bucket, obj.object_name)
            removed.append(v)
        return removed


def announce(
    run_id: str,
    kafka: KafkaConfig,
    topics: Topics,
    store: CheckpointStore,
    kind: str,
    version: int,
    publisher: Publisher | None = None,
) -> None:
    """Tell every generator of run ``run_id`` that ``kind`` has a new LATEST (``version``), on
    ``topics.checkpoints``; they re-read LATEST in S3.  Without ``publisher`` one is made from
    ``kafka`` and closed after."""
    from streams.checkpoints import send_announcement
    from streams.kafka import make_publisher

    _, digest = store.manifest(kind, version)
    pub = publisher or make_publisher(kafka)
    try:
        send_announcement(
            pub, topics.checkpoints, run_id, kind, version, store.uri(kind, version), digest
        )
        pub.flush()
    finally:
        if publisher is None:
            pub.close()


def wm_init_dir(path: str) -> Path:
    """``trainer.wm_init_from``: a local Hugging Face world-model directory, checked before use."""
    d = Path(path).expanduser()
    if not (d / "config.json").is_file():
        raise RuntimeError(
            f"trainer.wm_init_from={path!r}: no Hugging Face model there (config.json missing); "
            "train one with `dynaweb experiment world-model --out DIR` (DIR/world_model)"
        )
    return d
