"""Holds the Python in the docs to the client: every ```python block of the README (and of
docs/workers.md, or of the Markdown files named as arguments) is type-checked with
`mypy --strict`, and a block marked `<!-- file: PATH -->` must be PATH's content word for word —
the README's quickstart is examples/quickstart.py, which tests/test_readme.py runs. Every file of
examples/ but this one must be shown by such a block: an example nobody reads drifts unseen.

A fragment (a block using names that its prose or an earlier block set up) says what it assumes
in a comment right above it, which Markdown does not show; it is checked as the block's first
lines:

    <!-- prelude:
    import leaseq
    client: leaseq.Client
    -->
    ```python

Exits 1 naming each failure by its Markdown file and line (scripts/lib.sh, check_python_client).
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent
CLIENT = EXAMPLES.parent
DOCS = [CLIENT / "README.md", CLIENT.parent.parent / "docs" / "workers.md"]
FENCE = re.compile(r"^\s*```\s*(\S*)\s*$")
LANGUAGES = ("python", "py")


@dataclass
class Block:
    markdown: Path
    #: The line (1-based) of its first line of code, and of its prelude's first line.
    line: int
    code: str
    prelude: str = ""
    prelude_line: int = 0
    #: The file it must equal (`<!-- file: PATH -->`, relative to the Markdown file).
    file: Path | None = None


def blocks(markdown: Path) -> list[Block]:
    """The Python blocks of `markdown`, with what the comment right above each says."""
    lines = markdown.read_text().splitlines(keepends=True)
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise SystemExit(f"{markdown}:{i + 1}: a ``` block that never ends")
        if fence.group(1) in LANGUAGES:
            block = Block(markdown, i + 2, "".join(lines[i + 1 : end]))
            annotate(block, lines, i)
            found.append(block)
        i = end + 1
    return found


def annotate(block: Block, lines: list[str], fence: int) -> None:
    """Reads the `<!-- prelude: … -->` or `<!-- file: … -->` comment ending right above the
    block's fence, if any."""
    if fence == 0 or not lines[fence - 1].rstrip().endswith("-->"):
        return
    start = fence - 1
    while start > 0 and "<!--" not in lines[start]:
        start -= 1
    opening = lines[start].strip()
    if opening.startswith("<!-- file:"):
        name = opening.removeprefix("<!-- file:").removesuffix("-->").strip()
        block.file = (block.markdown.parent / name).resolve()
    elif opening == "<!-- prelude:":
        block.prelude = "".join(lines[start + 1 : fence - 1])
        block.prelude_line = start + 2
    elif opening.startswith("<!-- prelude"):
        raise SystemExit(f"{block.markdown}:{start + 1}: a prelude opens with `<!-- prelude:` "
                         "alone on its line, its code on the next ones")


def shown_as_files(found: list[Block], docs: list[Path]) -> list[str]:
    """Failures: blocks that differ from their file, and examples no block shows."""
    failures = []
    for block in found:
        if block.file is None:
            continue
        if not block.file.is_file():
            failures.append(f"{block.markdown}:{block.line}: no file {block.file}")
            continue
        wanted = block.file.read_text()
        if block.code != wanted:
            diff = difflib.unified_diff(
                wanted.splitlines(keepends=True), block.code.splitlines(keepends=True),
                str(block.file), f"{block.markdown}:{block.line}",
            )
            failures.append(
                f"{block.markdown}:{block.line}: the block is not {block.file} word for word:\n"
                + "".join(diff)
            )
    shown = {block.file for block in found}
    for example in sorted(EXAMPLES.glob("*.py")):
        if example != Path(__file__).resolve() and example not in shown:
            failures.append(f"{example}: no block of {', '.join(map(str, docs))} shows it")
    return failures


def typecheck(found: list[Block]) -> tuple[int, str]:
    """mypy --strict over every block not tied to a file (those are checked as their files, with
    the rest of examples/): its exit status, and its report with the Markdown's lines."""
    with tempfile.TemporaryDirectory() as tmp:
        generated: dict[str, Block] = {}
        for n, block in enumerate(found):
            if block.file is None:
                name = f"readme_block_{n}.py"
                (Path(tmp) / name).write_text(block.prelude + block.code)
                generated[name] = block
        checked = sorted(str(p) for p in EXAMPLES.glob("*.py")) + sorted(
            str(Path(tmp) / name) for name in generated
        )
        ran = subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", *checked],
            cwd=CLIENT, capture_output=True, text=True,
        )

    def where(m: re.Match[str]) -> str:
        block = generated[m.group(1)]
        line, prelude = int(m.group(2)), block.prelude.count("\n")
        if line <= prelude:
            return f"{block.markdown}:{block.prelude_line + line - 1} (prelude):"
        return f"{block.markdown}:{block.line + line - prelude - 1}:"

    report = re.sub(r"\S*(readme_block_\d+\.py):(\d+):", where, ran.stdout + ran.stderr)
    return ran.returncode, report


def main(args: list[str]) -> int:
    docs = [Path(a).resolve() for a in args] or DOCS
    found = [block for markdown in docs for block in blocks(markdown)]
    if not found:
        print(f"no ```python block in {', '.join(map(str, docs))}", file=sys.stderr)
        return 1
    failures = shown_as_files(found, docs)
    status, report = typecheck(found)
    print(report, end="")
    for failure in failures:
        print(failure, file=sys.stderr)
    if status == 0 and not failures:
        print(f"{len(found)} Python blocks of {', '.join(d.name for d in docs)}: mypy --strict clean")
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
