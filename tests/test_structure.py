"""The package's layering: no import cycle between its subpackages, and NNI's fixes at the bottom."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "nni_hwaware"


def _unit(module: str) -> str:
    """The subpackage (or top-level module) a dotted module name belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> set[str]:
    """Every ``nni_hwaware`` module ``path`` imports, at the top or inside functions."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("nni_hwaware")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module
                base = module.split(".")[: -node.level] if path.name != "__init__.py" else module.split(".")[
                    : len(module.split(".")) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if name.startswith("nni_hwaware"):
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    """Subpackage -> the subpackages it imports (itself excluded)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        unit = _unit(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        targets = {_unit(m) for m in _imports(path)} - {unit, "__init__"}
        graph.setdefault(unit, set()).update(targets)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target):], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_cycle_finder_finds_a_planted_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_between_subpackages() -> None:
    graph = import_graph()
    assert {"strategies", "trial", "report", "training", "nni_fixes"} <= graph.keys()
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


def test_training_sits_below_strategies_trials_and_reports() -> None:
    graph = import_graph()
    assert "training" in graph["strategies"] and "training" in graph["trial"] and "training" in graph["report"]
    assert not graph["training"] & {"strategies", "trial", "report", "experiment", "cli"}


def test_nni_fixes_imports_nothing_of_the_package() -> None:
    assert import_graph()["nni_fixes"] == set()
