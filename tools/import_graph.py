"""Draw dpkit's import graph from the real imports, one row per floor (docs/architecture.md).

    python tools/import_graph.py            # docs/img/architecture_{packages,engine}.png
    python tools/import_graph.py --text     # the same graphs as text, for the docs

The floors come from the layers contracts of pyproject.toml (the ones import-linter checks), the
edges from grimp (import-linter's graph: imports at top level, in functions and under
TYPE_CHECKING). An arrow ``a -> b`` means "a imports b": every arrow points down or sideways
within a floor's ``:`` group, never up. Pictures need graphviz's ``dot`` (apt-get install
graphviz); the text form needs nothing beyond the test extra.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def _floors(contract_id: str) -> tuple[str, list[list[str]]]:
    """(container, floors from the top down) of a layers contract, optional layers dropped."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract.get("id") == contract_id:
            floors = [[name.strip() for name in layer.replace(":", "|").split("|")]
                      for layer in contract["layers"]]
            kept = [[n for n in floor if not n.startswith("(")] for floor in floors]
            return contract["containers"][0], [f for f in kept if f]
    raise SystemExit(f"no contract with id {contract_id!r} in pyproject.toml")


def _edges(graph: grimp.ImportGraph, container: str, names: list[str]) -> list[tuple[str, str]]:
    edges = []
    for a in names:
        for b in names:
            if a != b and graph.direct_import_exists(importer=f"{container}.{a}",
                                                     imported=f"{container}.{b}",
                                                     as_packages=True):
                edges.append((a, b))
    return edges


def _dot(title: str, floors: list[list[str]], edges: list[tuple[str, str]]) -> str:
    lines = [f'digraph "{title}" {{', "  rankdir=TB; nodesep=0.3; ranksep=0.45;",
             '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb",'
             ' fontname="Helvetica"];',
             '  edge [color="#7a869a", arrowsize=0.6];',
             f'  labelloc=t; label="{title}"; fontname="Helvetica";']
    for i, floor in enumerate(floors):
        names = " ".join(f'"{n}"' for n in floor)
        lines.append(f"  {{ rank=same; {names} }}  // floor {len(floors) - i}")
    lines += [f'  "{a}" -> "{b}";' for a, b in edges]
    lines.append("}")
    return "\n".join(lines)


def _text(title: str, floors: list[list[str]], edges: list[tuple[str, str]]) -> str:
    out = [title]
    for floor in floors:
        for name in floor:
            targets = sorted(b for a, b in edges if a == name)
            out.append(f"  {' | '.join(floor) if name == floor[0] else '':<28} {name:<16}"
                       f" -> {', '.join(targets) or '(nothing in dpkit)'}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", action="store_true", help="print text instead of drawing")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    graph = grimp.build_graph("dpkit", cache_dir=None)
    for contract_id, title, name in (("floors", "dpkit floors (F7 top, F1 bottom)", "packages"),
                                     ("engine-floors", "inside dpkit.engine", "engine")):
        container, floors = _floors(contract_id)
        edges = _edges(graph, container, [n for floor in floors for n in floor])
        if args.text or shutil.which("dot") is None:
            print(_text(title, floors, edges), end="\n\n")
            continue
        target = ROOT / "docs" / "img" / f"architecture_{name}.png"
        subprocess.run(["dot", "-Tpng", "-Gdpi=110", "-o", str(target)],
                       input=_dot(title, floors, edges), text=True, check=True)
        print(f"wrote {target.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
