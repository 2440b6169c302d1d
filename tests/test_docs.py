"""The README and its docs/ pages stand alone in a user's clone and stay true: no pointer outside the repository,
every command they show exists, every entry script and every registered reward and generator is named, every page is
reachable from the README, and the settings tables of the pages are those the settings dataclasses make now."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reward import list_rewards
from rl.generators import GENERATORS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PAGES = sorted((ROOT / "docs").glob("*.md"))
DOCS = "\n".join([README, (ROOT / "ARCHITECTURE.md").read_text(), *(page.read_text() for page in PAGES)])


# pointers a user's clone cannot follow: notes kept outside the repository, and issue numbers of its tracker
OUTSIDE = re.compile("|".join([r"\.\./shared", r"\b(DESIGN|ENVIRONMENT|STYLE)\.md\b", r"\b[Ii]ssue \d+"]))
GUARDED = (".py", ".sh", ".yaml", ".yml", ".toml", ".md", ".cfg", ".txt", "Makefile")


def test_the_docs_point_at_nothing_outside_the_repository():
    assert not OUTSIDE.search(DOCS), OUTSIDE.search(DOCS)


def test_code_comments_and_tests_point_at_nothing_outside_the_repository():
    """As the README: every source, test, config and script names only files that a clone of the repository has."""
    import subprocess

    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    found = [
        f"{name}:{n}: {line.strip()}"
        for name in files
        if name.endswith(GUARDED) and (ROOT / name).is_file()
        for n, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "path",
    sorted(set(re.findall(r"(?:python|launch) ((?:reward|training|rl|fusion|pace_judge|bench|docs)/\w+\.py)", DOCS))),
)
def test_every_script_the_docs_run_exists(path):
    assert (ROOT / path).is_file(), path


def test_every_script_is_named_in_the_readme_or_the_docs():
    """A user finds every command: each file with a ``__main__`` block is named (a package's ``__main__.py`` as
    ``python -m PACKAGE``)."""
    import subprocess

    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    scripts = [
        name
        for name in files.split()
        if not name.startswith("tests/") and 'if __name__ == "__main__":' in (ROOT / name).read_text()
    ]
    assert "training/sft.py" in scripts and "docs/settings.py" in scripts
    named = [f"-m {Path(n).parent.as_posix().replace('/', '.')}" if n.endswith("/__main__.py") else n for n in scripts]
    missing = [name for name in named if name not in DOCS]
    assert not missing, f"scripts that neither the README nor docs/ name: {missing}"


def test_every_page_is_linked_from_the_readme_and_every_link_resolves():
    links = re.findall(r"\]\((docs/[\w.-]+\.md)\)", README)
    assert sorted(set(links)) == sorted(p.relative_to(ROOT).as_posix() for p in PAGES)
    for page in PAGES:
        for target in re.findall(r"\]\(([\w./-]+\.md)\)", page.read_text()):
            assert (page.parent / target).is_file(), f"{page.name} links to {target}, which does not exist"


def test_the_settings_tables_of_the_pages_are_up_to_date():
    """Each command's table, generated from its settings dataclass by ``python docs/settings.py``, is on one page and
    is what the script makes now (a stale one: run it)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("docs_settings", ROOT / "docs" / "settings.py")
    settings = sys.modules["docs_settings"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(settings)
    blocks = [m.group(2) for page in PAGES for m in settings.BLOCK.finditer(page.read_text())]
    assert sorted(blocks) == sorted(settings.commands()), "each command's table once, on its page"
    stale = [p.name for p in PAGES if settings.refreshed(p.read_text()) != p.read_text()]
    assert not stale, f"stale settings tables in {stale}: run python docs/settings.py"


@pytest.mark.parametrize("name", [*list_rewards(), *GENERATORS.names()])
def test_every_registered_name_is_documented(name):
    assert f"{name}" in README, f"{name} is registered but the README never names it"


def test_every_config_starts_with_the_command_that_runs_it():
    for path in sorted((ROOT / "configs").rglob("*.yaml")):
        first = path.read_text().splitlines()[0]
        if first.startswith("# @package"):
            first = path.read_text().splitlines()[1]  # a recipe: after the @package line
        assert re.match(r"# (python|accelerate launch|bash|trl sft) ", first), f"{path}: {first}"


def _call_at(code: str, start: int) -> str:
    """The call that opens at ``code[start:]``, to its closing parenthesis."""
    depth = 0
    for end in range(start, len(code)):
        depth += {"(": 1, ")": -1}.get(code[end], 0)
        if code[end] == ")" and depth == 0:
            return code[start : end + 1]
    return code[start:]


def _grpo_configs() -> list[tuple[str, str]]:
    """Every ``GRPOConfig(...)`` call of the python blocks of the README and of docs/, with where it is."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text()
        for block in re.finditer(r"```python\n(.*?)```", text, re.S):
            for call in re.finditer(r"GRPOConfig\(", block.group(1)):
                line = text[: block.start(1) + call.start()].count("\n") + 1
                found.append((f"{path.relative_to(ROOT)}:{line}", _call_at(block.group(1), call.start())))
    return found


@pytest.mark.parametrize("where,call", _grpo_configs())
def test_every_trl_snippet_builds_its_grpo_config_on_this_machine(where, call, tmp_path, monkeypatch):
    """A snippet copied onto a machine without a bf16 GPU (this CPU one) must not stop at trl's own bf16 check."""
    import torch
    from trl import GRPOConfig

    monkeypatch.chdir(tmp_path)  # where its output_dir goes
    try:
        eval(call, {"GRPOConfig": GRPOConfig, "torch": torch})  # noqa: S307 - the docs' own code
    except Exception as err:  # noqa: BLE001 - the message says which snippet and how to fix it
        pytest.fail(
            f"{where}: {call} fails on this machine ({err}); let the snippet pick the precision: "
            "bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported()"
        )
