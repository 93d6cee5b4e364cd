// Input that tries to reach past the field it was given in (docs/security.md, "Low findings"): a
// `Json` payload text that would add members to its flow node (L-19), and a connection string
// whose password a malformed URL could put in the error (L-24).
import assert from "node:assert/strict";
import { test } from "node:test";

import * as leaseq from "../dist/esm/index.js";
import { newQueue, statuses, withClient, withPg } from "./helpers.mjs";

test("a Json payload that is not exactly one value cannot redirect a flow job", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const other = await newQueue(client);
    for (const text of [
      `{}, "queue": "${other}"`,
      `{}, "depends_on": []`,
      `{} {"queue": "${other}"}`,
      `"a", "queue": "${other}"`,
      "",
    ]) {
      await assert.rejects(
        async () => client.flow([{ key: "a", queue, payload: new leaseq.Json(text) }]),
        (e) => e instanceof SyntaxError && /exactly one JSON value/.test(e.message),
        text,
      );
    }
    assert.deepEqual([await statuses(queue), await statuses(other)], [{}, {}]);
    // One value, whitespace and all, is still sent as written: every digit kept.
    const exact = ' {"n": 123456789012345678901234567890} ';
    const ids = await client.flow([{ key: "a", queue, payload: new leaseq.Json(exact) }]);
    const { rows } = await withPg((c) =>
      c.query("SELECT queue, payload::text AS payload FROM leaseq.jobs WHERE id = $1", [ids.get("a")]),
    );
    assert.deepEqual(rows, [{ queue, payload: '{"n": 123456789012345678901234567890}' }]);
  }));

// pg-connection-string reads \`postgresql:/ada:s3cret-pw@h/db\` as database "ada:s3cret-pw@h/db",
// which the target and the server's refusal then name: both are masked.
test("a malformed connection string never puts its password in the error", async () => {
  for (const url of ["postgresql:/ada:s3cret-pw@h/db", "postgresql://ada:s3cret-pw@[h/db", "postgres:ada:s3cret-pw@h/db"]) {
    let said = "";
    try {
      const client = new leaseq.Client(url);
      try {
        await client.check();
      } finally {
        await client.close();
      }
    } catch (e) {
      said = `${e?.message} ${e?.cause?.message ?? ""}`;
    }
    assert.ok(said !== "", `${url} connected`);
    assert.ok(!said.includes("s3cret"), said);
  }
});
