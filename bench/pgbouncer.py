"""A real PgBouncer in transaction mode in front of a PostgreSQL, for the tests and the connections bench.

Debian's `pgbouncer` (scripts/install-debian-package installs it; /usr/sbin is not on every PATH).
PgBouncer refuses to run as root: started by root, it switches to the `postgres` user (`-u`), and
its directory is made that user's. Trust authentication on loopback, like the test PostgreSQL;
every database name is passed through to the server (`* = host=... port=...`).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer") or next(
        (path for path in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(path, os.X_OK)), None
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Bouncer:
    port: int
    directory: Path

    def url(self, direct_url: str, database: str | None = None) -> str:
        """`direct_url` (a postgres:// URL) with PgBouncer's host and port instead (and another database name)."""
        parts = urlsplit(direct_url)
        user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        path = f"/{database}" if database else parts.path
        return urlunsplit((parts.scheme, f"{user}127.0.0.1:{self.port}", path, parts.query, ""))

    def log(self) -> str:
        path = self.directory / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextmanager
def running_pgbouncer(
    direct_url: str, *, pool_size: int, max_client_conn: int = 1000, aliases: dict[str, tuple[str, int]] | None = None
) -> Iterator[Bouncer]:
    """PgBouncer on a free loopback port, transaction pooling, `pool_size` server connections per database and user.

    `aliases`: PgBouncer database name -> (the PostgreSQL database, its own pool size), e.g. the
    cluster's way in with a pool the web servers cannot take.
    """
    binary = pgbouncer_binary()
    if binary is None:
        raise RuntimeError("pgbouncer is not installed (scripts/install-debian-package pgbouncer pgbouncer).")
    server = urlsplit(direct_url)
    user = server.username or "postgres"
    port = free_port()
    directory = Path(tempfile.mkdtemp(prefix="leasehold-pgbouncer-"))
    (directory / "userlist.txt").write_text(f'"{user}" ""\n')
    (directory / "pgbouncer.ini").write_text(
        "\n".join(
            [
                "[databases]",
                *(
                    f"{alias} = host={server.hostname or '127.0.0.1'} port={server.port or 5432}"
                    f" dbname={database} pool_size={size}"
                    for alias, (database, size) in (aliases or {}).items()
                ),
                f"* = host={server.hostname or '127.0.0.1'} port={server.port or 5432}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {directory / 'userlist.txt'}",
                "pool_mode = transaction",
                f"default_pool_size = {pool_size}",
                "min_pool_size = 0",
                "reserve_pool_size = 0",
                f"max_client_conn = {max_client_conn}",
                "server_idle_timeout = 30",
                # psycopg may send these; PgBouncer would refuse the connection otherwise.
                "ignore_startup_parameters = extra_float_digits",
                f"logfile = {directory / 'pgbouncer.log'}",
                f"pidfile = {directory / 'pgbouncer.pid'}",
                "",
            ]
        )
    )
    command = [binary, str(directory / "pgbouncer.ini")]
    if os.geteuid() == 0:
        postgres = pwd.getpwnam("postgres")
        for path in (directory, *directory.iterdir()):
            os.chown(path, postgres.pw_uid, postgres.pw_gid)
        command[1:1] = ["-u", "postgres"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    bouncer = Bouncer(port, directory)
    try:
        deadline = time.monotonic() + 20
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"pgbouncer stopped at start (exit {process.returncode}):\n{bouncer.log()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not listen within 20 s:\n{bouncer.log()}")
            time.sleep(0.1)
        yield bouncer
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)
