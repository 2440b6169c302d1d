"""The house plan holds: dependencies point one way, no two modules import each other, library code never imports
``reward.testing``, and every package says what it is for."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("reward", "training", "pace_judge", "fusion", "rl")
# who may import whom (besides itself); reward reaches the others only through the registry's lazy strings
ALLOWED = {
    "reward": set(),
    "training": {"reward"},
    "pace_judge": {"reward"},
    "fusion": {"reward"},
    "rl": {"reward", "training"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(path: Path, name: str) -> set[str]:
    """Every module ``name`` imports, at any depth (lazy imports too), resolved to modules of this project."""
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(path, name) for name, path in MODULES.items()}


def _is_test_helper(name: str) -> bool:
    return name.split(".")[-1] == "testing" or ".testing." in f"{name}."


def test_packages_import_only_downward():
    wrong = []
    for name, targets in GRAPH.items():
        top = name.split(".")[0]
        for t in targets:
            other = t.split(".")[0]
            if other != top and other not in ALLOWED[top] and not _is_test_helper(name):
                wrong.append(f"{name} imports {t}")
    assert not wrong, (
        "imports against the dependency rule (DESIGN: reward <- training, pace_judge, fusion <- rl):\n"
        + "\n".join(wrong)
    )


def test_library_code_never_imports_the_testing_builders():
    wrong = [
        f"{n} imports {t}"
        for n, ts in GRAPH.items()
        for t in ts
        if t.startswith("reward.testing") and not _is_test_helper(n)
    ]
    assert not wrong, "\n".join(wrong)


def test_no_two_modules_import_each_other():
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("name", sorted(n for n, p in MODULES.items() if p.name == "__init__.py"))
def test_every_package_says_what_it_is_for(name):
    doc = ast.get_docstring(ast.parse(MODULES[name].read_text()))
    assert doc and len(doc.split()) >= 4, f"{name}/__init__.py needs a one-line purpose"


def test_the_import_graph_sees_lazy_imports_inside_functions():
    assert "pace_judge.anchored" in GRAPH["pace_judge.backends"]  # imported inside LocalBackend.anchored_logprobs
    assert "reward.vlm.server" in GRAPH["pace_judge.backends"]  # imported inside make_backend
