"""The toolkit's modules import each other without a cycle (issue 12), and its sub-packages in layers.

Every import counts, including the ones inside functions: a lazy import hides
a cycle from the interpreter, not from the reader. The sub-packages stack
`client` → `workspace` → `land` → `mcp` → `runner` → `cli` (STYLE.md, Layout): each imports only
the ones before it, so a new one (the runner daemon, the lander) can take
what it needs from below without pulling in the CLI.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.agent.live import REPO

PACKAGE = "agent"
LAYERS = ("client", "workspace", "land", "mcp", "runner", "cli")


def module_name(source: Path) -> str:
    relative = source.relative_to(REPO).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def imported_modules(source: Path, known: set[str]) -> set[str]:
    """The toolkit modules `source` imports (`from agent import cli` names the module `agent.cli`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(), filename=str(source))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            raise AssertionError(f"{source}: relative import; the toolkit imports by absolute name")
    return found & known


def import_graph() -> dict[str, set[str]]:
    sources = sorted((REPO / PACKAGE).rglob("*.py"))
    known = {module_name(source) for source in sources}
    graph = {module_name(source): imported_modules(source, known) for source in sources}
    for name in graph:
        graph[name].discard(name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path that starts and ends at the same module, or None."""
    finished: set[str] = set()
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in finished:
            return None
        path.append(name)
        for imported in sorted(graph[name]):
            if cycle := visit(imported):
                return cycle
        path.pop()
        finished.add(name)
        return None

    for name in sorted(graph):
        if cycle := visit(name):
            return cycle
    return None


def test_the_cycle_finder_sees_a_cycle_and_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_the_toolkit_modules_and_their_imports():
    graph = import_graph()

    assert {
        "agent",
        "agent.cli",
        "agent.cli.leasehold",
        "agent.client.api",
        "agent.cli.run",
        "agent.mcp.server",
    } <= set(graph)
    assert graph["agent.__main__"] == {"agent.cli"}  # `from agent.cli import main`
    assert (
        "agent.client.errors" in graph["agent.client.keeper"]
    )  # `from agent.client.errors import LEASE_LOSS_CODES, …`
    assert "agent.workspace.state" in graph["agent.cli.run"]  # `from agent.workspace import state`


def test_the_toolkit_modules_import_each_other_without_a_cycle():
    cycle = find_cycle(import_graph())

    assert cycle is None, " -> ".join(cycle or [])


def layer(name: str) -> int | None:
    """The position in LAYERS of the sub-package that `name` belongs to; None for `agent` and `agent.__main__`."""
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_toolkit_module_is_in_a_sub_package():
    graph = import_graph()

    assert {name for name in graph if layer(name) is None} == {"agent", "agent.__main__"}


def test_each_sub_package_imports_only_those_below_it():
    offences = {
        name: sorted(imported for imported in imports if (layer(imported) or 0) > (layer(name) or 0))
        for name, imports in import_graph().items()
        if layer(name) is not None
    }

    assert {name: imports for name, imports in offences.items() if imports} == {}


def test_no_toolkit_module_is_over_400_lines():
    lengths = {
        str(source.relative_to(REPO)): len(source.read_text().splitlines()) for source in (REPO / PACKAGE).rglob("*.py")
    }

    assert {path: lines for path, lines in lengths.items() if lines > 400} == {}
