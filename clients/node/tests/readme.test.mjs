// The README's quickstart is a program that works: examples/quickstart.ts (the README shows it
// word for word: examples/check-readme.mjs holds the two together, and type-checks it), its types
// stripped as a TypeScript runner would, run against the test database.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import ts from "typescript";

import { url, withPg } from "./helpers.mjs";

const packageDir = fileURLToPath(new URL("..", import.meta.url));

test("the quickstart commits an order with its job, and its worker completes it", async () => {
  const source = readFileSync(new URL("../examples/quickstart.ts", import.meta.url), "utf8");
  const { outputText } = ts.transpileModule(source, {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  });
  // Run from the package's folder, so that its `from "leaseq"` is this package (dist/esm).
  const ran = spawnSync(process.execPath, ["--input-type=module"], {
    cwd: packageDir,
    input: outputText,
    env: { ...process.env, DATABASE_URL: url },
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(ran.status, 0, ran.stderr);
  const said = /^job (\d+): succeeded, result (.*)$/m.exec(ran.stdout);
  assert.ok(said, ran.stdout);
  await withPg(async (c) => {
    const { rows } = await c.query(
      `SELECT queue, status::text AS status, payload->>'order' AS order_id, result->>'sent_to' AS sent_to
         FROM leaseq.jobs WHERE id = $1`,
      [said[1]],
    );
    assert.equal(rows.length, 1, `job ${said[1]} is not in the database`);
    const [{ order_id, ...job }] = rows;
    assert.deepEqual(job, { queue: "emails", status: "succeeded", sent_to: "ada@example.com" });
    const orders = await c.query("SELECT email FROM orders WHERE id = $1::uuid", [order_id]);
    assert.deepEqual(orders.rows, [{ email: "ada@example.com" }], "the order committed with its job");
  });
});
