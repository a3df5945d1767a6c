"""A throwaway PostgreSQL server for the store's tests: initdb + pg_ctl in a temporary folder, reached over a unix
socket in that folder, as an unprivileged user when the tests run as root (PostgreSQL refuses to run as root)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

SERVER_USERS = ("postgres", "nobody")  # the packaged server's own user where it exists, else nobody


def _server_user() -> Optional[str]:
    """The user to run the server as: None when the tests do not run as root (then they run it themselves)."""
    if os.geteuid() != 0:
        return None
    for name in SERVER_USERS:
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError(f"running as root and none of the users {SERVER_USERS} exists to run PostgreSQL as")


def _run(args: list[str], user: Optional[str], env: dict) -> None:
    command = ["runuser", "-u", user, "--", *args] if user else args
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr or done.stdout}")


class PostgresServer:
    """``start()`` then ``url`` (postgresql+psycopg over the socket, trust auth, user postgres); ``stop()``."""

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="ra-pg-"))
        self.data, self.socket_dir = self.root / "data", self.root / "sock"
        self.user = _server_user()
        self.env = {**os.environ, "LC_ALL": "C", "LANG": "C"}

    def start(self) -> "PostgresServer":
        for tool in ("initdb", "pg_ctl"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} is not on PATH: install the PostgreSQL server binaries (postgresql-15)")
        self.socket_dir.mkdir(parents=True)
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chmod(self.root, 0o755)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            os.chown(self.socket_dir, entry.pw_uid, entry.pw_gid)
        _run(["initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
             self.user, self.env)
        options = (f"-c listen_addresses='' -c unix_socket_directories={self.socket_dir} -c fsync=off "
                   "-c max_connections=50")
        _run(["pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "server.log"), "-w", "start"],
             self.user, self.env)
        return self

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@/postgres?host={self.socket_dir}"

    def new_database(self, name: str) -> str:
        """A fresh empty database on this server, and its URL."""
        import psycopg
        with psycopg.connect(host=str(self.socket_dir), user="postgres", dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@/{name}?host={self.socket_dir}"

    def stop(self) -> None:
        try:
            _run(["pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"], self.user, self.env)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
