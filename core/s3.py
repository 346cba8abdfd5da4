"""S3 access through the MinIO SDK (SeaweedFS here, MinIO/AWS in production)."""

from __future__ import annotations

import json
import os
import secrets
import socket
from pathlib import Path

from minio import Minio

from core.config import Config, S3Config


class S3Unavailable(RuntimeError):
    pass


def credentials_path(s3: S3Config, home: Path) -> Path:
    """``s3.credentials_file``, else the embedded store's keys under the state directory."""
    return Path(s3.credentials_file) if s3.credentials_file else home / "s3" / "credentials.json"


def ensure_credentials(path: Path) -> dict:
    """Generate an access key and secret on first use, stored 0600; never logged."""
    if path.exists():
        return json.loads(path.read_text())
    path.parent.mkdir(parents=True, exist_ok=True)
    creds = {"access_key": "dw" + secrets.token_hex(8), "secret_key": secrets.token_urlsafe(30)}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(creds, f)
    return creds


def resolve_keys(s3: S3Config, home: Path) -> tuple[str, str]:
    if s3.access_key and s3.secret_key:
        return s3.access_key, s3.secret_key
    path = credentials_path(s3, home)
    if not path.exists():
        raise S3Unavailable(
            f"no S3 credentials: set DYNAWEB_S3__ACCESS_KEY/SECRET_KEY or start the embedded store with "
            f"`dynaweb infra up` (it writes {path})"
        )
    creds = json.loads(path.read_text())
    return creds["access_key"], creds["secret_key"]


def s3_hint(s3: S3Config) -> str:
    return (
        f"S3 store at {s3.endpoint} is not reachable. Start the embedded stack with `dynaweb infra up` "
        f"(or point DYNAWEB_S3__ENDPOINT at your MinIO/S3)."
    )


def check_s3(s3: S3Config, timeout: float = 3.0) -> None:
    host, _, port = s3.endpoint.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return
    except OSError:
        raise S3Unavailable(s3_hint(s3)) from None


def make_client(cfg: Config) -> Minio:
    check_s3(cfg.s3)
    ak, sk = resolve_keys(cfg.s3, cfg.home_path)
    http_client = None
    if cfg.s3.secure and not cfg.s3.cert_check:
        import urllib3

        http_client = urllib3.PoolManager(cert_reqs="CERT_NONE")
    return Minio(
        cfg.s3.endpoint,
        access_key=ak,
        secret_key=sk,
        secure=cfg.s3.secure,
        region=cfg.s3.region,
        http_client=http_client,
    )


def ensure_bucket(client: Minio, bucket: str) -> None:
    if not client.bucket_exists(bucket):
        client.make_bucket(bucket)
