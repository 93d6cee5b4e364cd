"""Behind a pooler in transaction mode (PgBouncer, its server connections handed out in turn),
prepared statements break — a statement prepared on one server connection is missing on the
next — and `prepared_statements=False` (psycopg's `prepare_threshold=None` on your own
connection) makes every call work: the Client, an enqueue in your transaction, the Worker."""

from __future__ import annotations

from typing import Any

import psycopg

import leaseq
from conftest import run_bounded, statuses


def both_servers_open(pooler_url: str) -> None:
    """Makes the pooler open its second server connection: a transaction holds the first while
    another client runs a statement."""
    with psycopg.connect(pooler_url) as holder, psycopg.connect(pooler_url) as other:
        holder.execute("SELECT 1")  # a transaction: its server stays with it
        other.execute("SELECT 1")


def test_prepared_statements_break_behind_a_transaction_pooler(pooler_url: str, queue: str) -> None:
    both_servers_open(pooler_url)
    refused = set()
    with leaseq.Client(pooler_url) as client:
        for _ in range(20):
            try:
                client.enqueue(queue, {})
            except psycopg.Error as error:
                refused.add(error.sqlstate)
    # Missing on this server (26000), left there by another client (42P05), or that client's
    # statement of another shape (08P01): psycopg's own errors, as they came.
    assert refused and refused <= {"26000", "42P05", "08P01"}, refused


def test_without_prepared_statements_every_call_works_behind_a_transaction_pooler(
    pooler_url: str, conn: psycopg.Connection[Any], queue: str
) -> None:
    both_servers_open(pooler_url)
    with leaseq.Client(pooler_url, prepared_statements=False) as client:
        ids = [client.enqueue(queue, {"n": n}) for n in range(10)]
        assert client.job(ids[0]).status is leaseq.JobStatus.PENDING
    with psycopg.connect(pooler_url, prepare_threshold=None) as mine:
        with mine.transaction():
            ids += [leaseq.enqueue(mine, queue, {"n": n}) for n in range(10, 20)]
    for transactional in (False, True):
        worker = leaseq.Worker(
            pooler_url,
            queue=queue,
            handler=(lambda job, tx: job.id) if transactional else (lambda job: job.id),
            transactional=transactional,
            concurrency=2,
            poll=0.1,
            prepared_statements=False,
        )
        summary = run_bounded(worker)
        assert summary.lost == 0 and summary.fenced == 0
        if not transactional:
            assert summary.completed == 20
    assert statuses(conn, queue) == {"succeeded": 20}
