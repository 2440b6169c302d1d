"""The house plan holds: dependencies point one way, no two modules import each other, library code never imports
the tiny-model builders (``reward.testing``), the demo or ``bench/``, and every package says what it is for."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("reward", "training", "pace_judge", "fusion", "rl")
# who may import whom (besides itself): a package, or a part of one named apart (its own rule, stricter than its
# package's); reward reaches the others only through the entry points of its reward registry. rl uses training's
# shared plumbing and procedural data only, and those import nothing else of training.
ALLOWED = {
    "reward": set(),
    "training": {"reward"},
    "training.shared": {"reward"},
    "training.procedural": {"reward"},
    "pace_judge": {"reward"},
    "fusion": {"reward"},
    "rl": {"reward", "training.shared", "training.procedural"},
}


def _within(name: str, part: str) -> bool:
    return name == part or name.startswith(part + ".")


def _part(name: str) -> str:
    """The most specific entry of ALLOWED that ``name`` belongs to."""
    return max((p for p in ALLOWED if _within(name, p)), key=len)


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


# what tests, the demo and bench/ use and no command does: the one helper package the wheel carries (the tiny-model
# builders the README calls), and the scripts outside the packages (demo.py; bench/*.py, which import each other by
# their bare names)
HELPERS = "reward.testing"
SCRIPTS = {"demo", "bench", *(p.stem for p in (ROOT / "bench").glob("*.py"))}


def _absolute_imports(path: Path) -> set[str]:
    """The first name of every absolute import in ``path`` (lazy imports too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_packages_import_only_downward():
    wrong = []
    for name, targets in GRAPH.items():
        part = _part(name)
        for t in targets:
            if not _within(t, part) and not any(_within(t, a) for a in ALLOWED[part]):
                wrong.append(f"{name} imports {t}")
    assert not wrong, (
        "imports against the dependency rule (reward <- training, pace_judge, fusion <- rl; rl uses only "
        "training.shared and training.procedural):\n" + "\n".join(wrong)
    )


# reward's own layers, lowest first: a module imports from its own layer or below, never above. The entry scripts
# (reward/evaluate.py ...), the console, the package itself and reward.testing sit above every layer.
REWARD_LAYERS = ("core", "data", "vlm", "rewards", "eval", "qbench", "integrations", "commands")


def _layer(name: str) -> int | None:
    parts = name.split(".")
    return REWARD_LAYERS.index(parts[1]) if len(parts) > 2 and parts[1] in REWARD_LAYERS else None


def _upward_in_reward() -> set[str]:
    return {
        f"{name} -> {t}"
        for name, targets in GRAPH.items()
        for t in targets
        if (low := _layer(name)) is not None and (high := _layer(t)) is not None and high > low
    }


def test_reward_s_layers_import_only_downward():
    found = _upward_in_reward()
    assert not found, (
        "imports running up reward's layers (" + " < ".join(REWARD_LAYERS) + "):\n" + "\n".join(sorted(found))
    )


def test_the_layer_rule_sees_a_lazy_import_running_up(tmp_path):
    assert _layer("reward.core.outputs") == 0 and _layer("reward.commands.evaluate") == len(REWARD_LAYERS) - 1
    assert _layer("reward.evaluate") is None and _layer("reward.testing.models") is None  # above every layer
    module = tmp_path / "scoring.py"  # a module of rewards/ that imports integrations/ inside a function only
    module.write_text("def f():\n    from reward.integrations.trl_rewards import trl_reward_func\n")
    assert _imports(module, "reward.rewards.scoring") == {"reward.integrations.trl_rewards"}
    assert _layer("reward.integrations.trl_rewards") > _layer("reward.rewards.scoring")


def test_the_rule_sees_parts_of_a_package():
    assert _part("rl.commands.grpo") == "rl" and _part("training.shared.plan") == "training.shared"
    assert _part("training.commands.sft") == "training"
    assert "training.shared.plan" in GRAPH["rl.commands.grpo_plan"]  # what the rule for rl allows, and checks


def test_reward_names_no_package_above_it_even_as_an_import_path():
    """The ground floor reaches the packages above it only through the entry points they declare (pyproject.toml):
    no "pace_judge.pace:build" string in reward's registry or anywhere else in reward."""
    above = "|".join(p for p in PACKAGES if p != "reward")
    path_like = re.compile(rf"^({above})(\.\w+)+(:[\w.]+)?$|^({above}):[\w.]+$")
    found = [
        f"{name}:{node.lineno}: {node.value!r}"
        for name, path in MODULES.items()
        if name.split(".")[0] == "reward"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and path_like.match(node.value)
    ]
    assert not found, "\n".join(found)
    assert path_like.match("pace_judge.pace:build") and path_like.match("rl.scene_proxy") and not path_like.match("rl")


def test_library_code_never_imports_the_builders_the_demo_or_bench():
    wrong = [
        f"{n} imports {t}" for n, ts in GRAPH.items() for t in ts if _within(t, HELPERS) and not _within(n, HELPERS)
    ]
    wrong += [f"{n} imports {t}" for n, p in MODULES.items() for t in sorted(_absolute_imports(p) & SCRIPTS)]
    assert not wrong, "\n".join(wrong)
    assert {"demo", "common", "gpu_check"} <= SCRIPTS  # the names the scripts are imported by


def test_the_packages_hold_no_demo_and_no_test_double_but_the_builders():
    """Demo code lives in demo.py and test doubles with the tests: the wheel carries neither."""
    extra = [n for n in MODULES if {"testing", "demo"} & set(n.split(".")) and not _within(n, HELPERS)]
    assert not extra, extra


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
    assert "pace_judge.anchored" in GRAPH["pace_judge.tracks"]  # imported inside DualTrackScorer.track2
    assert "pace_judge.agents" in GRAPH["pace_judge.route"]  # imported inside resolve
