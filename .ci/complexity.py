"""Size limits CI enforces on the package (CONTRIBUTING.md, "Limits").

No module over MAX_MODULE_LINES, no class over MAX_CLASS_LINES (a command module of the CLI, ``bot/cli/*_commands.py``,
over MAX_COMMAND_MODULE_LINES: commands parse, call a service and print), no function
(method, closure) over MAX_FUNCTION_LINES or over cyclomatic complexity MAX_COMPLEXITY,
as radon measures it.  Alembic migrations are exempt: they are history, written once.
Prints one line per breach and exits 1 when there is any.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

MAX_MODULE_LINES = 380
MAX_CLASS_LINES = 200
MAX_COMMAND_MODULE_LINES = 250
MAX_FUNCTION_LINES = 60
MAX_COMPLEXITY = 15


def functions(blocks: list[Function | Class]) -> Iterator[Function]:
    for block in blocks:
        if isinstance(block, Class):
            yield from functions(list(block.methods) + list(block.inner_classes))
        else:
            yield block
            yield from functions(list(block.closures))


def classes(blocks: list[Function | Class]) -> Iterator[Class]:
    for block in blocks:
        if isinstance(block, Class):
            yield block
            yield from classes(list(block.inner_classes))


def breaches(root: Path) -> Iterator[str]:
    for path in sorted(root.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        source = path.read_text(encoding="utf-8")
        lines = source.count("\n")
        most = MAX_COMMAND_MODULE_LINES if path.name.endswith("_commands.py") else MAX_MODULE_LINES
        if lines > most:
            yield f"{path}: {lines} lines (at most {most})"
        blocks = cc_visit(source)
        for block in classes(blocks):
            length = block.endline - block.lineno + 1
            if length > MAX_CLASS_LINES:
                yield f"{path}:{block.lineno}: class {block.name} is {length} lines (at most {MAX_CLASS_LINES})"
        for function in functions(blocks):
            name = f"{function.classname}.{function.name}" if function.classname else function.name
            length = function.endline - function.lineno + 1
            if length > MAX_FUNCTION_LINES:
                yield f"{path}:{function.lineno}: {name} is {length} lines (at most {MAX_FUNCTION_LINES})"
            if function.complexity > MAX_COMPLEXITY:
                where = f"{path}:{function.lineno}: {name}"
                yield f"{where} has complexity {function.complexity} (at most {MAX_COMPLEXITY})"


def main(argv: list[str]) -> int:
    found = [line for root in argv or ["bot"] for line in breaches(Path(root))]
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} over the limits; split the function or module (CONTRIBUTING.md, Limits)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
