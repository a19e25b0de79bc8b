"""The house's floors, read from the source: every import between Jetway's own modules (at module level or
inside a function) goes down, never up, and no module reaches itself through others."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("contracts", "runtime", "services", "cli", "simulator")
SUPPORT = "testbed"  # what tests and benchmarks both import: the API emulator, the Go-built cluster, helpers
EVERY = (*PRODUCT, SUPPORT, "bench", "tests")


def _modules() -> dict[str, Path]:
    found = {}
    for top in EVERY:
        for path in (ROOT / top).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module an import names (`a.b.c` may be a name in module `a.b`)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> Iterator[str]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in names:
            target = _resolve(name)
            if target is not None and target != module:
                yield target


GRAPH = {module: set(imports_of(module)) for module in MODULES}


def _top(module: str) -> str:
    return module.split(".")[0]


# what each floor may import besides itself: contracts < runtime < services < cli; the simulator stands alone
ALLOWED = {
    "contracts": set(),
    "runtime": {"contracts"},
    "services": {"contracts", "runtime"},
    "cli": {"contracts", "runtime", "services", "simulator"},
    "simulator": set(),
}


@pytest.mark.parametrize("floor", sorted(ALLOWED))
def test_each_floor_imports_only_the_floors_below(floor: str) -> None:
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if _top(module) == floor
        for target in targets
        if _top(target) != floor and _top(target) not in ALLOWED[floor]
    )
    assert not upward, upward


def test_no_product_module_imports_the_tests() -> None:
    found = sorted(
        f"{m} imports {t}" for m, ts in GRAPH.items() if _top(m) in PRODUCT for t in ts if _top(t) in ("tests", SUPPORT, "bench")
    )
    assert not found, found


def test_the_benchmarks_import_nothing_from_the_tests() -> None:
    """What a benchmark shares with the tests lives in testbed/, which imports neither of them."""
    found = sorted(
        f"{m} imports {t}"
        for m, ts in GRAPH.items()
        for t in ts
        if (_top(m) == "bench" and _top(t) == "tests") or (_top(m) == SUPPORT and _top(t) in ("tests", "bench"))
    )
    assert not found, found


def test_no_import_circle_between_modules() -> None:
    """Tarjan's strongly connected components over the product's modules: none has more than one module."""
    product = {m: {t for t in ts if _top(t) in PRODUCT} for m, ts in GRAPH.items() if _top(m) in PRODUCT}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in product.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(product):
        if module not in index:
            visit(module)
    assert not circles, circles


def _service_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "services" and len(parts) > 2 else None  # services/catalog.py composes: no room


def test_no_service_package_imports_another_services_internals() -> None:
    """Each room keeps its own: the front door (services/console) reaches the watcher only through
    contracts/frontdoor.py, and whoever runs both in one process (`jetway up`) wires them together."""
    crossing = sorted(
        f"{module} imports {imported}"
        for module, imported_set in GRAPH.items()
        if (room := _service_of(module)) is not None
        for imported in imported_set
        if _service_of(imported) not in (None, room)
    )
    assert crossing == []
