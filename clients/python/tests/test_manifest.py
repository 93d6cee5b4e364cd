"""The API manifest (clients/api.toml) against the extension and against this client.

Against a live database: the functions in schema leaseq that the application roles may execute
are exactly the manifest's entries, with its arguments, results and roles. Against the package:
each method the manifest names exists in `leaseq.client` and `leaseq.aio` and its statement calls
the function; every statement calls a listed function with arguments it takes; the sync client
has the asyncio client's methods and signatures; the Worker constants are the manifest's."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg

import leaseq.aio
import leaseq.client
import leaseq.worker
from leaseq import _calls

MANIFEST_PATH = Path(__file__).resolve().parents[2] / "api.toml"
MANIFEST: dict[str, Any] = tomllib.loads(MANIFEST_PATH.read_text())
FUNCTIONS: list[dict[str, Any]] = MANIFEST["function"]
PACKAGE = Path(leaseq.client.__file__).parent

# A call of the extension in a statement, and a named argument of it.
SQL_CALL = re.compile(r"\bleaseq\.(\w+)\s*\(")
NAMED = re.compile(r"\s*(\w+)\s*=>")


def signature_key(entry: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """What tells overloads apart: the name and the argument types."""
    return entry["name"], tuple(arg["type"] for arg in entry["args"])


def described(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry without what the clients say about it: what the catalog can confirm."""
    kept = {key: value for key, value in entry.items() if key not in ("rust", "python", "node")}
    kept["roles"] = sorted(kept["roles"])
    return kept


# Modes as pg_proc.proargmodes spells them; TABLE columns are the result, not arguments.
MODES = {"b": "inout", "o": "out", "v": "variadic"}
CATALOG = """
SELECT p.proname, p.prokind, p.proretset, pg_catalog.format_type(p.prorettype, NULL),
       ARRAY(SELECT pg_catalog.format_type(type, NULL)
               FROM pg_catalog.unnest(coalesce(p.proallargtypes, p.proargtypes::oid[]))
                    WITH ORDINALITY AS arg (type, n)
              ORDER BY n),
       coalesce(p.proargmodes::text[], ARRAY[]::text[]),
       coalesce(p.proargnames, ARRAY[]::text[]),
       ARRAY(SELECT pg_catalog.pg_get_function_arg_default(p.oid, n)
               FROM pg_catalog.generate_series(
                        1, coalesce(pg_catalog.cardinality(p.proallargtypes), p.pronargs)) AS n),
       ARRAY(SELECT role
               FROM pg_catalog.unnest(%(roles)s::text[]) WITH ORDINALITY AS r (role, n)
              WHERE pg_catalog.has_function_privilege(role, p.oid, 'EXECUTE')
              ORDER BY n)
  FROM pg_catalog.pg_proc AS p
 WHERE p.pronamespace = 'leaseq'::regnamespace
"""


