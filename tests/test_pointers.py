"""Nothing points nowhere: every repository path, module and README / ARCHITECTURE / docs page section that a comment,
docstring, error message, config comment or document names exists.

What counts as a pointer (read from the comments and prose strings of tracked ``.py`` files, and from every line of
the tracked ``.md``, ``.yaml``, ``.sh`` and ``.toml`` files; this file's own examples aside):

- a path whose first segment is a top-level entry of the repository (``training/procedural/scenes.py``,
  ``configs/recipe/qalign-koniq.yaml``, ``reward/assets/samples/``) and that ends in a tracked file's extension or in
  ``/``: it must exist, and a ``:LINE`` (``reward/vlm/server.py:334``, ``:155-189``, ``:334,500``) must lie within
  the file. Placeholders are not paths: a segment written in capitals (``configs/recipe/NAME.yaml``, ``DIR/...``), a
  segment of one or two letters (``configs/x.yaml``), or braces, angle brackets, ``*`` or ``$`` in it;
- a bare file name (``gpu_check.py``, ``zero2.yaml``, ``rl_gpu_check.sh``): some tracked file has that name;
- a dotted module path whose first two segments are a package and one of its modules or subpackages
  (``training.commands.sft_plan``, ``reward.vlm.server.ServerConfig``): every further segment is a module, or a name
  its module's source mentions;
- a section cited by its title: ``README, "Data formats"``, ``README "served rewards"``, ``see the README's section
  'PACE judge'``, ``ARCHITECTURE.md, "One primitive underneath"``, ``docs/serving.md, "Failures"``, ``README:
  serving a reward``: the document has a heading (``## ...``) or a paragraph's bold run-in title (``**Rewards served
  apart from training.**``) of that title (case, backticks and a final period aside).
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = (".md", ".yaml", ".yml", ".sh", ".toml")
IMAGES = {"png", "jpg", "jpeg"}  # a path to an image is an output's (``fusion/fusion_weights.png`` in a report)
DOCUMENTS = {"README": "README.md", "ARCHITECTURE": "ARCHITECTURE.md"}


@cache
def tracked() -> tuple[str, ...]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return tuple(name for name in out.split("\n") if name and (ROOT / name).is_file())


@cache
def patterns() -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    """The path, bare-name and dotted-module patterns, built from what the repository tracks."""
    files = tracked()
    folders = "|".join(sorted({re.escape(name.split("/")[0]) for name in files if "/" in name}))
    top_files = "|".join(re.escape(name) for name in files if "/" not in name)
    suffixes = {Path(name).suffix[1:] for name in files if Path(name).suffix} - IMAGES
    suffixes = "|".join(sorted(suffixes, key=len, reverse=True))
    packages = sorted({name.split("/")[0] for name in files if name.count("/") == 1 and name.endswith("/__init__.py")})
    path = re.compile(
        rf"(?<![\w./\\$~{{<*-])((?:{folders})/(?:[\w.*{{}}<>$-]+/)*(?:[\w.*{{}}<>$-]+\.(?:{suffixes}))?|{top_files})"
        rf"(?![\w/])(?::(\d+(?:[-,]\d+)*))?"
    )
    bare = re.compile(r"(?<![\w./\\$~{<*-])(\w+\.(?:py|sh|yaml))(?![\w/])")
    dotted = re.compile(rf"(?<![\w./\\$-])((?:{'|'.join(packages)})(?:\.\w+)+)")
    return path, bare, dotted


def text_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of what a file says to a reader: every line of a document or config; of a Python file,
    its comments and its strings with a space in them (implicitly joined pieces as one string, an f-string's fields
    as ``{}``). Its code, and a string without a space such as ``"accelerate.yaml"``, are values the code uses:
    checked by running it."""
    source = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix != ".py":
        return list(enumerate(source.splitlines(), 1))
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    out = [(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT]
    tree = ast.parse(source)
    pieces = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in pieces:
            text = node.value
        else:
            continue
        if re.search(r"\s", text.strip()):
            lines = text.split("\n")
            exact = node.end_lineno - node.lineno == len(lines) - 1  # one piece: its lines are the source's
            out += [(node.lineno + (i if exact else 0), line) for i, line in enumerate(lines)]
    return out


def placeholder(token: str) -> bool:
    segments = [s for s in token.split("/") if s]
    return bool(re.search(r"[{}<>*$]", token)) or any(
        re.fullmatch(r"[A-Z][A-Z0-9_]*", s.split(".")[0]) or len(s.split(".")[0]) <= 2 for s in segments
    )


def path_problem(token: str, lines: str | None) -> str | None:
    target = ROOT / token
    if not target.exists():
        return f"{token} does not exist"
    if lines and target.is_file():
        last = max(int(n) for n in re.findall(r"\d+", lines))
        length = len(target.read_text(encoding="utf-8", errors="replace").splitlines())
        if last > length:
            return f"{token}:{lines}: the file has {length} lines"
    return None


def module_problem(token: str) -> str | None:
    """None when ``token`` resolves (or is no module path); what is missing otherwise."""
    parts, folder = token.split("."), ROOT
    for i, part in enumerate(parts):
        if (folder / part / "__init__.py").is_file():
            folder = folder / part
        elif (folder / f"{part}.py").is_file():
            rest = parts[i + 1 :]
            text = (folder / f"{part}.py").read_text(encoding="utf-8")
            if rest and not re.search(rf"\b{re.escape(rest[0])}\b", text):
                return f"{token}: {folder.relative_to(ROOT)}/{part}.py never mentions {rest[0]}"
            return None
        elif i < 2:
            return None  # not a module path: an attribute or a config key (reward.model, rl.log)
        elif not re.search(rf"\b{re.escape(part)}\b", (folder / "__init__.py").read_text(encoding="utf-8")):
            return f"{token}: no module {folder.relative_to(ROOT)}/{part}.py and its __init__ never mentions {part}"
        else:
            return None
    return None


@cache
def titles(document: str) -> frozenset[str]:
    """The headings of a markdown document (outside code blocks) and its paragraphs' bold run-in titles."""
    found, fenced = set(), False
    for line in (ROOT / document).read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#+ (.+)|\*\*(.+?)\*\*", line)):
            found.add(normal(m.group(1) or m.group(2)))
    return frozenset(found)


def normal(title: str) -> str:
    return " ".join(title.replace("`", "").strip().rstrip(".:").lower().split())


SECTION = re.compile(
    r"\b(README|ARCHITECTURE|docs/[\w-]+)(?:\.md)?(?:'s section|,? section|(?!'s\b))\s*(?:[,:(]\s*)*"
    r"(?:[\"'“‘]([^\"'”’]+)[\"'”’]|(?<=: )([^)\"']+)\))"
)


def problems_in(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """(line number, what is missing) for every pointer of ``lines`` that resolves to nothing."""
    path, bare, dotted = patterns()
    basenames = {Path(f).name for f in tracked()}
    problems = []
    for n, line in lines:
        found = []
        for m in path.finditer(line):
            if not placeholder(m.group(1)):
                found.append(path_problem(m.group(1), m.group(2)))
        for m in bare.finditer(line):
            if m.group(1) not in basenames and not placeholder(m.group(1)):
                found.append(f"no tracked file is named {m.group(1)}")
        found += [module_problem(m.group(1).rstrip(".")) for m in dotted.finditer(line)]
        for m in SECTION.finditer(line):
            cited, document = m.group(2) or m.group(3), DOCUMENTS.get(m.group(1), f"{m.group(1)}.md")
            if normal(cited) not in titles(document):
                found.append(f"{document} has no section titled {cited.strip()!r}")
        problems += [(n, problem) for problem in found if problem]
    return problems


def test_every_path_module_and_section_named_in_the_repository_exists():
    itself = str(Path(__file__).resolve().relative_to(ROOT))  # its examples of dangling pointers below
    names = [n for n in tracked() if n.endswith((".py", *TEXT_SUFFIXES)) and n != itself]
    problems = [f"{name}:{n}: {problem}" for name in names for n, problem in problems_in(text_lines(ROOT / name))]
    assert not problems, "pointers to nothing (fix the pointer, or write a placeholder in CAPITALS):\n" + "\n".join(
        problems
    )


def test_the_check_finds_each_kind_of_dangling_pointer(tmp_path):
    """The check itself: each kind of pointer fails when it points nowhere and passes when it resolves; placeholders,
    config keys and a Python file's code are left alone."""
    cases = {
        "``training/scenes.py``": "training/scenes.py does not exist",
        "``training/procedural/scenes.py``": None,
        "see reward/vlm/server.py:99999.": "the file has",
        "``reward/vlm/server.py:12``, configs/recipe/": None,
        "``tests/test_rl_stage1.py``": "tests/test_rl_stage1.py does not exist",
        "``configs/recipe/NAME.yaml``, ``DIR/scorer/``, configs/{name}.yaml, configs/x.yaml, out/run.json": None,
        "``gpu_check.py`` and ``zero2.yaml``": None,
        "``gpu_chek.py``": "no tracked file is named gpu_chek.py",
        "``training.procedural.scenes.no_such_name``": "never mentions no_such_name",
        "``reward.vlm.server.ServerConfig``; reward.model=PATH, rl.log": None,
        "(README: served rewards)": "README.md has no section titled 'served rewards'",
        'the README\'s section "Served rewards"': "README.md has no section titled 'Served rewards'",
        "(README: the main flow, on the shipped samples)": None,
        '(docs/datasets.md, "Data formats")': None,
        "(see docs/serving.md, 'Failures')": None,
        'docs/serving.md, "Served rewards"': "docs/serving.md has no section titled 'Served rewards'",
        'ARCHITECTURE.md, "One primitive underneath"': None,
        'ARCHITECTURE.md, "Data formats"': "ARCHITECTURE.md has no section titled 'Data formats'",
    }
    for text, expected in cases.items():
        problems = problems_in([(1, text)])
        if expected is None:
            assert not problems, (text, problems)
        else:
            assert len(problems) == 1 and expected in problems[0][1], (text, problems)
    code = tmp_path / "code.py"
    code.write_text('reward.vlm.stats = {}  # see training/scenes.py\nx = "see tests/test_rl_stage1.py"\n')
    assert [n for n, _ in problems_in(text_lines(code))] == [1, 2]
