"""Registry fixtures: a real PostgreSQL server, both backends, registry servers, test archives.

Every registry test takes `backend`, parametrized over SQLite and PostgreSQL. The PostgreSQL
server is started once per session from the distribution's binaries in a temporary directory on
a free loopback port, and every test gets a database of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import torch

from app import operations as ops
from app.archive import open_archive
from app.jobs import push
from app.jobs.runners import INLINE
from app.registry.blobs import Objects, objects_for
from app.registry.blobs.s3 import S3Objects
from app.registry.ingest import Candidate
from app.registry.objects import layout_of, with_bases
from app.registry.store import Registry
from app.settings import Settings
from tests.api.conftest import Server, free_port, start_server
from tests.registry.seaweed import Seaweed, seaweed
from tests.zoo import ZooProgram, archive_bytes

__all__ = ["seaweed"]

PG_SUPERUSER = "postgres"
#: Debian's layout first, then whatever is on PATH.
_PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"
_PG_MISSING = (
    "PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found in {where}: the "
    "registry tests need a real PostgreSQL server; install the distribution's packages "
    "(Debian/Ubuntu: apt-get install -y postgresql)"
)
_databases = itertools.count()
#: How long the processes of a SIGKILLed server may take to die.
KILL_TIMEOUT_S = 30.0


def _pg_bin() -> Path:
    candidates = sorted(Path("/").glob(_PG_BIN_GLOB.lstrip("/")), key=lambda p: p.parent.name)
    for folder in reversed(candidates):
        if all((folder / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return folder
    found = shutil.which("pg_ctl")
    if found is not None and shutil.which("initdb") is not None:
        return Path(found).parent
    pytest.fail(_PG_MISSING.format(where=f"{_PG_BIN_GLOB} or PATH"), pytrace=False)


@dataclass
class Postgres:
    """A running PostgreSQL server owned by the test session."""

    port: int
    root: Path
    run_as: list[str]
    bin: Path

    def admin(self) -> psycopg.Connection[Any]:
        """An autocommit connection to the maintenance database."""
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user=PG_SUPERUSER, dbname="postgres", autocommit=True
        )

    def create_database(self) -> str:
        """A new empty database; its SQLAlchemy URL."""
        name = f"registry_{os.getpid()}_{next(_databases)}"
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://{PG_SUPERUSER}@127.0.0.1:{self.port}/{name}"

    def pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run pg_ctl on this server's data directory as the server's user."""
        return subprocess.run(
            [*self.run_as, str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), *args],
            capture_output=True,
            text=True,
            check=False,
        )


def _run_as() -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as the distribution's postgres user."""
    if os.geteuid() != 0:
        return []
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        pytest.fail(
            "running as root and there is no 'postgres' user to run the server as: install "
            "the distribution's postgresql package, which creates it",
            pytrace=False,
        )
    return ["runuser", "-u", "postgres", "--"]


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL server in a temporary directory on a free loopback port."""
    bin_dir = _pg_bin()
    run_as = _run_as()
    root = Path(tempfile.mkdtemp(prefix="pt2serde-pg-"))
    (root / "sockets").mkdir()
    if run_as:
        shutil.chown(root, "postgres")
        shutil.chown(root / "sockets", "postgres")
    init = subprocess.run(
        [
            *run_as,
            str(bin_dir / "initdb"),
            "-D",
            str(root / "data"),
            "-U",
            PG_SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"initdb failed:\n{init.stdout}\n{init.stderr}", pytrace=False)
    server = Postgres(free_port(), root, run_as, bin_dir)
    options = (
        f"-p {server.port} -k {root / 'sockets'} -c listen_addresses=127.0.0.1 "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
    )
    started = server.pg_ctl(
        "-w", "-t", "60", "-l", str(root / "server.log"), "-o", options, "start"
    )
    if started.returncode != 0:
        log = (root / "server.log").read_text() if (root / "server.log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"PostgreSQL did not start:\n{started.stderr}\n{log}", pytrace=False)
    try:
        yield server
    finally:
        server.pg_ctl("-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Backend:
    """Where one test's registry lives: a data directory, for PostgreSQL a database, and for
    the S3 blob backend a prefix of the session's SeaweedFS bucket."""

    kind: str
    data_dir: Path
    database_url: str = ""
    blob_url: str = ""
    #: the AWS_* variables of the S3 backend
    aws: dict[str, str] = field(default_factory=dict)

    def settings(self, **overrides: Any) -> Settings:
        """Settings of a registry on this backend (gc graces off: tests collect at once)."""
        values: dict[str, Any] = {
            "data_dir": self.data_dir,
            "database_url": self.database_url,
            "blob_url": self.blob_url,
            "gc_claim_grace_s": 0.0,
            "gc_deleted_grace_s": 0.0,
        }
        return Settings(**{**values, **overrides})

    def server_env(self) -> dict[str, str]:
        """The PT2SERDE_* (and AWS_*) variables of a server on this backend."""
        return {
            "PT2SERDE_DATA_DIR": str(self.data_dir),
            "PT2SERDE_DATABASE_URL": self.database_url,
            "PT2SERDE_BLOB_URL": self.blob_url,
            "PT2SERDE_GC_CLAIM_GRACE_S": "0",
            "PT2SERDE_GC_DELETED_GRACE_S": "0",
            **self.aws,
        }

    def objects(self) -> Objects:
        """The blob store backend's objects."""
        return objects_for(self.blob_url, self.data_dir, 16 << 20)

    def put_raw(self, name: str, data: bytes) -> None:
        """Write `data` under `name` in the blob area, as something other than us would."""
        if not self.blob_url:
            path = self.data_dir / "blobs" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            return
        objects = self.objects()
        assert isinstance(objects, S3Objects)
        objects.client.put_object(Bucket=objects.bucket, Key=objects.prefix + name, Body=data)


