"""The house's layering (STYLE.md, Layout), read from the source with `ast` so it cannot silently break.

- `config/` and `core/` are the ground: they import no room and no door (`core` not even `config`).
- The domain rooms stack `ledger → environments → leases → reconciliation, landing, runners`:
  each imports only the rooms below it.
- `insight`, `push` and `operations` sit above the rooms and below the doors: they read the rooms,
  no room imports them, `push` reads only `ledger`, `insight` may read `push` (the delivery gauges)
  and `operations` any of them.
- No domain module imports a door (`api`, `console`, a room's `apis/`, `jobs.py`, management commands).
- `agent/` talks to the server over HTTP only: it imports none of the server's packages.
- No import cycle between modules anywhere (bench and the agent included), counting every
  module-level import (an import inside a function is a deliberate late binding, not a cycle).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GROUND = ("config", "core")
ROOMS = ("ledger", "environments", "leases", "reconciliation", "landing", "runners")
ABOVE_ROOMS = ("insight", "push", "operations")
DOORS = ("api", "console")
SERVER = (*GROUND, *ROOMS, *ABOVE_ROOMS, *DOORS)
BELOW: dict[str, tuple[str, ...]] = {
    "ledger": (),
    "environments": ("ledger",),
    "leases": ("ledger", "environments"),
    "reconciliation": ("ledger", "environments", "leases"),
    "landing": ("ledger", "environments", "leases"),
    # A restarted runner hands its slots' landings back through the landing room's services (SPEC §23.1).
    "runners": ("ledger", "environments", "leases", "landing"),
    # Above the rooms: what each may read.
    "insight": ("ledger", "environments", "leases", "reconciliation", "landing", "runners", "push"),
    "push": ("ledger",),
    "operations": ("ledger", "environments", "leases", "reconciliation", "landing", "runners", "insight", "push"),
}
PACKAGES = tuple(
    sorted(path.parent.name for path in ROOT.glob("*/__init__.py") if path.parent.name not in (".venv", "var"))
)


def _modules(package: str) -> Iterator[tuple[str, Path]]:
    for path in sorted((ROOT / package).rglob("*.py")):
        relative = path.relative_to(ROOT)
        if "migrations" in relative.parts:
            continue
        yield ".".join(relative.with_suffix("").parts).removesuffix(".__init__"), path


def _imports(path: Path) -> set[str]:
    """Every module named by an import statement anywhere in the file (lazy and TYPE_CHECKING ones included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _module_level_imports(path: Path, known: set[str]) -> set[str]:
    """The project modules a file imports when it is loaded: top-level statements, `if`/`try` bodies
    included, `if TYPE_CHECKING:` excluded; `from package import name` counts `package.name` when that
    is a module, else `package`."""
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if alias.name in known)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    if target in known:
                        found.add(target)
                    elif node.module in known:
                        found.add(node.module)
            elif isinstance(node, ast.If):
                test = node.test
                if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
                    continue
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(ast.parse(path.read_text(), filename=str(path)).body)
    return found


def _is_door(module: str) -> bool:
    parts = module.split(".")
    return (
        parts[0] in DOORS
        or "apis" in parts
        or "management" in parts
        or parts[-1] == "jobs"
        or parts[-1] == "urls"
        or parts[-1] == "admin"
        or parts[-1].startswith("admin_")
    )


def _top(name: str) -> str:
    return name.split(".")[0]


@pytest.mark.parametrize("ground", GROUND)
def test_the_ground_imports_no_room_and_no_door(ground: str) -> None:
    forbidden = {*ROOMS, *ABOVE_ROOMS, *DOORS, *(("config",) if ground == "core" else ())}
    offences = {
        module: sorted(name for name in _imports(path) if _top(name) in forbidden) for module, path in _modules(ground)
    }
    assert {module: names for module, names in offences.items() if names} == {}


@pytest.mark.parametrize("room", [room for room in (*ROOMS, *ABOVE_ROOMS) if (ROOT / room).is_dir()])
def test_a_room_imports_no_door_and_only_what_is_below_it(room: str) -> None:
    allowed = {*GROUND, room, *BELOW[room]}
    offences: dict[str, list[str]] = {}
    for module, path in _modules(room):
        if _is_door(module):
            continue
        bad = sorted(
            name for name in _imports(path) if _top(name) in SERVER and (_top(name) not in allowed or _is_door(name))
        )
        if bad:
            offences[module] = bad
    assert offences == {}


def test_the_rooms_hold_no_admin_code() -> None:
    admin_files = sorted(
        str(path.relative_to(ROOT))
        for room in (*ROOMS, *ABOVE_ROOMS)
        if (ROOT / room).is_dir()
        for path in (ROOT / room).rglob("admin*.py")
    )
    assert admin_files == []


def test_the_agent_toolkit_imports_no_server_package() -> None:
    offences = {
        module: sorted(name for name in _imports(path) if _top(name) in SERVER) for module, path in _modules("agent")
    }
    assert {module: names for module, names in offences.items() if names} == {}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _import_graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    paths = {module: path for package in packages for module, path in _modules(package)}
    known = set(paths)
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        targets = _module_level_imports(path, known) - {module}
        # A package's own __init__ importing its submodules is how packages re-export: not a cycle edge back.
        graph[module] = {target for target in targets if not module.startswith(f"{target}.")}
    return graph


def test_no_import_cycle_anywhere() -> None:
    assert _cycles(_import_graph(PACKAGES)) == []


def test_the_layering_check_sees_a_violation() -> None:
    """The checker itself can fail: a door import in a domain module is caught, and so is a cycle."""
    assert _is_door("leases.apis.claims")
    assert _is_door("console.dashboard")
    assert not _is_door("leases.services.claims")
    assert "api.errors" in _imports_of_source("from api.errors import envelope\n")
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _imports_of_source(source: str) -> set[str]:
    path = ROOT / "var" / "layering-probe.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(source)
    try:
        return _imports(path)
    finally:
        path.unlink()
