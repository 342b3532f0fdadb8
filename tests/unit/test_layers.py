"""The layer arrows of docs/design.md §2, checked over every module's imports (AST, no execution)."""

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
    # rebuilding: the auditor and the rebuild workers, over the ledger's copying
    "rebuild": {"ledger", "global_meta", "placement", "core"},
    # the pipeline's sink writes through the write proxies: their client only (NARROW below)
    "pipeline": {"region", "reader", "writer", "global_meta", "core"},
    "verify": {"core"},  # histories and the checker: pure
    # a failover run over any deployment: its workload, nemesis, final reads and audits
    "verify/run": {"verify", "region", "reader", "ledger", "global_meta", "core"},
    # the simulated deployment: globelog's own proxies and rebuilders on the simulated world
    "verify/sim": {
        "verify",
        "region",
        "rebuild",
        "writer",
        "reader",
        "ledger",
        "global_meta",
        "placement",
        "core",
    },
    # the simulated world under the real code: loop, network, servers speaking the wire
    "verify/sim/io": {"verify", "ledger", "global_meta", "core"},
    # figures for people (percentiles, PNG plots) from what was measured
    "figures": {"core"},
    # the local cluster: real ZooKeeper, bookies, the WAN emulator and our proxies as processes
    "localcluster": {"ledger", "global_meta", "placement", "core"},
    # the live failover run: workload and nemesis on a local cluster, judged by the checker
    "verify/live": {
        "verify",
        "localcluster",
        "figures",
        "region",
        "writer",
        "reader",
        "ledger",
        "global_meta",
        "placement",
        "core",
    },
    "benchmarks": {
        "localcluster",
        "figures",
        "pipeline",
        "region",
        "rebuild",
        "writer",
        "reader",
        "ledger",
        "global_meta",
        "placement",
        "core",
    },
    "demo": {
        "benchmarks",
        "localcluster",
        "figures",
        "pipeline",
        "region",
        "writer",
        "reader",
        "ledger",
        "global_meta",
        "placement",
        "core",
    },
    # the web console: an operator's view over every layer, and the proxies' HTTP pieces
    "console": {
        "localcluster",
        "region",
        "rebuild",
        "writer",
        "reader",
        "ledger",
        "global_meta",
        "placement",
        "core",
    },
    # the composition root: the `globelog` command's parsing and dispatch
    "membership": {
        "localcluster",
        "region",
        "rebuild",
        "ledger",
        "global_meta",
        "placement",
        "core",
    },
    "cli": {
        "membership",
        "console",
        "demo",
        "benchmarks",
        "localcluster",
        "figures",
        "region",
        "rebuild",
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
    ("verify/run", "region"): {"region.client"},
}
# pyspark: the pipeline, and the Spark benchmark's own timed sources
FOREIGN_ONLY_IN = {"kazoo": {"global_meta"}, "pyspark": {"pipeline", "benchmarks"}}
# Packages used only through their top-level API (`from ledger import X`, an `__all__`).
TOP_LEVEL_ONLY = {"ledger"}
# ...except the failure kinds a simulated bookie answers with (verify/sim/bookie.py).
SIM_LEDGER = {"ledger.machines.signals"}