#: database, and blob store: "" the local directory, "-s3" SeaweedFS
BACKENDS = ["sqlite", "postgresql", "sqlite-s3", "postgresql-s3"]
_prefixes = itertools.count()


def make_backend(request: pytest.FixtureRequest, folder: Path, param: str | None = None) -> Backend:
    """The backend `param` (by default `request.param`) names, with its data in `folder`."""
    kind, _, blobs = str(param or request.param).partition("-")
    backend = Backend(kind, folder / "data")
    if kind == "postgresql":
        server: Postgres = request.getfixturevalue("postgres")
        backend.database_url = server.create_database()
    if blobs == "s3":
        weed: Seaweed = request.getfixturevalue("seaweed")
        backend.blob_url = f"s3://registry/t{os.getpid()}-{next(_prefixes)}"
        backend.aws = weed.env()
    return backend


def sibling(request: pytest.FixtureRequest, backend: Backend, folder: Path) -> Backend:
    """Another backend of the same kind: its own data directory (and database, and prefix)."""
    kind = backend.kind + ("-s3" if backend.blob_url else "")
    return make_backend(request, folder, kind)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """SQLite, or a fresh database on the session's PostgreSQL server."""
    return make_backend(request, tmp_path)


@pytest.fixture
def registry(backend: Backend) -> Iterator[Registry]:
    """A registry on the backend, closed after the test."""
    opened = Registry(backend.settings())
    try:
        yield opened
    finally:
        opened.close()


# ---------------------------------------------------------------- archives


def rewrite_member(archive: bytes, suffix: str, change: Callable[[bytes], bytes]) -> bytes:
    """The archive with the member ending in `suffix` changed (stored, other members as is)."""
    return rewrite_members(archive, {suffix: change})


def rewrite_members(archive: bytes, changes: dict[str, Callable[[bytes], bytes]]) -> bytes:
    """The archive with the member ending in each suffix changed as `changes` says (stored,
    other members as is)."""
    source = zipfile.ZipFile(io.BytesIO(archive))
    found: dict[str, Callable[[bytes], bytes]] = {}
    for suffix, change in changes.items():
        names = [i.filename for i in source.infolist() if i.filename.endswith(suffix)]
        assert len(names) == 1, names
        found[names[0]] = change
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
        for info in source.infolist():
            data = source.read(info)
            change = found.get(info.filename)
            target.writestr(info.filename, data if change is None else change(data))
    return out.getvalue()


def weight_members(ep: torch.export.ExportedProgram) -> dict[str, str]:
    """The member torch.export.save writes each parameter to (parameters in signature order),
    by its FQN."""
    params = [s.target for s in ep.graph_signature.input_specs if s.target in ep.state_dict]
    return {str(fqn): f"data/weights/weight_{i}" for i, fqn in enumerate(params)}


