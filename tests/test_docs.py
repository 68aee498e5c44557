"""The documentation stays true to the repository.

* Every TF1 rule id cited anywhere (code, tests, README, examples, docs) has
  an entry in docs/tf1-compat.md, so a new citation needs a documented rule.
* No markdown link, docstring or comment in README.md, docs/, feedq/ or
  examples/ points outside the repository: links are public http(s) URLs or
  relative paths (and anchors) that exist in the repository.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMPAT = ROOT / "docs" / "tf1-compat.md"

#: Rule-id families of docs/tf1-compat.md (longer prefixes first, so "QR5" is
#: not read as "Q"... and "IP3" not as "P3").
PREFIXES = ("QR", "IP", "Q", "T", "C", "L", "R", "D", "P", "B", "A", "X")
_PFX = "|".join(PREFIXES)
#: One rule id: a family prefix and one or two digits, standing alone
#: ("P100" or "PS1" are not rule ids).
RULE_RE = re.compile(rf"\b({_PFX})(\d{{1,2}})\b")
#: A range such as "Q1–Q43" or "D1-D8": it cites every rule in between.
RANGE_RE = re.compile(rf"\b({_PFX})(\d{{1,2}})\s*[–-]\s*(?:\1)?(\d{{1,2}})\b")
#: An entry heading in docs/tf1-compat.md: "#### Q14 — arrival order ...".
ENTRY_RE = re.compile(r"^#### ([A-Z]+\d+) — \S", re.M)

#: Where citations are looked for.
CITING = [ROOT / "README.md", ROOT / "feedq", ROOT / "tests", ROOT / "examples", ROOT / "docs",
          ROOT / "benchmarks"]
#: Where references must stay inside the repository.
PUBLISHED = [ROOT / "README.md", ROOT / "docs", ROOT / "feedq", ROOT / "examples"]


def _files(roots: list[Path], suffixes: tuple[str, ...] = (".py", ".md")) -> Iterator[Path]:
    for root in roots:
        if root.is_file():
            yield root
        elif root.is_dir():
            for path in sorted(root.rglob("*")):
                if path.suffix in suffixes and path.is_file() and "__pycache__" not in path.parts:
                    yield path


def cited_rules(text: str) -> set[str]:
    """The rule ids a text cites, ranges expanded."""
    found = {prefix + str(int(num)) for prefix, num in RULE_RE.findall(text)}
    for prefix, lo, hi in RANGE_RE.findall(text):
        found.update(f"{prefix}{i}" for i in range(int(lo), int(hi) + 1))
    return found


def documented_rules() -> list[str]:
    return ENTRY_RE.findall(COMPAT.read_text(encoding="utf-8"))


def test_rule_citations_are_recognised() -> None:
    text = "Q14 and QR11; C1–C3, D1-D2 (IP6). Not rules: PS1, P100, W0, GPU A100, sha A1B2, Q2x."
    assert cited_rules(text) == {"Q14", "QR11", "C1", "C2", "C3", "D1", "D2", "IP6"}


def test_compat_entries_are_unique_and_complete() -> None:
    text = COMPAT.read_text(encoding="utf-8")
    ids = documented_rules()
    assert ids, "docs/tf1-compat.md has no entries"
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    assert not dupes, f"rules documented twice: {dupes}"
    unknown = [i for i in ids if not RULE_RE.fullmatch(i)]
    assert not unknown, f"entries with an unknown rule family: {unknown}"
    # Each entry says what TF1 does and what feedq does.
    bodies = re.split(r"^#### ", text, flags=re.M)[1:]
    for body in bodies:
        rule = body.split(" ", 1)[0]
        section = body.split("\n## ", 1)[0]
        assert re.search(r"^- TF1: \S", section, re.M), f"{rule}: no '- TF1:' line"
        assert re.search(r"^- feedq: \S", section, re.M), f"{rule}: no '- feedq:' line"


def test_every_cited_rule_is_documented() -> None:
    documented = set(documented_rules())
    where: dict[str, list[str]] = defaultdict(list)
    for path in _files(CITING):
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for rule in cited_rules(line):
                where[rule].append(f"{path.relative_to(ROOT)}:{lineno}")
    assert where, "found no rule citations at all: is the pattern broken?"
    missing = {rule: places[:3] for rule, places in sorted(where.items()) if rule not in documented}
    assert not missing, f"rules cited but not documented in docs/tf1-compat.md: {missing}"


# -- references stay inside the repository ------------------------------------------------

_FENCE_RE = re.compile(r"^```.*?^```", re.M | re.S)
_CODE_SPAN_RE = re.compile(r"`[^`\n]*`")
_LINK_RE = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF_RE = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_HEADING_RE = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)

#: Paths to the reference material the project was built from, which a clone lacks.
_OUTSIDE_RE = re.compile(
    r"\.\./shared|\bshared/(?:spec|DESIGN|STYLE|seed)|tf1-semantics|\bDESIGN\.md|\bSTYLE\.md"
)
#: A path that climbs out of its directory.
_UP_PATH_RE = re.compile(r"(?<![\w./-])((?:\.\./)+[\w.-][\w./-]*)")
#: A repository path: a top-level folder and a file with a documentation or
#: source suffix, or a bare markdown file name.
_REPO_PATH_RE = re.compile(
    r"(?<![\w./:-])((?:feedq|docs|tests|examples|benchmarks|\.ci)/[\w./-]*[\w-]\.(?:py|md|txt|toml))\b"
    r"|(?<![\w./:-])([\w-]+\.md)\b"
)


def _anchors(md: Path) -> set[str]:
    """GitHub-style anchors of a markdown file's headings."""
    text = _FENCE_RE.sub("", md.read_text(encoding="utf-8"))
    anchors: set[str] = set()
    for heading in _HEADING_RE.findall(text):
        plain = re.sub(r"[`*_]{2,}|`", "", heading).strip().lower()
        slug = re.sub(r"[^\w\- ]", "", plain).replace(" ", "-")
        base, n = slug, 1
        while slug in anchors:
            slug, n = f"{base}-{n}", n + 1
        anchors.add(slug)
    return anchors


