"""DESIGN.md's layering: floors import down only, no file-level cycles, no private name across
modules; only dpkit.noise draws randomness. (import-linter checks the same contracts and the
engine's inner floors in .ci/run; see docs/architecture.md.)"""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "dpkit"

# DESIGN.md's floors, F1 lowest. Rooms on one floor are independent siblings: they never import
# one another (release | local; engine | learn | markets | adaptive | robust; cli | server).
# import-linter checks the same floors, and the ones inside the engine, in .ci/run (pyproject.toml).
RANK = {
    "noise": 1,
    "events": 1,
    "accounting": 2,
    "mechanisms": 3,
    "release": 4,
    "local": 4,
    "engine": 5,
    "learn": 5,
    "markets": 5,
    "adaptive": 5,
    "robust": 5,
    "attacks": 6,
    "cli": 7,
    "server": 7,
}
# Sideways imports DESIGN.md allows between rooms of one floor: the command line starts the
# service (`dpkit serve`); the service never imports the command line.
ALLOWED_SIDEWAYS: set[tuple[str, str]] = {("cli", "server")}


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "dpkit" or len(parts) < 2:
        return None
    return parts[1]


def _python_files() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


@functools.cache
def _tree(path: Path) -> ast.Module:
    """Each source file parsed once per run: the tests below walk the same trees (read only),
    which were parsed four times over (5.0 s of CPU for these tests, now 1.3 s)."""
    return ast.parse(path.read_text(), filename=str(path))


def _imports(path: Path) -> list[str]:
    tree = _tree(path)
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            if node.module == "dpkit":
                names.extend(f"dpkit.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("path", _python_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_lower_rooms_never_import_higher_ones(path: Path) -> None:
    rel = path.relative_to(SRC)
    own = rel.parts[0].removesuffix(".py")
    if own not in RANK:
        return
    for name in _imports(path):
        other = _room(name)
        if other is None or other not in RANK or other == own:
            continue
        if RANK[other] > RANK[own] or (
            RANK[other] == RANK[own] and (own, other) not in ALLOWED_SIDEWAYS
        ):
            pytest.fail(f"{rel} (room {own!r}) imports {name} (room {other!r}): layering broken")


RANDOMNESS = re.compile(
    r"np\.random\b|numpy\.random\b|^\s*import random\b|^\s*from random import|"
    r"\brandom\.(random|randint|randrange|choice|choices|shuffle|sample|getrandbits|uniform)\(|"
    r"\bos\.urandom\b|\bos\.getrandom\b|default_rng\(|\buuid\.uuid4\b|"
    r"^\s*import secrets\b|^\s*from secrets import|"
    r"\bsecrets\.(token_\w+|randbelow|randbits|choice|SystemRandom)\b|"
    # raw words from a dpkit.noise Source (np.uint64(...) constants are not draws)
    r"(?<!np)(?<!numpy)\.uint(32|64)\(",
    re.MULTILINE,
)


@pytest.mark.parametrize("path", _python_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_only_the_noise_layer_draws_randomness(path: Path) -> None:
    rel = path.relative_to(SRC)
    if rel.parts[0] == "noise":
        return
    match = RANDOMNESS.search(path.read_text())
    assert match is None, f"{rel} draws randomness outside dpkit.noise: {match.group(0)!r}"


def test_core_rooms_import_without_scipy() -> None:
    """scipy costs ~1 s at import: accounting, mechanisms and local load it on first use only."""
    code = (
        "import sys, dpkit.noise, dpkit.accounting, dpkit.mechanisms, dpkit.local\n"
        "print(sorted(m for m in sys.modules if m == 'scipy' or m.startswith('scipy.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(SRC.parent)})
    assert out.stdout.strip() == "[]", f"scipy imported eagerly: {out.stdout[:300]}"


# --------------------------------------------------------------------------- file-level imports
def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in _python_files()}


def _resolved_imports(module: str) -> list[tuple[str, str | None, int]]:
    """Every dpkit import of ``module`` (top level, in functions, under TYPE_CHECKING) as
    ``(target module, imported name or None, line)``; relative imports resolved."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[tuple[str, str | None, int]] = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            out.extend((a.name, None, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((sub, None, node.lineno) if sub in MODULES else
                           (base, a.name, node.lineno))
    return [(t, n, line) for t, n, line in out if t == "dpkit" or t.startswith("dpkit.")]


def _file_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        targets = set()
        for target, _, _ in _resolved_imports(module):
            while target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target in MODULES and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
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
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_find_cycles_finds_a_cycle_and_no_false_one() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_import_cycles_between_files() -> None:
    """DESIGN.md: no cycles between files, counting imports inside functions and under
    TYPE_CHECKING (which hide a cycle from the interpreter, not from the reader)."""
    cycles = find_cycles(_file_graph())
    assert not cycles, f"import cycles between files: {cycles}; move the shared part down"


def test_no_private_name_imported_from_another_module() -> None:
    """What another module needs gets a public name (DESIGN.md); a ``_private`` *module* may
    still be imported inside its own package (import-linter's private_modules contract)."""
    found = []
    for module in MODULES:
        for target, name, line in _resolved_imports(module):
            if name is not None and name.startswith("_") and not name.startswith("__"):
                found.append(f"{module}:{line} imports {name} from {target}")
    assert not found, "private names imported across modules: " + "; ".join(found)


def test_only_charge_py_charges_the_ledger() -> None:
    """DESIGN's one charge point: outside the ledger itself, only ``engine/charge.py`` calls
    ``Ledger.charge`` (a second caller could read rows before charging, or refund)."""
    offenders = []
    for path in _python_files():
        rel = path.relative_to(SRC)
        if rel.parts[:2] in (("engine", "charge.py"), ("engine", "ledger.py")):
            continue
        for node in ast.walk(_tree(path)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "charge"):
                owner = ast.unparse(node.func.value)
                if "ledger" in owner.lower():
                    offenders.append(f"{rel}:{node.lineno} {ast.unparse(node.func)}")
    assert not offenders, f"only engine/charge.py may charge the ledger: {offenders}"
