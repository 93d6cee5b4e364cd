"""Every refusal of the extension as its own exception, carrying the server's message.

The extension refuses bad input with a deliberate SQLSTATE (docs/reference.md, "Errors"); each
one leaseq raises maps to one class here, so callers catch what they mean (`except
leaseq.InvalidArgument`) instead of parsing messages. The psycopg error stays attached as
`__cause__`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg.errors


class LeaseqError(Exception):
    """A call the server refused: its SQLSTATE, message and hint, as the server said them."""

    sqlstate: str | None

    def __init__(self, message: str, sqlstate: str | None = None, hint: str | None = None):
        said = f"{message} (SQLSTATE {sqlstate})" if sqlstate else message
        super().__init__(f"{said}; {hint}" if hint else said)
        self.message = message
        self.sqlstate = sqlstate
        self.hint = hint


class NullArgument(LeaseqError):
    """22004: a required argument was NULL (None)."""


class InvalidArgument(LeaseqError):
    """22023: an argument outside its allowed range; the message names the argument and range."""


class NotFound(LeaseqError):
    """42704: an unknown queue, job id or role."""


class PermissionDenied(LeaseqError):
    """42501: the role may not call the function, or the queue's grants do not cover the call."""


class PayloadTooLarge(LeaseqError):
    """54000: a payload, result or error larger than `leaseq.max_payload_bytes`."""


class NeedsReadCommitted(LeaseqError):
    """0A000: a lease operation called inside a REPEATABLE READ or SERIALIZABLE transaction."""


class NeedsOwnTransactions(LeaseqError):
    """25001: raised by `await_jobs` (the server's `CALL leaseq.queue_await`) when called inside a
    transaction block or from a function: it commits between its looks, so it must run on its
    own, in autocommit."""


class DuplicateKey(LeaseqError):
    """23505: a redriven job's dedupe key is held by another live job."""


class NeedsUpdate(LeaseqError):
    """55000: the database runs a release of leaseq the installed library does not serve."""


class InternalError(LeaseqError):
    """XX000: an invariant of leaseq's own tables did not hold (a bug: please report it)."""


class ExtensionMissing(LeaseqError):
    """3F000: the database has no schema `leaseq`: the extension is not installed there."""


class ConnectionFailed(LeaseqError):
    """The database could not be reached: where it was tried, and why (refused, timed out, an
    unknown database or role, authentication)."""


class LeaseLost(LeaseqError):
    """Raised by `run_step` and `report_progress`: the job's lease token is stale (its lease
    expired, was reclaimed or cancelled), so the step or progress was not recorded — stop working
    on the job. Not a SQLSTATE: the server answered `queue_step` or `queue_progress` with false.
    The job's `lost` event is set too."""


BY_SQLSTATE: dict[str, type[LeaseqError]] = {
    "22004": NullArgument,
    "22023": InvalidArgument,
    "42704": NotFound,
    "42501": PermissionDenied,
    "54000": PayloadTooLarge,
    "0A000": NeedsReadCommitted,
    "25001": NeedsOwnTransactions,
    "23505": DuplicateKey,
    "55000": NeedsUpdate,
    "XX000": InternalError,
    "3F000": ExtensionMissing,
}

_INSTALL_HINT = "leaseq is not installed in this database: run CREATE EXTENSION leaseq in it (as a superuser)"


def translate(error: psycopg.Error) -> LeaseqError:
    """The leaseq exception for `error` (a `LeaseqError` for a SQLSTATE without its own class)."""
    diag = error.diag
    sqlstate = error.sqlstate
    message = diag.message_primary or str(error).strip()
    hint = diag.message_hint
    if sqlstate == "3F000" and '"leaseq"' in message:
        hint = _INSTALL_HINT
    cls = BY_SQLSTATE.get(sqlstate or "", LeaseqError)
    return cls(message, sqlstate, hint)


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Runs a block whose leaseq refusals surface as leaseq exceptions. Every other error — a
    serialization failure, a deadlock, a statement timeout, a lost connection — reaches the
    caller as psycopg raised it, for its retry loop to recognise."""
    try:
        yield
    except psycopg.DatabaseError as error:
        if error.sqlstate not in BY_SQLSTATE:
            raise
        raise translate(error) from error


def connection_failed(conninfo: str, error: psycopg.OperationalError) -> LeaseqError:
    """A failed connection, named with its target and its cause — or the server's refusal
    (an unknown database, a role that may not log in) with its SQLSTATE."""
    if error.sqlstate:
        refused = translate(error)
        return ConnectionFailed(
            f"cannot connect to {target(conninfo)}: {refused.message}", error.sqlstate, refused.hint
        )
    cause = redacted(" ".join(str(error).split()))
    return ConnectionFailed(f"cannot connect to {target(conninfo)}: {cause}")


#: A password in libpq's words: `password=…` (quoted or not) and a URL's `user:…@`, even in a
#: URL too malformed to parse (`postgresql:/user:secret@host`).
_PASSWORDS = (
    (re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s\"]*)", re.IGNORECASE), r"\1***"),
    (re.compile(r"(postgres(?:ql)?:/*[^:@/\s\"]*:)[^@\s\"]*@", re.IGNORECASE), r"\1***@"),
)


def redacted(message: str) -> str:
    """`message` (libpq's, which may quote the connection string) with any password masked."""
    for pattern, mask in _PASSWORDS:
        message = pattern.sub(mask, message)
    return message


#: Seconds a connection attempt may take when the connection string sets no `connect_timeout`:
#: a server that accepts and never answers must not hang a worker (libpq's default is none).
CONNECT_TIMEOUT = 5


def connect_options(conninfo: str, prepared_statements: bool = True) -> dict[str, Any]:
    """What leaseq's own connections add to `conninfo`: its application name and
    `CONNECT_TIMEOUT` unless the string sets them, and with `prepared_statements=False` no
    prepared statement (`prepare_threshold=None`: for a pooler in transaction mode). An
    unreadable string is a `ConnectionFailed` whose message masks the password libpq quotes."""
    options: dict[str, Any] = {}
    if not prepared_statements:
        options["prepare_threshold"] = None
    params: dict[str, Any] = {}
    unreadable: str | None = None
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as error:
        unreadable = redacted(" ".join(str(error).split()))
    if unreadable is not None:
        # libpq quotes the string it could not read, password and all: raised outside the
        # `except`, so that psycopg's own message is not kept as the context a traceback prints.
        raise ConnectionFailed(f"cannot connect: the connection string cannot be read: {unreadable}")
    if "connect_timeout" not in params:
        options["connect_timeout"] = CONNECT_TIMEOUT
    if "application_name" not in params:
        options["application_name"] = "leaseq-py"
    return options


def target(conninfo: str) -> str:
    """`host:port/database as user`, as the connection string (or libpq's defaults) gives it."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "an unreadable connection string"
    host = str(params.get("host") or "the default host")
    port = str(params.get("port") or "5432")
    where = f"{host}:{port}"
    if params.get("dbname"):
        where += f"/{params['dbname']}"
    return f"{where} as {params.get('user') or 'the default user'}"
