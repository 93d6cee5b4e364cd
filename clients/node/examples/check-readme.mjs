// Holds the TypeScript in the docs to the client: every ```ts block of the README (and of
// docs/workers.md, or of the Markdown files named as arguments) is type-checked as tsc --strict
// --noEmit would (examples/tsconfig.json: the package's own settings, `leaseq` resolved to this
// package's dist/, so build first), and a block marked `<!-- file: PATH -->` must be PATH's
// content word for word — the README's quickstart is examples/quickstart.ts, which
// tests/readme.test.mjs runs. Every .ts file of examples/ must be shown by such a block: an
// example nobody reads drifts unseen.
//
// A fragment (a block using names that its prose or an earlier block set up) says what it assumes
// in a comment right above it, which Markdown does not show; it is checked as the block's first
// lines, and each block is a module of its own:
//
//     <!-- prelude:
//     import { Client } from "leaseq";
//     declare const client: Client;
//     -->
//     ```ts
//
// Exits 1 naming each failure by its Markdown file and line (scripts/lib.sh, check_node_client).
import { existsSync, readFileSync, readdirSync, realpathSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import ts from "typescript";

const examples = realpathSync(path.dirname(fileURLToPath(import.meta.url)));
const client = path.dirname(examples);
const defaultDocs = [path.join(client, "README.md"), path.join(client, "..", "..", "docs", "workers.md")];
const fence = /^\s*```\s*(\S*)\s*$/;
const languages = new Set(["ts", "typescript"]);

/** The TypeScript blocks of `markdown`, with what the comment right above each says. */
function blocksOf(markdown) {
  const lines = readFileSync(markdown, "utf8").split(/(?<=\n)/);
  const found = [];
  for (let i = 0; i < lines.length; i++) {
    const opening = fence.exec(lines[i]);
    if (!opening) continue;
    let end = i + 1;
    while (end < lines.length && lines[end].trim() !== "```") end++;
    if (end === lines.length) throw new Error(`${markdown}:${i + 1}: a \`\`\` block that never ends`);
    if (languages.has(opening[1])) {
      const block = { markdown, line: i + 2, code: lines.slice(i + 1, end).join(""), prelude: "", preludeLine: 0 };
      annotate(block, lines, i);
      found.push(block);
    }
    i = end;
  }
  return found;
}

/** Reads the `<!-- prelude: … -->` or `<!-- file: … -->` comment ending right above the block's
 * fence, if any. */
function annotate(block, lines, at) {
  if (at === 0 || !lines[at - 1].trimEnd().endsWith("-->")) return;
  let start = at - 1;
  while (start > 0 && !lines[start].includes("<!--")) start--;
  const opening = lines[start].trim();
  if (opening.startsWith("<!-- file:")) {
    const name = opening.slice("<!-- file:".length, -"-->".length).trim();
    const file = path.resolve(path.dirname(block.markdown), name);
    block.file = existsSync(file) ? realpathSync(file) : file;
  } else if (opening === "<!-- prelude:") {
    block.prelude = lines.slice(start + 1, at - 1).join("");
    block.preludeLine = start + 2;
  } else if (opening.startsWith("<!-- prelude")) {
    throw new Error(`${block.markdown}:${start + 1}: a prelude opens with \`<!-- prelude:\` alone on its line, its code on the next ones`);
  }
}

/** Failures: blocks that differ from their file, and examples no block shows. */
function shownAsFiles(found, docs) {
  const failures = [];
  for (const block of found.filter((b) => b.file !== undefined)) {
    if (!existsSync(block.file)) {
      failures.push(`${block.markdown}:${block.line}: no file ${block.file}`);
    } else if (readFileSync(block.file, "utf8") !== block.code) {
      const wanted = readFileSync(block.file, "utf8").split("\n");
      const got = block.code.split("\n");
      const first = wanted.findIndex((line, n) => line !== got[n]);
      failures.push(
        `${block.markdown}:${block.line + first}: the block is not ${block.file} word for word: ` +
          `the file's line ${first + 1} is ${JSON.stringify(wanted[first])}, the block's ${JSON.stringify(got[first])}`,
      );
    }
  }
  const shown = new Set(found.map((b) => b.file));
  for (const name of readdirSync(examples).filter((n) => n.endsWith(".ts")).sort()) {
    if (!shown.has(path.join(examples, name))) {
      failures.push(`${path.join(examples, name)}: no block of ${docs.join(", ")} shows it`);
    }
  }
  return failures;
}

/** The diagnostics of one program: examples/tsconfig.json's files, and each block not tied to a
 * file as a file of its own in examples/ (held in memory: where its imports resolve as the
 * examples' do), each with the Markdown line it came from. */
function typecheck(found) {
  const config = ts.getParsedCommandLineOfConfigFile(path.join(examples, "tsconfig.json"), {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, "\n"));
    },
  });
  const options = { ...config.options, strict: true, noEmit: true };
  const virtual = new Map();
  found.forEach((block, n) => {
    if (block.file === undefined) {
      // `export {}`: a module, whatever the block holds, so blocks share no global names.
      virtual.set(path.join(examples, `readme-block-${n}.ts`), { block, text: `${block.prelude}${block.code}export {};\n` });
    }
  });
  const host = ts.createCompilerHost(options);
  const { fileExists, readFile, getSourceFile } = host;
  host.fileExists = (name) => virtual.has(name) || fileExists.call(host, name);
  host.readFile = (name) => virtual.get(name)?.text ?? readFile.call(host, name);
  host.getSourceFile = (name, language, ...rest) => {
    const held = virtual.get(name);
    return held ? ts.createSourceFile(name, held.text, language) : getSourceFile.call(host, name, language, ...rest);
  };
  const program = ts.createProgram([...config.fileNames, ...virtual.keys()], options, host);
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const message = ts.flattenDiagnosticMessageText(d.messageText, "\n");
    if (d.file === undefined) return `error TS${d.code}: ${message}`;
    const { line, character } = d.file.getLineAndCharacterOfPosition(d.start ?? 0);
    const held = virtual.get(d.file.fileName);
    if (held === undefined) return `${d.file.fileName}:${line + 1}:${character + 1} - error TS${d.code}: ${message}`;
    const preludeLines = held.block.prelude.split("\n").length - 1;
    const where =
      line < preludeLines
        ? `${held.block.preludeLine + line} (prelude)`
        : `${held.block.line + line - preludeLines}:${character + 1}`;
    return `${held.block.markdown}:${where} - error TS${d.code}: ${message}`;
  });
}

const docs = process.argv.length > 2 ? process.argv.slice(2).map((a) => path.resolve(a)) : defaultDocs;
const found = docs.flatMap(blocksOf);
if (found.length === 0) {
  console.error(`no \`\`\`ts block in ${docs.join(", ")}`);
  process.exit(1);
}
const failures = [...typecheck(found), ...shownAsFiles(found, docs)];
for (const failure of failures) console.error(failure);
if (failures.length > 0) process.exit(1);
console.log(`${found.length} TypeScript blocks of ${docs.map((d) => path.basename(d)).join(", ")}: tsc --strict clean`);