def _link_problem(md: Path, target: str) -> str | None:
    """Why a link target in ``md`` is not acceptable, or None."""
    if re.match(r"https?://[\w.-]+\.[a-z]{2,}", target):
        return None  # a public web address
    if re.match(r"[a-zA-Z][\w+.-]*:", target):
        return "only http(s) URLs or paths inside the repository"
    path_part, _, anchor = target.partition("#")
    dest = (md.parent / path_part).resolve() if path_part else md
    try:
        dest.relative_to(ROOT)
    except ValueError:
        return "points outside the repository"
    if not dest.exists():
        return "no such file in the repository"
    if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
        return f"no heading with anchor #{anchor} in {dest.relative_to(ROOT)}"
    return None


def _markdown_files() -> list[Path]:
    return list(_files(PUBLISHED, (".md",)))


@pytest.mark.parametrize("md", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_links_stay_in_the_repository(md: Path) -> None:
    text = _FENCE_RE.sub("", md.read_text(encoding="utf-8"))
    text = _CODE_SPAN_RE.sub("", text)
    targets = _LINK_RE.findall(text) + _REF_DEF_RE.findall(text)
    bad = {t: why for t in targets if (why := _link_problem(md, t)) is not None}
    assert not bad, f"{md.relative_to(ROOT)}: bad links: {bad}"


def test_link_checker_rejects_what_it_should() -> None:
    readme = ROOT / "README.md"
    assert _link_problem(readme, "docs/tf1-compat.md#queues-q") is None
    assert _link_problem(readme, "https://www.ray.io") is None
    assert _link_problem(readme, "../shared/DESIGN.md") == "points outside the repository"
    assert _link_problem(readme, "docs/no-such-page.md") == "no such file in the repository"
    assert _link_problem(readme, "file:///x") == "only http(s) URLs or paths inside the repository"
    assert _link_problem(readme, "docs/tf1-compat.md#no-such-heading") is not None


def _reference_problems(path: Path, text: str | None = None) -> list[str]:
    """References in ``path`` (or in ``text``, read as if it were that file)
    to things the repository does not hold."""
    if text is None:
        text = path.read_text(encoding="utf-8")
    problems = []
    for lineno, line in enumerate(text.splitlines(), 1):
        where = f"{path.relative_to(ROOT)}:{lineno}"
        if m := _OUTSIDE_RE.search(line):
            problems.append(f"{where}: refers to {m.group(0)!r}, which is not in the repository")
        for up in _UP_PATH_RE.findall(line):
            dest = (path.parent / up).resolve()
            if not dest.is_relative_to(ROOT) or not dest.exists():
                problems.append(f"{where}: {up!r} is not a path in the repository")
        for repo_path, md_name in _REPO_PATH_RE.findall(line):
            name = repo_path or md_name
            if not any((base / name).exists() for base in (ROOT, path.parent)):
                problems.append(f"{where}: {name!r} does not exist in the repository")
    return problems


def test_reference_checker_rejects_what_it_should() -> None:
    sample = ROOT / "docs" / "sample.md"  # read as if it were there; never written
    problems = _reference_problems(
        sample,
        "see ../shared/spec/tf1-semantics.md\n"
        "and DESIGN.md and feedq/no_such_module.py\n"
        "but docs/design.md, queue-api.md, ../README.md and feedq/errors.py exist\n",
    )
    assert problems == [
        "docs/sample.md:1: refers to '../shared', which is not in the repository",
        "docs/sample.md:1: '../shared/spec/tf1-semantics.md' is not a path in the repository",
        "docs/sample.md:2: refers to 'DESIGN.md', which is not in the repository",
        "docs/sample.md:2: 'DESIGN.md' does not exist in the repository",
        "docs/sample.md:2: 'feedq/no_such_module.py' does not exist in the repository",
    ]


def test_docstrings_and_docs_refer_only_to_the_repository() -> None:
    problems = [p for path in _files(PUBLISHED) for p in _reference_problems(path)]
    assert not problems, "references outside the repository:\n" + "\n".join(problems)


def test_readme_links_the_reference_docs() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in ("docs/tf1-compat.md", "docs/design.md"):
        assert f"]({page})" in text, f"README.md does not link {page}"


def _readme_test_command() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            if line.rstrip().endswith("pytest"):
                return str(line).strip()
    raise AssertionError("README.md has no bash line that runs pytest")


def test_ci_runs_the_readme_test_command_with_lint_and_types() -> None:
    """.ci/run runs each step of the README's test command, in order, with
    ruff and mypy between the install and pytest, each on its own line so
    a failing step fails the run."""
    command = _readme_test_command()
    steps = [s.strip() for s in command.split("&&")]
    steps = steps[steps.index(next(s for s in steps if s.startswith("pip install"))):]
    assert steps[-1] == "pytest", command
    lines = [ln.split("||")[0].split("  #")[0].strip()
             for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    positions = [lines.index(step) for step in steps]
    assert positions == sorted(positions), f".ci/run runs {steps} out of order"
    install, test = positions[0], positions[-1]
    checks = lines[install + 1:test]
    assert "ruff check feedq tests benchmarks examples" in checks, checks
    assert "mypy" in checks, checks


#: A folder of the repository named in prose: "feedq/queues/", "examples/distributed/".
_REPO_DIR_RE = re.compile(r"(?<![\w./:-])((?:feedq|docs|tests|examples|benchmarks|\.ci)/(?:[\w-]+/)*)(?!\w)")


def test_folders_named_in_docs_exist() -> None:
    """design.md named `feedq/devices/`, a folder that never existed (the module
    is feedq/devices.py with feedq/_devices/); the file checker above only
    sees names with an extension."""
    problems = []
    for path in _files(PUBLISHED):
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for folder in _REPO_DIR_RE.findall(line):
                if not (ROOT / folder).is_dir():
                    problems.append(f"{path.relative_to(ROOT)}:{lineno}: no folder {folder!r}")
    assert not problems, "\n".join(problems)
    assert _REPO_DIR_RE.findall("see `feedq/queues/` and feedq/x.py, examples/distributed/.") == [
        "feedq/queues/", "examples/distributed/"]
