"""The house's layering (STYLE.md, Layout), read from the source with `ast` so it cannot silently break.

- `config/` is the ground: it imports none of the rooms or doors.
- Domain rooms stack: `ledger` imports neither `environments` nor `leases`; `environments` does not import `leases`.
- No domain module imports a door (`api`, `console`, an app's `apis/`, `jobs.py` or management commands).
- `agent/` talks to the server over HTTP only: it imports none of the server's packages.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("ledger", "environments", "leases")
DOORS = ("api", "console")
SERVER = ("config", *ROOMS, *DOORS)
BELOW: dict[str, tuple[str, ...]] = {"ledger": (), "environments": ("ledger",), "leases": ("ledger", "environments")}


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


def test_config_imports_no_room_and_no_door() -> None:
    offences = {
        module: sorted(name for name in _imports(path) if _top(name) in (*ROOMS, *DOORS))
        for module, path in _modules("config")
    }
    assert {module: names for module, names in offences.items() if names} == {}


@pytest.mark.parametrize("room", ROOMS)
def test_a_domain_room_imports_no_door_and_nothing_above_it(room: str) -> None:
    allowed = {"config", room, *BELOW[room]}
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
    admin_files = sorted(str(path.relative_to(ROOT)) for room in ROOMS for path in (ROOT / room).rglob("admin*.py"))
    assert admin_files == []


def test_the_agent_toolkit_imports_no_server_package() -> None:
    offences = {
        module: sorted(name for name in _imports(path) if _top(name) in SERVER) for module, path in _modules("agent")
    }
    assert {module: names for module, names in offences.items() if names} == {}


def test_the_layering_check_sees_a_violation() -> None:
    """The checker itself can fail: a door import in a domain module is caught."""
    assert _is_door("leases.apis.claims")
    assert _is_door("console.dashboard")
    assert not _is_door("leases.services.claims")
    assert "api.errors" in _imports_of_source("from api.errors import envelope\n")


def _imports_of_source(source: str) -> set[str]:
    path = ROOT / "var" / "layering-probe.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(source)
    try:
        return _imports(path)
    finally:
        path.unlink()
