"""The layer arrows of DESIGN.md §2, checked over every module's imports (AST, no execution)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "global_meta": {"core"},
    "placement": {"core"},
    "ledger": {"global_meta", "placement", "core"},
    "writer": {"ledger", "global_meta", "placement", "core"},
    "reader": {"ledger", "global_meta", "placement", "core"},
    "region": {"writer", "reader", "ledger", "global_meta", "placement", "core"},
    # the pipeline's sink writes through the write proxies: their client only (NARROW below)
    "pipeline": {"region", "reader", "writer", "global_meta", "core"},
    "verify": {"core"},  # histories and the checker: pure
    # the simulation drives the pure machines of every layer, as the drivers do
    "verify/sim": {
        "verify",
        "region",
        "writer",
        "reader",
        "ledger",
        "global_meta",
        "placement",
        "core",
    },
    "cli": {
        "region",
        "pipeline",
        "verify",
        "writer",
        "reader",
        "ledger",
        "global_meta",
        "placement",
        "core",
    },
}
# Arrows that allow only some modules of the imported package.
NARROW: dict[tuple[str, str], set[str]] = {
    ("pipeline", "region"): {"region.client", "region.registry"},
}
FOREIGN_ONLY_IN = {"kazoo": "global_meta", "pyspark": "pipeline"}
# Packages used only through their top-level API (`from ledger import X`, an `__all__`).
TOP_LEVEL_ONLY = {"ledger"}
# ...except the ledger's pure machines, which the simulation drives itself.
LEDGER_MACHINES = {
    "ledger.add_events",
    "ledger.add_state",
    "ledger.metadata",
    "ledger.read_lac_state",
    "ledger.read_state",
    "ledger.recovery_events",
    "ledger.recovery_state",
    "ledger.signals",
}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def deep_imports_of(path: Path) -> set[str]:
    """Modules imported below a top-level-only package (`from ledger.client import ...`)."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        found.update(n for n in names if "." in n and n.split(".")[0] in TOP_LEVEL_ONLY)
    return found


def modules() -> list[tuple[str, Path]]:
    """Every module with its package: the most specific ALLOWED key holding it."""
    found = []
    for package in ALLOWED:
        for path in sorted((REPO / package).rglob("*.py")):
            inner = [p for p in ALLOWED if p != package and p.startswith(package + "/")]
            if not any(path.is_relative_to(REPO / p) for p in inner):
                found.append((package, path))
    return found


def test_every_package_exists() -> None:
    for package in ALLOWED:
        assert (REPO / package / "__init__.py").is_file(), package


def violations(package: str, imported: set[str]) -> list[str]:
    """Every import of `imported` that `package` may not make."""
    found = [
        f"imports {name}; {package} may import {sorted(ALLOWED[package])}"
        for name in sorted((imported & set(ALLOWED)) - ALLOWED[package] - {package})
    ]
    found += [
        f"imports {foreign}; only {home} may"
        for foreign, home in FOREIGN_ONLY_IN.items()
        if foreign in imported and package != home
    ]
    return found


@pytest.mark.parametrize(
    ("package", "path"), modules(), ids=lambda v: str(v).replace(str(REPO), "")
)
def test_imports_follow_the_layer_arrows(package: str, path: Path) -> None:
    assert violations(package, imports_of(path)) == [], path.relative_to(REPO)


def modules_imported(path: Path, package: str) -> set[str]:
    """The full names of the modules of `package` that `path` imports."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == package)
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.split(".")[0] == package
        ):
            found.add(node.module)
    return found


@pytest.mark.parametrize(
    ("package", "path"), modules(), ids=lambda v: str(v).replace(str(REPO), "")
)
def test_narrow_arrows_import_only_their_modules(package: str, path: Path) -> None:
    for (importer, imported), allowed in NARROW.items():
        if package == importer:
            assert modules_imported(path, imported) <= allowed, path.relative_to(REPO)


@pytest.mark.parametrize(
    ("package", "path"), modules(), ids=lambda v: str(v).replace(str(REPO), "")
)
def test_other_packages_use_the_ledger_api_only(package: str, path: Path) -> None:
    if package == "verify/sim":
        assert deep_imports_of(path) <= LEDGER_MACHINES, path.relative_to(REPO)
    elif package not in TOP_LEVEL_ONLY:
        assert deep_imports_of(path) == set(), path.relative_to(REPO)


def test_the_ledger_api_names_exist() -> None:
    import ledger

    missing = [name for name in ledger.__all__ if not hasattr(ledger, name)]
    assert missing == []


def test_the_deep_import_checker_catches_inner_modules(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from ledger.client import LedgerClient\nfrom ledger import LedgerWriter\n")
    assert deep_imports_of(sample) == {"ledger.client"}


def test_the_checker_catches_upward_and_foreign_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import kazoo.client\nfrom writer.log import LogWriter\nfrom core import errors\n"
    )
    found = violations("reader", imports_of(sample))
    assert found == [
        "imports writer; reader may import ['core', 'global_meta', 'ledger', 'placement']",
        "imports kazoo; only global_meta may",
    ]


def test_the_narrow_arrow_checker_catches_other_modules(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from region.client import ProxyClient\nimport region.write_proxy\n")
    assert modules_imported(sample, "region") - NARROW[("pipeline", "region")] == {
        "region.write_proxy"
    }
