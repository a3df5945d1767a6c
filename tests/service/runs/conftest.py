"""The store's tests run against SQLite and a real PostgreSQL server that this setup starts (and stops)."""

from __future__ import annotations

import itertools

import pytest

from tests.service.runs.postgres_server import PostgresServer

_names = itertools.count()


@pytest.fixture(scope="session")
def postgres_server():
    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """A fresh, empty database URL of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.sqlite'}"
    return request.getfixturevalue("postgres_server").new_database(f"runs_{next(_names)}")
