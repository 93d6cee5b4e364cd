"""Fixtures: the test database (`LEASEQ_TEST_DATABASE_URL`, a database with leaseq installed,
which scripts/test creates) and a fresh queue per test."""

from __future__ import annotations

import itertools
import os
import threading
from datetime import timedelta
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import leaseq

_names = itertools.count()


@pytest.fixture(scope="session")
def url() -> str:
    found = os.environ.get("LEASEQ_TEST_DATABASE_URL")
    if not found:
        raise pytest.UsageError(
            "set LEASEQ_TEST_DATABASE_URL to a database with leaseq installed (scripts/test does)"
        )
    return found


@pytest.fixture
def conn(url: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain connection of the test's own, in autocommit, for checks and setup."""
    with psycopg.connect(url, autocommit=True) as c:
        yield c


@pytest.fixture
def client(url: str) -> Iterator[leaseq.Client]:
    with leaseq.Client(url) as c:
        yield c


@pytest.fixture
def queue(client: leaseq.Client) -> str:
    name = f"py_{os.getpid()}_{next(_names)}"
    # Retries an hour away: a failed job never comes due again within a test.
    client.queue_create(name, backoff_base=timedelta(hours=1), backoff_cap=timedelta(hours=1))
    return name


def count_jobs(conn: psycopg.Connection[Any], queue: str) -> int:
    row = conn.execute("SELECT count(*) FROM leaseq.queue_jobs(%s, max_rows => 10000)", (queue,))
    found = row.fetchone()
    assert found is not None
    return int(found[0])


@pytest.fixture(scope="session")
def pooler_url() -> str:
    """The test database behind PgBouncer in transaction mode (`LEASEQ_TEST_POOLER_URL`, which
    scripts/test sets: lib.sh's start_pooler)."""
    found = os.environ.get("LEASEQ_TEST_POOLER_URL")
    if not found:
        raise pytest.UsageError(
            "set LEASEQ_TEST_POOLER_URL to the test database behind PgBouncer in transaction "
            "mode (scripts/test does)"
        )
    return found


def statuses(conn: psycopg.Connection[Any], queue: str) -> dict[str, int]:
    rows = conn.execute(
        "SELECT status::text, count(*) FROM leaseq.jobs WHERE queue = %s GROUP BY 1", (queue,)
    ).fetchall()
    return {status: int(n) for status, n in rows}


def run_bounded(worker: leaseq.Worker, seconds: float = 60.0) -> leaseq.Summary:
    """`run_until_idle` in a thread: a Worker that stops finishing would otherwise hang the suite."""
    summaries: list[leaseq.Summary] = []
    thread = threading.Thread(target=lambda: summaries.append(worker.run_until_idle()), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        worker.stop()
        thread.join(5)
        raise AssertionError(f"run_until_idle() did not return within {seconds} s")
    return summaries[0]
