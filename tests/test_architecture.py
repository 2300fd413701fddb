"""The package's shape (docs/architecture.md): imports flow one way, from the utilities and
the hardware up to the command line, and only the seams sit at the package root.

Imports are read from the source with `ast.walk` over the whole module, so those inside
functions and `if TYPE_CHECKING:` blocks count too (a lazy import is still a dependency), and
a module reaching upward fails here, not in a user's traceback.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "sim3d"

# Bottom to top. A module may import its own layer and those below it, never above.
LAYERS = [
    {"util"},                # safe output files, process lifetime, GC control: nothing of sim3d's
    {"errors"},
    {"cluster"},
    {"schedule", "trace"},   # the IR (pure: no scenario), and the trace contract on its kinds
    {"scenario"},            # checks each layout against its schedule's own rules
    {"model"},
    {"step"},                # a scenario's lowered schedule (buckets from the model)
    {"costs"},
    {"engine", "executor"},
    {"analysis"},
    {"api"},
    {"report", "studies", "validation"},
    {"cli", "__main__"},
]
RANK = {unit: level for level, units in enumerate(LAYERS) for unit in units}
SEAMS = {"api", "step", "trace", "errors"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every sim3d module or package `path` imports, as absolute dotted names."""
    here = _module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found.add(target)
            if not node.module:  # `from . import x`: x may be a module
                found.update(f"{target}.{alias.name}" for alias in node.names
                             if _is_module(f"{target}.{alias.name}"))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if (name == "sim3d" or name.startswith("sim3d.")) and name != ".".join(here)}


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _unit(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # `sim3d` itself: its __version__


def _graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for path in PACKAGE.rglob("*.py"):
        graph.add_node(_module_name(path))
        for target in _imports(path):
            graph.add_edge(_module_name(path), target)
    return graph


def test_every_folder_has_a_layer():
    units = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())) and p.stem != "__init__"}
    assert units == set(RANK), f"layers to place: {units - set(RANK)}; layers with nothing: {set(RANK) - units}"


def test_imports_flow_one_way():
    upward = []
    for source, target in _graph().edges:
        low, high = _unit(source), _unit(target)
        if low is None or high is None or low == high:
            continue
        if RANK[high] > RANK[low]:
            upward.append(f"{source} imports {target} ({low} is below {high})")
    assert not upward, "\n".join(sorted(upward))


def test_no_import_circles_between_modules():
    graph = _graph()
    # a package's __init__ re-exporting its own modules is not a circle of dependencies
    for source, target in list(graph.edges):
        if source.startswith(target + ".") or target.startswith(source + "."):
            graph.remove_edge(source, target)
    circles = [c for c in nx.simple_cycles(graph, length_bound=6)]
    assert not circles, "import circles: " + "; ".join(" -> ".join(c + c[:1]) for c in circles[:5])


def test_util_imports_nothing_of_sim3d_but_itself():
    """The utilities sit below every layer, errors included: any module may use them."""
    reaching = sorted(f"{source} imports {target}" for source, target in _graph().edges
                      if _unit(source) == "util" and _unit(target) != "util")
    assert not reaching, "\n".join(reaching)


def test_report_and_studies_do_not_import_each_other():
    """Same layer, separate jobs: studies compute, report draws and writes; the CLI joins them."""
    crossing = sorted(f"{source} imports {target}" for source, target in _graph().edges
                      if {_unit(source), _unit(target)} == {"report", "studies"})
    assert not crossing, "\n".join(crossing)


def test_package_root_holds_only_the_seams():
    loose = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert loose <= SEAMS and len(loose) <= 5, f"modules at the package root beyond the seams: {loose - SEAMS}"


def _edges_of(tmp_path, source: str) -> list[tuple[str, str]]:
    """The import graph of a fake package holding one module, sim3d/cluster/bad.py."""
    fake = tmp_path / "sim3d" / "cluster"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text(source)
    global PACKAGE
    real, PACKAGE = PACKAGE, tmp_path / "sim3d"
    try:
        return list(_graph().edges)
    finally:
        PACKAGE = real


def test_contracts_are_cited_from_the_repository():
    """The contracts live in docs/contracts.md: code and tests cite it, not a design card
    outside the repository that users do not have."""
    card = "DESIGN" + ".md"  # built, so this file does not cite it itself
    citing = sorted(f"{path.relative_to(PACKAGE.parent)}:{number}"
                    for folder in (PACKAGE, Path(__file__).parent) for path in folder.rglob("*")
                    if path.is_file() and "__pycache__" not in path.parts
                    for number, line in enumerate(path.read_bytes().splitlines(), 1) if card.encode() in line)
    assert not citing, "cite docs/contracts.md (its section) instead: " + ", ".join(citing)


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """The checker itself bites: a cluster module importing the engine is reported."""
    assert _edges_of(tmp_path, "from ..engine.replay import Engine\n") == [("sim3d.cluster.bad", "sim3d.engine.replay")]
    assert RANK[_unit("sim3d.engine.replay")] > RANK[_unit("sim3d.cluster.bad")]


def test_the_layer_check_sees_lazy_imports(tmp_path):
    """An import inside a function, a method or a TYPE_CHECKING block is a dependency too."""
    source = ("from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    from ..analysis.summary import summarize\n"
              "def draw():\n    from ..report import gantt\n"
              "class Late:\n    def run(self):\n        import sim3d.engine.replay\n")
    assert sorted(target for _, target in _edges_of(tmp_path, source)) == [
        "sim3d.analysis.summary", "sim3d.engine.replay", "sim3d.report"]
