"""``llm``'s imports go one way: no module imports, inside a function, a module that imports it back.

Why: an import deferred into a function only hides a cycle (the two modules cannot be read or tested apart);
``llm.data.check`` and ``llm.report.write`` exist so that the config readers and the sources, and the report and
its writers, import each other in one direction.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(modules: dict[str, Path]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Per module: the ``llm`` modules it imports at module level, and those it imports inside a function."""
    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    top: dict[str, set[str]] = {}
    inner: dict[str, set[str]] = {}
    for name, path in modules.items():
        top[name], inner[name] = set(), set()

        def visit(node: ast.AST, in_function: bool, name: str = name) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue  # for type checkers only: never run
                if isinstance(child, ast.Import):
                    targets = [a.name for a in child.names]
                elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                    targets = [child.module, *(f"{child.module}.{a.name}" for a in child.names)]
                else:
                    targets = []
                for target in targets:
                    found = known(target) if target.startswith("llm") else None
                    if found and found != name:
                        (inner if in_function else top)[name].add(found)
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

        visit(ast.parse(path.read_text()), False)
    return top, inner


def hidden_cycles(package: Path) -> list[str]:
    """Each function-level import ``a -> b`` where ``b`` reaches ``a`` through module-level imports."""
    modules = {_module_name(p, package.parent): p for p in sorted(package.rglob("*.py"))}
    top, inner = _imports(modules)

    def reached_from(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in top.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    return [f"{a} imports {b} inside a function, and {b} imports {a} back" for a in sorted(inner)
            for b in sorted(inner[a]) if a in reached_from(b)]


def test_no_import_inside_a_function_hides_a_cycle():
    assert hidden_cycles(ROOT / "llm") == []


def test_the_check_finds_a_hidden_cycle(tmp_path):
    """The check itself: two modules of a package ``llm`` that import each other, one of them inside a function."""
    pkg = tmp_path / "llm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "readers.py").write_text("def check():\n    from llm.sources import SOURCES\n    return SOURCES\n")
    (pkg / "sources.py").write_text("from llm.readers import check\nSOURCES = {}\n")
    assert hidden_cycles(pkg) == ["llm.readers imports llm.sources inside a function, and llm.sources imports "
                                  "llm.readers back"]
