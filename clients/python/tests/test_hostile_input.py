"""Input that tries to reach past the field it was given in (docs/security.md, "Low findings"):
a `Json` payload text that would add members to its flow node (L-19), and a connection string
whose password a malformed URL would put in the error (L-24)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import leaseq
import leaseq.aio
from conftest import count_jobs


@pytest.mark.parametrize(
    "text",
    [
        '{}, "queue": "OTHER"',
        '{}, "depends_on": []',
        '{} {"queue": "OTHER"}',
        '"a", "queue": "OTHER"',
        "",
    ],
)
def test_a_json_payload_that_is_not_one_value_cannot_redirect_a_flow_job(
    client: leaseq.Client, conn: psycopg.Connection[Any], queue: str, text: str
) -> None:
    other = f"{queue}_other"
    client.queue_create(other)
    text = text.replace("OTHER", other)
    for node in (
        leaseq.FlowNode("a", queue, leaseq.Json(text)),
        {"key": "a", "queue": queue, "payload": leaseq.Json(text)},
    ):
        with pytest.raises(ValueError, match="exactly one JSON value"):
            client.flow([node])
    assert (count_jobs(conn, queue), count_jobs(conn, other)) == (0, 0)
    # One value, whitespace and all, is still sent as written.
    exact = ' {"n": 123456789012345678901234567890} '
    ids = client.flow([leaseq.FlowNode("a", queue, leaseq.Json(exact))])
    job = client.job(ids["a"])
    assert (job.queue, job.payload) == (queue, '{"n": 123456789012345678901234567890}')


@pytest.mark.parametrize(
    "conninfo",
    [
        "postgresql:/ada:s3cret-pw@h/db",
        "postgresql://ada:s3cret-pw@[h/db",
        "postgres:ada:s3cret-pw@h/db",
        "host=h password=s3cret-pw port",
        "password='s3cret-pw' host='h",
    ],
)
def test_a_malformed_connection_string_never_puts_its_password_in_the_error(
    conninfo: str,
) -> None:
    with pytest.raises(leaseq.ConnectionFailed) as sync_error:
        leaseq.Client(conninfo)

    async def connect() -> None:
        await leaseq.aio.AsyncClient.connect(conninfo)

    with pytest.raises(leaseq.ConnectionFailed) as async_error:
        asyncio.run(connect())
    for error in (sync_error.value, async_error.value):
        said = str(error) + repr(error.__cause__) + repr(error.__context__)
        assert "s3cret" not in said, said
        assert "cannot be read" in str(error), str(error)


def test_a_refused_connection_never_puts_its_password_in_the_error() -> None:
    # Nothing listens on port 1: libpq's own message, which names no password either.
    with pytest.raises(leaseq.ConnectionFailed) as error:
        leaseq.Client("postgresql://ada:s3cret-pw@127.0.0.1:1/db?connect_timeout=2")
    assert "s3cret" not in str(error.value)
