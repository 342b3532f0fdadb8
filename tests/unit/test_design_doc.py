"""docs/design.md is the one design of record: nothing in the repository cites another design
file, the page states every invariant (I1-I12), and its packages and arrows are the layer
test's (tests/unit/test_layers.py)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.unit.test_layers import ALLOWED, NARROW

REPO = Path(__file__).resolve().parents[2]
DESIGN = REPO / "docs" / "design.md"
README = REPO / "README.md"
# Spelled in two pieces so that this file does not cite it either.
FORMER_DESIGN = "DESIGN" + ".md"
# Never the repository's own files: git's, the venv's, downloaded tools, caches, cluster data.
SKIPPED_DIRS = {
    ".git",
    ".venv",
    ".cache",
    ".cluster",
    ".cluster-demo",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    "build",
}
INVARIANTS = range(1, 13)


def repository_files(root: Path = REPO) -> list[Path]:
    """The files of the repository: tracked, and new ones git does not ignore (every file
    outside the skipped folders when git cannot tell)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        found = []
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
            found += [Path(folder) / name for name in files]
        return found
    names = [name for name in listed.decode().split("\0") if name]
    return [root / name for name in names if not set(Path(name).parts[:-1]) & SKIPPED_DIRS]


def files_citing(needle: str, files: list[Path], root: Path = REPO) -> list[str]:
    """The files (relative to `root`) whose bytes hold `needle`, case and all."""
    needle_bytes = needle.encode()
    return sorted(
        str(path.relative_to(root))
        for path in files
        if path.is_file() and needle_bytes in path.read_bytes()
    )


def test_no_file_cites_a_design_outside_the_repository() -> None:
    files = repository_files()
    assert DESIGN in files and Path(__file__) in files
    assert files_citing(FORMER_DESIGN, files) == []


def test_the_citation_finder_sees_a_citation(tmp_path: Path) -> None:
    (tmp_path / "cites.py").write_text(f'"""The arrows of {FORMER_DESIGN} §2."""\n')
    (tmp_path / "clean.py").write_text('"""The arrows of docs/design.md §2."""\n')
    files = [tmp_path / "cites.py", tmp_path / "clean.py"]
    assert files_citing(FORMER_DESIGN, files, tmp_path) == ["cites.py"]


def test_every_invariant_has_its_section() -> None:
    text = DESIGN.read_text()
    missing = [f"I{n}" for n in INVARIANTS if not re.search(rf"^### I{n}\. \S", text, re.M)]
    assert missing == []


def test_the_sections_code_cites_exist() -> None:
    headings = re.findall(r"^## (\d+)\. ", DESIGN.read_text(), re.M)
    assert headings == [str(n) for n in range(1, 8)]


def arrows_drawn(text: str) -> dict[str, set[str]]:
    """The arrows of the picture in §2.2: `package ──► a, b, c`, continued on indented lines,
    comments in parentheses."""
    section = text.split("### 2.2", 1)[1].split("### 2.3", 1)[0]
    picture = section.split("```", 2)[1]
    lines: list[str] = []
    for line in picture.strip("\n").splitlines():
        if line.startswith(" ") and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    drawn: dict[str, set[str]] = {}
    for line in lines:
        head, _, targets = re.sub(r"\([^)]*\)", "", line).partition("►")
        package = head.replace("─", " ").split()[0]
        drawn[package] = {t.strip() for t in targets.split(",") if t.strip()}
    return drawn


def test_the_picture_draws_exactly_the_layer_tests_arrows() -> None:
    assert arrows_drawn(DESIGN.read_text()) == ALLOWED


def test_every_package_and_narrow_arrow_is_named() -> None:
    design = DESIGN.read_text()
    readme = README.read_text()
    for package in ALLOWED:
        assert f"| `{package}/` |" in design, package
        assert f"`{package}/`" in readme, package
    for modules in NARROW.values():
        for module in modules:
            assert module in design, module
