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


#: No module of the package may grow past this many lines: split it by concern first.
MAX_MODULE_LINES = 450
#: Modules that are one concern by rule, and their own limit: every fix for NNI stays in one module.
LONGER_MODULES = {"nni_hwaware.nni_fixes": 550}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _resolve(name: str, modules: dict[str, Path], path: Path) -> set[str]:
    """The package's modules an import of ``name`` (``a.b`` or ``a.b.c`` for ``from a.b import c``) reaches."""
    if name in modules:
        return {name}
    parent = name.rsplit(".", 1)[0]
    return {parent} if parent in modules else set()


def _file_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules ``path`` imports, ``from pkg import submodule`` resolved to the submodule."""
    module = _module_name(path)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if path.name == "__init__.py" else 0)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if not name.startswith("nni_hwaware"):
                continue
            for alias in node.names:
                found |= _resolve(f"{name}.{alias.name}", modules, path)
    return found - {module}


def file_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports. A package's face (``__init__``) is left out: it only
    re-exports its children, and importing a package's child runs its face first in any case."""
    modules = _modules()
    faces = {name for name, path in modules.items() if path.name == "__init__.py"}
    return {name: _file_imports(path, modules) - faces for name, path in modules.items() if name not in faces}


def _child(module: str, package: str) -> str | None:
    """The direct child of ``package`` (a module or subpackage) that ``module`` lies in, or None."""
    if not module.startswith(package + "."):
        return None
    return module[len(package) + 1:].split(".")[0]


def room_graph(package: str, graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Between the direct children of ``package`` (its modules and subpackages): who imports whom."""
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if (source := _child(module, package)) is None:
            continue
        rooms.setdefault(source, set()).update(
            t for t in (_child(target, package) for target in targets) if t is not None and t != source)
    return rooms


def test_room_graph_finds_an_arrow_up_between_two_rooms_without_a_file_cycle() -> None:
    # ppo/a imports job; job imports ppo/b: no file cycle, yet the rooms ppo and job import each other.
    graph = {"p.ppo.a": {"p.job"}, "p.job": {"p.ppo.b"}, "p.ppo.b": set()}
    assert find_cycle(graph) is None
    assert find_cycle(room_graph("p", graph)) == ["job", "ppo", "job"]


def test_no_import_cycle_between_files() -> None:
    graph = file_graph()
    assert {"nni_hwaware.trial.run", "nni_hwaware.report.table"} <= graph.keys()
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


def test_no_arrow_up_at_any_level() -> None:
    """Inside every package, the graph between its direct children is acyclic: each can be drawn on a
    floor above everything it imports."""
    graph = file_graph()
    packages = sorted(name for name, path in _modules().items() if path.name == "__init__.py")
    assert "nni_hwaware.strategies" in packages
    for package in packages:
        cycle = find_cycle(room_graph(package, graph))
        assert cycle is None, f"inside {package}, an arrow runs up: {' -> '.join(cycle or [])}"


def test_no_module_over_the_line_limit() -> None:
    long = {name: f"{n} > {limit}" for name, path in _modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > (
                limit := LONGER_MODULES.get(name, MAX_MODULE_LINES))}
    assert not long, f"modules over their line limit (split them by concern): {long}"


def test_no_module_imports_the_face_of_a_package_it_lies_in() -> None:
    """A package's face (``__init__``) re-exports its children: a child that imports it points up."""
    modules = _modules()
    faces = {name for name, path in modules.items() if path.name == "__init__.py"}
    upward = sorted(f"{name} -> {face}" for name, path in modules.items() if name not in faces
                    for face in _file_imports(path, modules) & faces if name.startswith(face + "."))
    assert not upward, f"import the child that holds the name instead: {upward}"
