"""Every refusal is the exception of its SQLSTATE with the server's message, and changes
nothing; a failed connection says where and why; a database without leaseq says what to run."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import Any

import psycopg
import pytest

import leaseq
import leaseq.aio
from conftest import count_jobs


def test_a_bad_argument_is_invalid_argument_naming_it_and_changes_nothing(
    conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    with pytest.raises(leaseq.InvalidArgument) as refused:
        client.enqueue(queue, {}, group_key="")
    assert refused.value.sqlstate == "22023"
    assert 'argument "group_key" must be between 1 and 512 bytes long' in str(refused.value)
    assert count_jobs(conn, queue) == 0
    with pytest.raises(leaseq.InvalidArgument, match='argument "batch" must be between 1'):
        client.claim(queue, "w", batch=0)


def test_each_sqlstate_has_its_exception(
    conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    with pytest.raises(leaseq.NullArgument, match='argument "max_attempts" must not be NULL'):
        client.queue_create(queue, max_attempts=None)
    with pytest.raises(leaseq.NotFound, match='queue "py_no_such_queue" does not exist') as e:
        client.enqueue("py_no_such_queue", {})
    assert e.value.hint and "queue_create" in e.value.hint
    client.conn.execute("SET leaseq.max_payload_bytes = 16")
    with pytest.raises(leaseq.PayloadTooLarge):
        client.enqueue(queue, {"padding": "x" * 64})
    client.conn.execute("RESET leaseq.max_payload_bytes")
    with client.conn.transaction():
        client.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(leaseq.NeedsReadCommitted):
            client.claim(queue, "w")
    # A redriven job whose dedupe key a live job took meanwhile.
    client.queue_create(queue, max_attempts=1)
    dead = client.enqueue(queue, {}, dedupe_key="k")
    (job,) = client.claim(queue, "w")
    client.fail(job)
    client.enqueue(queue, {}, dedupe_key="k")
    with pytest.raises(leaseq.DuplicateKey):
        client.redrive(dead)
    assert isinstance(leaseq.DuplicateKey("m"), leaseq.LeaseqError)


def test_an_unknown_parent_is_not_found_and_enqueues_nothing(
    conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    parent = client.enqueue(queue, {})
    unknown = 9_000_000_000_000_000_000
    said = f'argument "depends_on" names job {unknown}, which does not exist'
    with pytest.raises(leaseq.NotFound, match=said) as refused:
        client.enqueue(queue, {}, depends_on=[parent, unknown])
    assert refused.value.sqlstate == "42704"
    assert refused.value.hint and "enqueued before it" in refused.value.hint
    with pytest.raises(leaseq.NotFound, match=said):
        client.enqueue_batch(queue, [{}, {}], depends_on=[unknown])
    with pytest.raises(leaseq.InvalidArgument, match='"depends_on" cannot be combined with'):
        client.enqueue(queue, {}, depends_on=[parent], dedupe_key="k")
    with pytest.raises(leaseq.InvalidArgument, match='"on_parent_failure" must be cancel, dead'):
        client.enqueue(queue, {}, on_parent_failure="never")  # type: ignore[arg-type]
    assert count_jobs(conn, queue) == 1, "only the parent"


def test_a_batch_of_own_parents_is_refused_whole_with_the_servers_sqlstate(
    conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    parent = client.enqueue(queue, {})
    before = count_jobs(conn, queue)
    with pytest.raises(leaseq.InvalidArgument, match="one array of job ids per payload") as bad:
        client.enqueue_batch(queue, [{}, {}, {}], depends_on_each=[[parent], []])
    assert bad.value.sqlstate == "22023"
    twice = 'argument "depends_on_each\\[2\\]" must not name a job twice'
    with pytest.raises(leaseq.InvalidArgument, match=twice):
        client.enqueue_batch(queue, [{}, {}], depends_on_each=[[parent], [parent, parent]])
    with pytest.raises(leaseq.InvalidArgument, match="cannot be combined with depends_on"):
        client.enqueue_batch(queue, [{}], depends_on=[parent], depends_on_each=[[parent]])
    # Every digit of the id reaches the server (the message names it as sent).
    unknown = 9_000_000_000_000_000_001
    said = f'argument "depends_on_each" names job {unknown}, which does not exist'
    with pytest.raises(leaseq.NotFound, match=said) as missing:
        client.enqueue_batch(queue, [{}, {}], depends_on_each=[[parent], [unknown, parent]])
    assert missing.value.sqlstate == "42704"
    assert count_jobs(conn, queue) == before, "nothing was inserted"


def test_a_flow_is_checked_whole_before_its_first_insert(
    conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    cycle: list[leaseq.FlowNode | dict[str, Any]] = [
        leaseq.FlowNode("start", queue),
        leaseq.FlowNode("a", queue, depends_on=["start", "b"]),
        {"key": "b", "queue": queue, "depends_on": ["a"]},
    ]
    with pytest.raises(leaseq.InvalidArgument, match='"depends_on" closes a cycle') as refused:
        client.flow(cycle)
    assert refused.value.sqlstate == "22023"
    dangling = [leaseq.FlowNode("start", queue), leaseq.FlowNode("a", queue, depends_on=["c"])]
    with pytest.raises(leaseq.InvalidArgument, match='node 2 \\("a"\\): "depends_on" names "c"'):
        client.flow(dangling)
    with pytest.raises(leaseq.InvalidArgument, match="node 1: unknown field `dedupe_key`"):
        client.flow([{"key": "a", "queue": queue, "dedupe_key": "k"}])
    with pytest.raises(leaseq.NotFound, match='queue "py_no_such_queue" does not exist'):
        client.flow([leaseq.FlowNode("a", queue), leaseq.FlowNode("b", "py_no_such_queue")])
    assert count_jobs(conn, queue) == 0, "nothing was inserted"
    with pytest.raises(leaseq.NotFound):
        client.flow_status(9_000_000_000_000_000_000)


def paused(conn: psycopg.Connection[Any], queue: str) -> bool:
    row = conn.execute(
        "SELECT paused FROM leaseq.queue_settings() WHERE queue = %s", (queue,)
    ).fetchone()
    assert row is not None
    return bool(row[0])


def test_the_console_calls_refuse_bad_input_whole_and_change_nothing(
    conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    client.queue_create(queue, max_attempts=1)
    dead = client.enqueue(queue, {})
    (job,) = client.claim(queue, "w")
    client.fail(job)
    pending = client.enqueue(queue, {})
    unknown = 9_000_000_000_000_000_000
    for many in (client.redrive_many, client.cancel_many):
        with pytest.raises(leaseq.NotFound, match=f"job {unknown} does not exist") as refused:
            many([dead, pending, unknown])
        assert refused.value.sqlstate == "42704"
        with pytest.raises(leaseq.InvalidArgument, match='"job_ids" must not name a job twice'):
            many([dead, pending, dead])
        with pytest.raises(leaseq.InvalidArgument, match='"job_ids" must have at most 10000'):
            many([dead, pending, *range(unknown, unknown + 9999)])
        with pytest.raises(leaseq.NullArgument, match='"job_ids\\[2\\]" must not be NULL'):
            many([dead, None])  # type: ignore[list-item]
    assert client.job(dead).status is leaseq.JobStatus.DEAD, "the whole call was refused"
    assert client.job(pending).status is leaseq.JobStatus.PENDING
    for toggle in (client.pause, client.resume):
        with pytest.raises(leaseq.NotFound, match='queue "py_no_such_queue" does not exist'):
            toggle("py_no_such_queue")
        with pytest.raises(leaseq.NullArgument, match='"queue" must not be NULL'):
            toggle(None)  # type: ignore[arg-type]
    assert not paused(conn, queue)
    for max_rows in (0, 10001):
        with pytest.raises(leaseq.InvalidArgument, match='"max_rows" must be between 1 and 10000'):
            client.jobs(queue, max_rows=max_rows)
    with pytest.raises(leaseq.NotFound, match='queue "py_no_such_queue" does not exist'):
        client.jobs("py_no_such_queue")
    (claimed,) = client.claim(queue, "w")
    assert claimed.id == pending, "the queue runs, its pending job untouched"


def test_an_observer_lists_jobs_but_may_not_pause_or_cancel(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {})
    role = f"py_observer_{os.getpid()}"
    conn.execute(f"DROP ROLE IF EXISTS {role}")
    conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE leaseq_observer")
    try:
        with leaseq.Client(psycopg.conninfo.make_conninfo(url, user=role)) as observer:
            (mine,) = [p for p in observer.privileges() if p.queue == queue]
            assert mine == leaseq.QueueAccess(queue, False, False, True, False)
            assert [j.job_id for j in observer.jobs(queue)] == [job_id]
            with pytest.raises(leaseq.PermissionDenied, match="permission denied for function"):
                observer.pause(queue)
            with pytest.raises(leaseq.PermissionDenied):
                observer.cancel_many([job_id])
    finally:
        conn.execute(f"DROP ROLE {role}")
    assert not paused(conn, queue)
    assert client.job(job_id).status is leaseq.JobStatus.PENDING


def test_a_producer_may_enqueue_but_not_claim_and_hears_why(
    url: str, conn: psycopg.Connection[Any], queue: str
) -> None:
    role = f"py_producer_{os.getpid()}"
    conn.execute(f"DROP ROLE IF EXISTS {role}")
    conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE leaseq_producer")
    try:
        as_role = psycopg.conninfo.make_conninfo(url, user=role)
        with leaseq.Client(as_role) as producer:
            producer.enqueue(queue, {"by": "producer"})
            with pytest.raises(leaseq.PermissionDenied) as refused:
                producer.claim(queue, "w")
        assert refused.value.sqlstate == "42501"
        assert "permission denied for function queue_claim" in str(refused.value)
    finally:
        conn.execute(f"DROP ROLE {role}")
    assert count_jobs(conn, queue) == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_a_failed_connection_names_the_server_and_the_cause(url: str) -> None:
    port = _free_port()
    with pytest.raises(leaseq.ConnectionFailed) as refused:
        leaseq.Client(f"postgresql://nobody@127.0.0.1:{port}/nowhere")
    said = str(refused.value)
    assert said.startswith(f"cannot connect to 127.0.0.1:{port}/nowhere as nobody: ")
    assert "Connection refused" in said
    unknown = psycopg.conninfo.make_conninfo(url, dbname="py_no_such_database")
    with pytest.raises(leaseq.ConnectionFailed, match='database "py_no_such_database" does not'):
        leaseq.Client(unknown)
    with pytest.raises(leaseq.ConnectionFailed, match="Connection refused"):
        asyncio.run(leaseq.aio.AsyncClient.connect(f"postgresql://nobody@127.0.0.1:{port}/x"))


def test_a_server_that_accepts_and_never_answers_times_out_and_says_so() -> None:
    # The kernel completes the handshake for a listening socket nobody accepts on.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        asked = time.monotonic()
        with pytest.raises(leaseq.ConnectionFailed) as timed_out:
            leaseq.Client(f"postgresql://nobody@127.0.0.1:{port}/nowhere?connect_timeout=1")
        said = str(timed_out.value)
        assert said.startswith(f"cannot connect to 127.0.0.1:{port}/nowhere as nobody: "), said
        assert "timeout" in said, said
        assert time.monotonic() - asked < 10
        # Without connect_timeout in the string, leaseq's own default bounds it.
        assert leaseq.errors.connect_options(f"postgresql://127.0.0.1:{port}/x") == {
            "application_name": "leaseq-py",
            "connect_timeout": leaseq.errors.CONNECT_TIMEOUT,
        }
        # The string's own application_name is kept: an operator's way to tell workers apart.
        assert "application_name" not in leaseq.errors.connect_options(
            f"postgresql://127.0.0.1:{port}/x?application_name=billing-worker"
        )


def test_a_database_without_leaseq_says_to_create_the_extension(
    url: str, conn: psycopg.Connection[Any]
) -> None:
    bare = f"py_bare_{os.getpid()}"
    conn.execute(f"DROP DATABASE IF EXISTS {bare}")
    conn.execute(f"CREATE DATABASE {bare}")
    try:
        with leaseq.Client(psycopg.conninfo.make_conninfo(url, dbname=bare)) as client:
            with pytest.raises(leaseq.ExtensionMissing) as missing:
                client.stats()
        assert missing.value.sqlstate == "3F000"
        assert "run CREATE EXTENSION leaseq in it" in str(missing.value)
    finally:
        conn.execute(f"DROP DATABASE {bare} WITH (FORCE)")


def test_the_drivers_own_errors_reach_the_caller_unchanged(
    url: str, conn: psycopg.Connection[Any], queue: str
) -> None:
    # Only leaseq's SQLSTATEs are translated: a statement timeout (57014) or a lock timeout
    # (55P03) inside the caller's transaction stays psycopg's, for the caller's retry loop.
    with psycopg.connect(url) as holder:
        holder.execute("LOCK TABLE leaseq.queues IN ACCESS EXCLUSIVE MODE")
        with psycopg.connect(url) as mine:
            for setting, kind, sqlstate in (
                ("statement_timeout", psycopg.errors.QueryCanceled, "57014"),
                ("lock_timeout", psycopg.errors.LockNotAvailable, "55P03"),
            ):
                mine.execute(f"SET {setting} = '100ms'")
                with pytest.raises(psycopg.Error) as raised:
                    leaseq.enqueue(mine, queue, {})
                assert type(raised.value) is kind, type(raised.value)
                assert raised.value.sqlstate == sqlstate
                assert not isinstance(raised.value, leaseq.LeaseqError)
                mine.rollback()
                mine.execute(f"RESET {setting}")
    assert count_jobs(conn, queue) == 0