def installed(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """The functions of schema leaseq that any application role may execute, as entries."""
    # Types spelt from pg_catalog alone: leaseq's own come out qualified, whatever the path.
    conn.execute("SET search_path = pg_catalog")
    found: list[dict[str, Any]] = []
    for row in conn.execute(CATALOG, {"roles": MANIFEST["roles"]}).fetchall():
        name, kind, returns_set, result, types, modes, names, defaults, roles = row
        if not roles:
            continue  # the trigger functions: nobody calls them
        modes = modes or ["i"] * len(types)
        names = names or [""] * len(types)
        entry: dict[str, Any] = {"name": name}
        if kind == "p":
            entry["kind"] = "procedure"
        args: list[dict[str, str]] = []
        columns: list[dict[str, str]] = []
        for arg_name, arg_type, mode, default in zip(names, types, modes, defaults):
            if kind != "p" and mode in ("o", "t"):
                columns.append({"name": arg_name, "type": arg_type})
                continue
            arg = {"name": arg_name, "type": arg_type}
            if default is not None:
                arg["default"] = default
            if mode in MODES:
                arg["mode"] = MODES[mode]
            args.append(arg)
        entry["args"] = args
        if kind != "p":
            if columns:
                entry["returns"] = "TABLE" if returns_set else "record"
                entry["columns"] = columns
            else:
                entry["returns"] = f"SETOF {result}" if returns_set else result
        entry["roles"] = sorted(roles)
        found.append(entry)
    return found


def test_the_manifest_lists_exactly_what_the_roles_may_call_with_its_arguments_and_results(
    conn: psycopg.Connection[Any],
) -> None:
    roles = conn.execute(
        "SELECT rolname FROM pg_catalog.pg_roles WHERE rolname = ANY(%s)", (MANIFEST["roles"],)
    ).fetchall()
    assert sorted(r for (r,) in roles) == sorted(MANIFEST["roles"])
    listed = {signature_key(entry): described(entry) for entry in FUNCTIONS}
    assert len(listed) == len(FUNCTIONS), "an entry is listed twice"
    actual = {signature_key(entry): entry for entry in installed(conn)}
    problems = [f"not in the manifest: {actual[key]}" for key in actual.keys() - listed.keys()]
    problems += [f"not in the extension: {listed[key]}" for key in listed.keys() - actual.keys()]
    problems += [
        f"{key[0]} {field}: the manifest says {listed[key].get(field)}, "
        f"the extension {actual[key].get(field)}"
        for key in listed.keys() & actual.keys()
        for field in listed[key].keys() | actual[key].keys()
        if listed[key].get(field) != actual[key].get(field)
    ]
    assert not problems, "\n".join(problems)


def methods_named(entry: dict[str, Any], client: str) -> list[str]:
    named = entry[client]
    if isinstance(named, dict):
        assert named.get("reason"), f"{entry['name']}: {client} names no method and no reason"
        return []
    return [named] if isinstance(named, str) else list(named)


def test_every_entry_names_the_methods_of_each_client_or_says_why_none() -> None:
    for entry in FUNCTIONS:
        for client in ("rust", "python", "node"):
            assert client in entry, f"{entry['name']}: nothing said for {client}"
            methods_named(entry, client)


def twins(method: str) -> list[Callable[..., Any]]:
    """The sync and the asyncio object a manifest name means: `Client.x` the method of
    `leaseq.Client` and of `leaseq.aio.AsyncClient`, `x` the function of both modules."""
    owner, _, name = method.rpartition(".")
    if owner == "Client":
        sources: list[Any] = [leaseq.client.Client, leaseq.aio.AsyncClient]
    else:
        assert not owner, f"{method}: a Python name is `Client.x` or `x`"
        sources = [leaseq.client, leaseq.aio]
    found: list[Callable[..., Any]] = []
    for source in sources:
        value = getattr(source, name, None)
        assert callable(value), f"{method}: {source.__name__} has no {name}"
        found.append(value)
    return found


def statements_of(builder: Callable[..., Any]) -> Iterator[str]:
    """The statements a `_calls` builder may return: the module's statements it names, and any it
    writes inline."""
    code = builder.__code__
    for name in code.co_names:
        value = getattr(_calls, name, None)
        if isinstance(value, str):
            yield value
    yield from (const for const in code.co_consts if isinstance(const, str))


def functions_called(method: Callable[..., Any]) -> set[str]:
    """The SQL functions `method` calls, through the `_calls` builders its source uses."""
    source = textwrap.dedent(inspect.getsource(method))
    called: set[str] = set()
    for builder in re.findall(r"\b_calls\.(\w+)\(", source):
        for statement in statements_of(getattr(_calls, builder)):
            called.update(SQL_CALL.findall(statement))
    return called


SYNC = (leaseq.client, leaseq.client.Client)
ASYNC = (leaseq.aio, leaseq.aio.AsyncClient)


def public_callables(module: Any, client: type) -> dict[str, Callable[..., Any]]:
    """Every public function of `module` and public method of its `client`, by manifest name."""
    found: dict[str, Callable[..., Any]] = {
        name: value
        for name, value in vars(module).items()
        if inspect.isfunction(value)
        and value.__module__ == module.__name__
        and not name.startswith("_")
    }
    for name in vars(client):
        if not name.startswith("_") and callable(getattr(client, name)):
            found[f"Client.{name}"] = getattr(client, name)
    return found


def test_the_manifest_names_exactly_the_python_methods_that_call_each_function() -> None:
    by_name: dict[str, set[str]] = {}
    for entry in FUNCTIONS:
        for method in methods_named(entry, "python"):
            by_name.setdefault(entry["name"], set()).add(method)
            for twin in twins(method):
                called = functions_called(twin)
                assert entry["name"] in called, f"{method} ({twin.__module__}) calls {called}"
    for module, client in (SYNC, ASYNC):
        for method, value in public_callables(module, client).items():
            for function in functions_called(value):
                assert method in by_name.get(function, set()), (
                    f"{method} ({module.__name__}) calls {function}: the manifest's python entry "
                    "for it does not name it"
                )


def call_arguments(statement: str, start: int) -> list[str] | None:
    """The arguments of the call whose `(` ends at `start`, split at its own commas; None when
    the statement's text ends first (the rest is assembled at run time)."""
    parts: list[str] = []
    depth, quote, begun = 0, "", start
    for at in range(start, len(statement)):
        char = statement[at]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif char in ",)" and not depth:
            parts.append(statement[begun:at])
            if char == ")":
                return [] if parts == [""] or parts[0].isspace() and len(parts) == 1 else parts
            begun = at + 1
    return None


def accepts(entry: dict[str, Any], args: list[str]) -> str | None:
    """Why `entry` refuses these arguments, or None: names it has, no more positions than it
    has arguments, every argument without a default given."""
    inputs = [arg for arg in entry["args"] if arg.get("mode") != "out"]
    names = [arg["name"] for arg in inputs]
    positional, named = 0, set[str]()
    for arg in args:
        match = NAMED.match(arg)
        if match:
            named.add(match.group(1))
        elif named:
            return "a positional argument after a named one"
        else:
            positional += 1
    if positional > len(inputs):
        return f"{positional} positional arguments, of {len(inputs)}"
    if named - set(names):
        return f"no argument {sorted(named - set(names))}"
    missing = [
        arg["name"]
        for at, arg in enumerate(inputs)
        if "default" not in arg and at >= positional and arg["name"] not in named
    ]
    return f"{missing} not given" if missing else None


def string_literals(path: Path) -> Iterator[str]:
    """Every string in a module's code, docstrings and other bare strings left out."""
    tree = ast.parse(path.read_text())
    documents = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in documents:
                yield node.value


def test_every_function_the_python_sources_call_is_listed_with_arguments_it_takes() -> None:
    by_name: dict[str, list[dict[str, Any]]] = {}
    for entry in FUNCTIONS:
        by_name.setdefault(entry["name"], []).append(entry)
    seen: set[str] = set()
    for path in sorted(PACKAGE.glob("*.py")):
        for text in string_literals(path):
            for match in SQL_CALL.finditer(text):
                name = match.group(1)
                seen.add(name)
                assert name in by_name, f"{path.name} calls leaseq.{name}, not in the manifest"
                args = call_arguments(text, match.end())
                if args is None:
                    continue
                refusals = [accepts(entry, args) for entry in by_name[name]]
                assert None in refusals, f"{path.name}: leaseq.{name}({','.join(args)}): {refusals}"
    assert "queue_claim" in seen, "the scan found no statements: is PACKAGE the sources?"


def comparable(signature: inspect.Signature) -> str:
    """A signature with the asyncio names made sync: `AsyncClient` and `AsyncConnection`."""
    return re.sub(r"\bAsync(?=Client\b|Connection\b)", "", str(signature))


# Made differently: `leaseq.Client(conninfo)` connects in its constructor, which asyncio cannot
# await, so `AsyncClient.connect(conninfo)` does.
ASYNC_ONLY = {"Client.connect"}


def test_the_sync_client_has_the_async_clients_methods_and_signatures() -> None:
    sync, asyncio = public_callables(*SYNC), public_callables(*ASYNC)
    assert set(sync) == set(asyncio) - ASYNC_ONLY, set(sync) ^ (set(asyncio) - ASYNC_ONLY)
    for name, value in sync.items():
        assert not inspect.iscoroutinefunction(value), name
        assert inspect.iscoroutinefunction(asyncio[name]), f"{name} is not async in leaseq.aio"
        mine, theirs = inspect.signature(value), inspect.signature(asyncio[name])
        assert comparable(mine) == comparable(theirs), f"{name}: {mine} and async {theirs}"


def test_the_worker_constants_are_the_manifests() -> None:
    worker = MANIFEST["worker"]
    assert list(leaseq.worker.REFUSED_CLASSES) == worker["refused_classes"]
    assert list(leaseq.worker.POISON_CLASSES) == worker["poison_classes"]
    assert leaseq.worker.FIRST_CLAIM_WAIT == worker["first_claim_wait_seconds"]
    assert leaseq.worker.MIN_FINISH_WAIT == worker["min_finish_wait_seconds"]
    assert leaseq.worker.STOP_MARGIN_FRACTION == worker["stop_margin_fraction"]
    assert leaseq.worker.STOP_MARGIN_CAP == worker["stop_margin_cap_seconds"]