def prepare(registry: Registry, archive: bytes) -> Candidate:
    """The archive vetted for a push (torch's check run in this process)."""
    staged = registry.blobs.stage_bytes(archive)
    try:
        return push.prepare(registry, staged.path, INLINE, INLINE)
    finally:
        staged.discard()


def pull(registry: Registry, name: str, ref: str) -> bytes:
    """A version's archive as the registry serves it."""
    _, handle = registry.open_content(name, ref, "archive")
    with handle:
        return handle.read()


def race_gc(backend: Backend, series: dict[str, list[bytes]]) -> None:
    """Push each model's archives in order, one registry (and thread) per model, while gc runs
    over and over with no grace in a third; then check that no committed version lacks an
    object, and that the store holds exactly what the versions need."""
    pushers = {model: Registry(backend.settings()) for model in series}
    collector = Registry(backend.settings())
    ready = {m: [prepare(pushers[m], a) for a in archives] for m, archives in series.items()}
    done = threading.Event()
    errors: list[BaseException] = []
    runs = 0

    def collect() -> None:
        nonlocal runs
        while not done.is_set():
            try:
                collector.gc()
                runs += 1
            except BaseException as exc:
                errors.append(exc)
                return

    def push_all(model: str) -> None:
        try:
            for candidate in ready[model]:
                pushers[model].push(model, candidate)
        except BaseException as exc:
            errors.append(exc)

    gc_thread = threading.Thread(target=collect)
    threads = [threading.Thread(target=push_all, args=(model,)) for model in series]
    try:
        gc_thread.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        gc_thread.join()
        assert errors == []
        assert runs > 0
        collector.gc()
        expected: set[str] = set()
        for model, archives in series.items():
            infos = collector.versions(model).versions
            assert len(infos) == len(archives)
            for info in infos:
                expected |= objects_of(collector, info.digests.archive, info.digests.graph)
                data = pull(collector, model, str(info.version))
                assert hashlib.sha256(data).hexdigest() == info.digests.archive
        assert stored_files(backend)["blobs"] == sorted(expected)
    finally:
        done.set()
        for r in (*pushers.values(), collector):
            r.close()


def variant(archive: bytes, index: int) -> bytes:
    """The archive with its first weight's first float set to `index`: another program digest."""
    return rewrite_member(
        archive, "data/weights/weight_0", lambda b: struct.pack("<f", float(index)) + b[4:]
    )


def sample_inputs_of(archive: bytes, model: str = "model") -> bytes:
    """The sample inputs member of one model of an archive (b"" for none)."""
    with open_archive(archive) as opened:
        return opened.reader.read_member(opened.sample_inputs[model], 1 << 30)


def assert_served(served: bytes, uploaded: bytes, *, samples: bool = True) -> None:
    """`served` is what the registry writes for `uploaded`: the pushed model's document bytes,
    every tensor (name, kind, meta, bytes) and, if `samples`, the sample inputs, else none."""
    with open_archive(served) as out, open_archive(uploaded) as up:
        assert out.root == "archive"
        assert out.documents == up.documents
        assert set(out.pickled) <= (set(out.sample_inputs.values()) if samples else set())
        tensors = [
            {t.name: (t.kind, t.meta, t.data) for t in archive.raw_tensors()}
            for archive in (out, up)
        ]
        assert tensors[0] == tensors[1]
    assert sample_inputs_of(served) == (sample_inputs_of(uploaded) if samples else b"")


@pytest.fixture(scope="session")
def archives(zoo: dict[str, ZooProgram]) -> dict[str, bytes]:
    """.pt2 archives of a few zoo programs."""
    return {
        name: archive_bytes(zoo[name].ep)
        for name in ("conv", "linear_bn_train", "dynamic", "multi_out", "custom_op")
    }


# ---------------------------------------------------------------- servers


@dataclass
class RegistryServer(Server):
    """A running service with the registry routes, and the backend it stores into."""

    backend: Backend | None = None


#: One torch worker is enough for the registry's pushes.
REGISTRY_ENV = {"PT2SERDE_WORKERS": "1", "PT2SERDE_WORKER_IMPORTS": "tests.bridge.zoo_ops"}


def start_registry_server(backend: Backend, env: dict[str, str] | None = None) -> RegistryServer:
    """Start the service (`pt2serde serve`) on a free port with this backend."""
    started = start_server({**REGISTRY_ENV, **backend.server_env(), **(env or {})})
    return RegistryServer(started.url, started.process, started.tmp, backend)


