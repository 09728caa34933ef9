"""DESIGN.md's layering: lower rooms never import higher ones; only dpkit.noise draws randomness."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "dpkit"

# noise <- events <- accounting <- mechanisms
#   <- (engine, release, local, learn, attacks, markets) <- (cli, server)
RANK = {
    "noise": 0,
    "events": 1,
    "accounting": 2,
    "mechanisms": 3,
    "engine": 4,
    "release": 4,
    "local": 4,
    "learn": 4,
    "attacks": 4,
    "markets": 4,
    "cli": 5,
    "server": 5,
}
# Rooms on the same level may use one another only where DESIGN.md says so: the curator plugs in
# correlated-noise release, and the attacks audit the curator.
ALLOWED_SIDEWAYS = {("engine", "release"), ("attacks", "engine"), ("attacks", "release")}


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "dpkit" or len(parts) < 2:
        return None
    return parts[1]


def _python_files() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
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
