// The API manifest (clients/api.toml) against the Node client: each method it names exists in the
// built package and its statement (src/calls.ts, the registry) calls the function; every statement
// in the sources calls a listed function with arguments it takes; the Worker constants are the
// manifest's. (clients/python/tests/test_manifest.py holds the manifest to the extension itself.)
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { test } from "node:test";

import { parse } from "smol-toml";
import ts from "typescript";

import * as calls from "../dist/esm/calls.js";
import * as leaseq from "../dist/esm/index.js";

const manifest = parse(readFileSync(new URL("../../api.toml", import.meta.url), "utf8"));
const FUNCTIONS = manifest.function;
const SOURCES = new URL("../src/", import.meta.url);
// `leaseq.<function>(` in a statement, and a `name => value` argument of it.
const SQL_CALL = /\bleaseq\.(\w+)\s*\(/g;
const NAMED = /^\s*(\w+)\s*=>/;

/** The methods an entry names for Node: none when it gives a reason instead. */
function methodsNamed(entry) {
  const named = entry.node;
  assert.ok(named !== undefined, `${entry.name}: nothing said for node`);
  if (typeof named === "object" && !Array.isArray(named)) {
    assert.ok(named.reason, `${entry.name}: node names no method and no reason`);
    return [];
  }
  return Array.isArray(named) ? named : [named];
}

/** `Client.x`: the method of the package's `Client`; `x`: the package's export. */
function resolve(method) {
  const [owner, name] = method.includes(".") ? method.split(".") : [undefined, method];
  assert.ok(owner === undefined || owner === "Client", `${method}: a Node name is Client.x or x`);
  const value = owner ? leaseq.Client.prototype[name] : leaseq[name];
  assert.equal(typeof value, "function", `${method}: not in the built package`);
  return value;
}

/** The SQL functions `f` calls, through the `calls.*` builders its compiled body uses. */
function functionsCalled(f) {
  const called = new Set();
  for (const [, builder] of f.toString().matchAll(/\bcalls\.(\w+)\(/g)) {
    for (const [, name] of String(calls[builder]).matchAll(SQL_CALL)) called.add(name);
  }
  return called;
}

/** Every method of the package's `Client` and every plain function it exports, by manifest name. */
function* publicCallables() {
  for (const name of Object.getOwnPropertyNames(leaseq.Client.prototype)) {
    const value = Object.getOwnPropertyDescriptor(leaseq.Client.prototype, name).value;
    if (name !== "constructor" && typeof value === "function") yield [`Client.${name}`, value];
  }
  for (const [name, value] of Object.entries(leaseq)) {
    if (typeof value === "function" && !/^class\b/.test(value.toString())) yield [name, value];
  }
}

test("every entry names the Node methods that call it, or says why none does", () => {
  for (const entry of FUNCTIONS) methodsNamed(entry);
});

test("the manifest names exactly the Node methods that call each function", () => {
  const byFunction = new Map();
  for (const entry of FUNCTIONS) {
    for (const method of methodsNamed(entry)) {
      byFunction.set(entry.name, new Set([...(byFunction.get(entry.name) ?? []), method]));
      const called = functionsCalled(resolve(method));
      assert.ok(called.has(entry.name), `${method} calls ${[...called]}, not ${entry.name}`);
    }
  }
  for (const [method, value] of publicCallables()) {
    for (const name of functionsCalled(value)) {
      assert.ok(
        byFunction.get(name)?.has(method),
        `${method} calls ${name}: the manifest's node entry for it does not name it`,
      );
    }
  }
});

/** The arguments of the call whose `(` ends at `start`, split at its own commas; undefined when
 * the text ends first. */
function callArguments(text, start) {
  const parts = [];
  let depth = 0;
  let quote = "";
  let begun = start;
  for (let at = start; at < text.length; at++) {
    const char = text[at];
    if (quote) {
      if (char === quote) quote = "";
    } else if (char === "'" || char === '"') {
      quote = char;
    } else if (char === "(") {
      depth++;
    } else if (char === ")" && depth) {
      depth--;
    } else if ((char === "," || char === ")") && !depth) {
      parts.push(text.slice(begun, at));
      if (char === ")") return parts.length === 1 && !parts[0].trim() ? [] : parts;
      begun = at + 1;
    }
  }
  return undefined;
}

/** Why `entry` refuses these arguments, or undefined: names it has, no more positions than it has
 * arguments, every argument without a default given. */
function refusal(entry, args) {
  const inputs = entry.args.filter((arg) => arg.mode !== "out");
  const names = inputs.map((arg) => arg.name);
  const named = new Set();
  let positional = 0;
  for (const arg of args) {
    const match = NAMED.exec(arg);
    if (match) named.add(match[1]);
    else if (named.size) return "a positional argument after a named one";
    else positional++;
  }
  if (positional > inputs.length) return `${positional} positional arguments, of ${inputs.length}`;
  const unknown = [...named].filter((name) => !names.includes(name));
  if (unknown.length) return `no argument ${unknown}`;
  const missing = inputs.filter(
    (arg, at) => arg.default === undefined && at >= positional && !named.has(arg.name),
  );
  return missing.length ? `${missing.map((arg) => arg.name)} not given` : undefined;
}

/** Every string and template literal of a source file (a substitution read as `?`): comments
 * are not statements. */
function stringLiterals(file) {
  const text = readFileSync(new URL(file, SOURCES), "utf8");
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest);
  const literals = [];
  const visit = (node) => {
    if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) {
      literals.push(node.text);
    } else if (ts.isTemplateExpression(node)) {
      const pieces = [node.head.text, ...node.templateSpans.map((span) => span.literal.text)];
      literals.push(pieces.join("?"));
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return literals;
}

test("every function the Node sources call is listed, with arguments it takes", () => {
  const byName = new Map();
  for (const entry of FUNCTIONS) byName.set(entry.name, [...(byName.get(entry.name) ?? []), entry]);
  const seen = new Set();
  for (const file of readdirSync(SOURCES).filter((f) => f.endsWith(".ts"))) {
    for (const text of stringLiterals(file)) {
      for (const match of text.matchAll(SQL_CALL)) {
        const name = match[1];
        seen.add(name);
        assert.ok(byName.has(name), `${file} calls leaseq.${name}, not in the manifest`);
        const args = callArguments(text, match.index + match[0].length);
        if (args === undefined) continue;
        const refusals = byName.get(name).map((entry) => refusal(entry, args));
        assert.ok(refusals.includes(undefined), `${file}: leaseq.${name}(${args}): ${refusals}`);
      }
    }
  }
  assert.ok(seen.has("queue_claim"), "the scan found no statements: is SOURCES the sources?");
});

test("the Worker constants are the manifest's, in milliseconds, exported by the package", () => {
  const worker = manifest.worker;
  assert.deepEqual([...leaseq.REFUSED_CLASSES], worker.refused_classes);
  assert.deepEqual([...leaseq.POISON_CLASSES], worker.poison_classes);
  assert.equal(leaseq.FIRST_CLAIM_WAIT, worker.first_claim_wait_seconds * 1000);
  assert.equal(leaseq.MIN_FINISH_WAIT, worker.min_finish_wait_seconds * 1000);
  assert.equal(leaseq.STOP_MARGIN_FRACTION, worker.stop_margin_fraction);
  assert.equal(leaseq.STOP_MARGIN_CAP, worker.stop_margin_cap_seconds * 1000);
});