def start_replicas(backend: Backend, count: int) -> list[RegistryServer]:
    """`count` warm service processes sharing one backend, started side by side."""
    with ThreadPoolExecutor(count) as pool:
        servers = list(pool.map(lambda _: start_registry_server(backend), range(count)))
        try:
            list(pool.map(warm, servers))
        except BaseException:
            for server in servers:
                stop_registry_server(server)
            raise
    return servers


def _group_running(group: int) -> bool:
    """Whether a process of the process group is still running: zombies have closed their
    files, so they hold no staging lock; an orphan's zombie may wait long for its reaper."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, pgrp = stat.read_text().rpartition(")")[2].split()[:3]
        except OSError:  # the process ended while the loop ran
            continue
        if int(pgrp) == group and state not in ("Z", "X"):
            return True
    return False


def kill_server(server: Server) -> None:
    """SIGKILL the server process, then its HTTP and torch worker processes; return once they
    are all gone, as a crashed host's would be (a process dies only when it leaves the kernel,
    e.g. an fsync, and until then it holds its staging lock)."""
    server.process.send_signal(signal.SIGKILL)
    server.process.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.process.pid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_TIMEOUT_S
    while _group_running(server.process.pid):
        assert time.monotonic() < deadline, "the killed server's processes are still running"
        time.sleep(0.01)
    shutil.rmtree(server.tmp, ignore_errors=True)


def stop_registry_server(server: Server) -> None:
    """Stop the server (SIGTERM, then SIGKILL) and remove its temporary directory."""
    server.process.terminate()
    try:
        server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait()
    shutil.rmtree(server.tmp, ignore_errors=True)


def push_exported(server: Server, name: str, program: Any) -> None:
    """Push an ExportedProgram, as `torch.export.save` writes it, as a new version of `name`."""
    with server.client() as client:
        pushed = client.post(
            f"/v1/models/{name}/versions",
            content=archive_bytes(program),
            headers={"Content-Type": "application/zip"},
        )
    assert pushed.status_code == 201, pushed.text


def warm(server: Server) -> None:
    """Start the server's torch workers so that pushes take their usual time."""
    with server.client() as client:
        assert client.get("/readyz").status_code == 200


def stored_files(where: Backend | Path) -> dict[str, list[str]]:
    """Stored objects and staged files of a backend, or of a data directory with local blobs
    (lock files left out)."""
    backend = where if isinstance(where, Backend) else Backend("sqlite", where)
    blobs = sorted(listed.digest for listed in backend.objects().listing())
    tmp = backend.data_dir / "tmp"
    staged = sorted(p.relative_to(tmp).as_posix() for p in tmp.glob("*/*") if p.name != ".lock")
    return {"blobs": blobs, "staged": staged}


def objects_of(registry: Registry, archive: str, graph: str) -> set[str]:
    """The objects a version with these digests is stored as (the bases of its deltas, down
    each chain, included)."""
    with registry.db.read() as conn:
        layout = layout_of(conn, archive)
        return with_bases(conn, {graph, *(layout.objects() if layout is not None else {archive})})


def check_consistent(backend: Backend) -> dict[str, list[int]]:
    """Reopen the registry (which cleans up), check that every live version's archive is whole
    and that the blob store holds exactly their blobs and nothing staged; the live versions."""
    registry = Registry(backend.settings())
    settings = registry.settings
    found: dict[str, list[int]] = {}
    referenced: set[str] = set()
    try:
        after: str | None = None
        while True:
            page = registry.models(limit=100, after=after)
            for model in page.models:
                for info in registry.versions(model.name, limit=1000).versions:
                    _, handle = registry.open_content(model.name, str(info.version), "archive")
                    with handle:
                        data = handle.read()
                    assert hashlib.sha256(data).hexdigest() == info.digests.archive
                    with ops.open_source(data, "zip", settings) as source:
                        digests = ops.canonical(source, settings).digests
                    assert digests.program == info.digests.program
                    referenced |= objects_of(registry, info.digests.archive, info.digests.graph)
                    found.setdefault(model.name, []).append(info.version)
            if page.next is None:
                break
            after = page.next
        assert stored_files(backend) == {"blobs": sorted(referenced), "staged": []}
    finally:
        registry.close()
    return found