# ...and the codecs, which their own micro-benchmark times call by call.
CODEC_BENCHMARK = REPO / "benchmarks" / "codec.py"
LEDGER_CODECS = {
    "ledger.codecs.entry",
    "ledger.codecs.frames",
    "ledger.codecs.messages",
    "ledger.codes",
}
# ...and what a simulated bookie speaks: the wire's codecs, codes and errors.
LEDGER_WIRE = LEDGER_CODECS | {
    "ledger.codecs.batch_codec",
    "ledger.errors",
    "ledger.machines.signals",
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
    """Modules imported below a top-level-only package (`from ledger.drivers.client import ...`)."""
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
        f"imports {foreign}; only {' and '.join(sorted(homes))} may"
        for foreign, homes in FOREIGN_ONLY_IN.items()
        if foreign in imported and package not in homes
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
        assert deep_imports_of(path) <= SIM_LEDGER, path.relative_to(REPO)
    elif package == "verify/sim/io":
        assert deep_imports_of(path) <= LEDGER_WIRE, path.relative_to(REPO)
    elif path == CODEC_BENCHMARK:
        assert deep_imports_of(path) <= LEDGER_CODECS, path.relative_to(REPO)
    elif package not in TOP_LEVEL_ONLY:
        assert deep_imports_of(path) == set(), path.relative_to(REPO)


# The packages whose code the simulation runs rather than copies (issue: the simulation runs
# the production drivers): verify/sim defines no class of the same name as theirs.
DRIVER_PACKAGES = ("ledger", "writer", "reader", "region", "placement", "rebuild", "global_meta")


def classes_in(folder: Path) -> dict[str, Path]:
    found = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                found[node.name] = path
    return found


def test_the_simulation_defines_no_class_the_drivers_define() -> None:
    drivers: dict[str, Path] = {}
    for package in DRIVER_PACKAGES:
        drivers |= classes_in(REPO / package)
    simulated = classes_in(REPO / "verify" / "sim")
    copied = {
        name: str(path.relative_to(REPO)) for name, path in simulated.items() if name in drivers
    }
    assert copied == {}, "verify/sim re-implements what the drivers do: run theirs"
    assert {"SimLoop", "SimBookie", "SimMetaStore", "SimDeployment"} <= set(simulated)


def test_the_ledger_api_names_exist() -> None:
    import ledger

    missing = [name for name in ledger.__all__ if not hasattr(ledger, name)]
    assert missing == []


def test_the_deep_import_checker_catches_inner_modules(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from ledger.drivers.client import LedgerClient\nfrom ledger import LedgerWriter\n"
    )
    assert deep_imports_of(sample) == {"ledger.drivers.client"}


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


# ------------------------------------------------------------------ inside the ledger package
# ledger/'s folders are its layers (ledger/__init__.py). "top" is ledger/codes.py and
# ledger/errors.py, the vocabulary every layer shares; "api" is the package itself.
LEDGER_LAYERS: dict[str, set[str]] = {
    "top": {"top"},
    "codecs": {"top", "codecs"},
    "machines": {"top", "codecs", "machines"},
    "connections": {"top", "codecs", "connections"},
    "drivers": {"top", "codecs", "machines", "connections", "drivers"},
    "api": {"top", "codecs", "machines", "connections", "drivers"},
}
# Bytes in, bytes out; events in, actions out: no IO, no event loop, no ZooKeeper.
PURE_LAYERS = {"top", "codecs", "machines"}
IMPURE_MODULES = {"asyncio", "socket", "selectors", "kazoo", "global_meta"}
ERRORS_MODULE = REPO / "ledger" / "errors.py"


def ledger_layer_of_module(name: str) -> str:
    """`ledger.codecs.frames` → codecs, `ledger.errors` → top, `ledger` → api."""
    parts = name.split(".")
    if len(parts) == 1:
        return "api"
    return parts[1] if len(parts) > 2 else "top"


def ledger_layer_of_path(path: Path, root: Path = REPO) -> str:
    inner = path.relative_to(root / "ledger").parts
    if inner == ("__init__.py",):
        return "api"
    return inner[0] if len(inner) > 1 else "top"


def ledger_files() -> list[Path]:
    return sorted((REPO / "ledger").rglob("*.py"))


def test_the_ledger_layers_are_folders() -> None:
    found = {ledger_layer_of_path(p) for p in ledger_files()}
    assert found == set(LEDGER_LAYERS)
    for layer in set(LEDGER_LAYERS) - {"top", "api"}:
        assert (REPO / "ledger" / layer / "__init__.py").is_file(), layer


def ledger_layer_violations(path: Path, root: Path = REPO) -> list[str]:
    layer = ledger_layer_of_path(path, root)
    found = [
        f"imports {name} ({ledger_layer_of_module(name)}); {layer} may import "
        f"{sorted(LEDGER_LAYERS[layer])}"
        for name in sorted(modules_imported(path, "ledger"))
        if ledger_layer_of_module(name) not in LEDGER_LAYERS[layer]
    ]
    if layer in PURE_LAYERS:
        found += [
            f"imports {name}; {layer} is pure" for name in sorted(imports_of(path) & IMPURE_MODULES)
        ]
    return found


@pytest.mark.parametrize("path", ledger_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_ledger_layers_import_only_below(path: Path) -> None:
    assert ledger_layer_violations(path) == [], path.relative_to(REPO)


def test_the_ledger_layer_checker_catches_sideways_and_impure_imports(tmp_path: Path) -> None:
    machine = tmp_path / "ledger" / "machines" / "sample.py"
    machine.parent.mkdir(parents=True)
    machine.write_text(
        "import asyncio\nfrom ledger.connections.connection import BookieConnection\n"
        "from ledger.codecs.metadata import LedgerMetadata\nfrom ledger.errors import FencedError\n"
    )
    found = ledger_layer_violations(machine, tmp_path)
    assert found == [
        "imports ledger.connections.connection (connections); machines may import "
        "['codecs', 'machines', 'top']",
        "imports asyncio; machines is pure",
    ]


def error_classes_outside_errors_module(path: Path) -> list[str]:
    """Public classes in `path` that derive from an error or exception class."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            bases = [
                b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
            ]
            if any(base.endswith(("Error", "Exception")) for base in bases):
                found.append(node.name)
    return found


def test_every_ledger_error_is_in_ledger_errors() -> None:
    outside = {
        str(path.relative_to(REPO)): names
        for path in ledger_files()
        if path != ERRORS_MODULE and (names := error_classes_outside_errors_module(path))
    }
    assert outside == {}
    assert "BookieTimeoutError" in error_classes_outside_errors_module(ERRORS_MODULE)


def test_the_error_place_checker_catches_an_error_class(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "class StrayError(errors.GlobelogError):\n    pass\n"
        "class _Private(Exception):\n    pass\nclass Plain:\n    pass\n"
    )
    assert error_classes_outside_errors_module(sample) == ["StrayError"]


# ------------------------------------------------------------------ the shape of the tree
FOLDER_LINES_MAX = 3000  # lines of Python in one folder's own files (subfolders apart)
CLI_LINES_MAX = 2500  # the command line is parsing and dispatch only
NOT_OURS = {".git", ".venv", ".cache", "build", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def test_the_arrows_form_no_cycle() -> None:
    """The packages can be put in one order where every arrow points down."""
    placed: list[str] = []
    remaining = dict(ALLOWED)
    while remaining:
        ready = [p for p, deps in remaining.items() if deps - {p} <= set(placed)]
        assert ready, f"a cycle among {sorted(remaining)}"
        placed += ready
        for package in ready:
            del remaining[package]


def test_the_cycle_finder_sees_a_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ALLOWED, "core", {"ledger"})
    with pytest.raises(AssertionError, match="a cycle"):
        test_the_arrows_form_no_cycle()


def lines_by_folder(root: Path) -> dict[str, int]:
    """Lines of Python in each folder's own files."""
    found: dict[str, int] = {}
    for path in root.rglob("*.py"):
        inner = path.relative_to(root)
        if NOT_OURS & set(inner.parts) or path.name.endswith("_pb2.py"):
            continue
        folder = str(inner.parent)
        found[folder] = found.get(folder, 0) + len(path.read_text().splitlines())
    return found


def test_no_folder_holds_more_than_its_share() -> None:
    too_big = {f: n for f, n in lines_by_folder(REPO).items() if n > FOLDER_LINES_MAX}
    assert too_big == {}, f"split these into subfolders by responsibility: {too_big}"
    cli = sum(n for f, n in lines_by_folder(REPO).items() if f == "cli" or f.startswith("cli/"))
    assert cli <= CLI_LINES_MAX


def test_the_folder_counter_counts_own_files_only(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "x.py").write_text("1\n2\n")
    (tmp_path / "a" / "b" / "y.py").write_text("1\n")
    (tmp_path / "a" / "m_pb2.py").write_text("generated\n")
    assert lines_by_folder(tmp_path) == {"a": 2, "a/b": 1}
