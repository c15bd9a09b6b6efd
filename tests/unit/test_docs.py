"""README.md is a short door and docs/ holds the rest: the door stays short, every link in them leads to a file
and a heading that exist, and docs/configuration.md documents exactly the settings the code has."""

import re
from pathlib import Path

from gpu_rent.project.keys import KEYS, REQUIRED
from tests.unit.test_readme import _shown as in_vars_file

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
CONFIGURATION = DOCS / "configuration.md"
README_MOST_LINES = 250

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target), the target optionally in <...> and followed by a "title"
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]\\]|\\.)*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
KEY_ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]*)` \| ([^|]*) \|")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def prose(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every line outside fenced code blocks."""
    kept, fence = [], None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened[1][0] * len(opened[1])
        elif fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
        else:
            kept.append((number, line))
    return kept


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (github-slugger): the rendered text, lowercased, with every character but
    letters, digits, `_`, `-` and spaces removed, then each space a `-`."""
    text = re.sub(r"!?\[((?:[^\[\]\\]|\\.)*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, a repeated one numbered -1, -2 ... as GitHub numbers it."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose(path):
        match = HEADING.match(line)
        if match:
            base = slug(match[2])
            found.add(f"{base}-{seen[base]}" if base in seen else base)
            seen[base] = seen.get(base, 0) + 1
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link in the file's prose; inline code and code blocks are not links."""
    found = []
    for number, line in prose(path):
        text = CODE_SPAN.sub("", line)
        found += [(number, target) for target in INLINE_LINK.findall(text)]
        reference = REFERENCE.match(text)
        if reference:
            found.append((number, reference[1]))
    return found


def broken(path: Path, target: str) -> str | None:
    """Why a link from `path` leads nowhere, or None. External links are not followed (no network)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # https:, mailto: ...
        return None
    where, _, anchor = target.partition("#")
    file = path if not where else (REPO / where.lstrip("/") if where.startswith("/") else path.parent / where)
    file = file.resolve()
    if not file.is_relative_to(REPO):
        return f"{where} lies outside the repository"
    if not file.exists():
        return f"{where} does not exist"
    if anchor and file.suffix == ".md" and anchor not in anchors(file):
        return f"{file.relative_to(REPO)} has no heading #{anchor}"
    return None


def test_slugs_follow_githubs_rules():
    assert slug("An LLM runtime beside SwarmUI (`LLM_RUNTIME`, `ollama-models.yaml`)") == (
        "an-llm-runtime-beside-swarmui-llm_runtime-ollama-modelsyaml"
    )
    assert slug("bootstrapping: what runs on the VM") == "bootstrapping-what-runs-on-the-vm"
    assert slug("1. Install") == "1-install"
    assert slug("gpu-rent.vars") == "gpu-rentvars"
    assert slug("Quick start on a real cloud (Selectel or any OpenStack with Keystone v3)") == (
        "quick-start-on-a-real-cloud-selectel-or-any-openstack-with-keystone-v3"
    )
    assert slug("What it costs, and what the idle-killer promises") == "what-it-costs-and-what-the-idle-killer-promises"
    assert slug("See [the page](other.md) now") == "see-the-page-now"


def test_anchors_and_links_skip_code_and_number_repeats(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## Same\n\n## Same\n\n```sh\n# not a heading [nor](a-link.md)\n```\n\n"
        '[one](#same-1) `[two](in-code.md)` and ![three](img.png "a title")\n\n[four]: other.md#x\n',
        encoding="utf-8",
    )
    assert anchors(page) == {"title", "same", "same-1"}
    assert links(page) == [(11, "#same-1"), (11, "img.png"), (13, "other.md#x")]


def test_every_relative_link_leads_to_a_file_and_heading():
    checked, problems = 0, []
    for path in pages():
        for number, target in links(path):
            checked += 1
            problem = broken(path, target)
            if problem:
                problems.append(f"{path.relative_to(REPO)}:{number}: ({target}): {problem}")
    assert checked > 50, "the reader found too few links: it missed the link syntax"
    assert problems == []


def test_the_readme_is_a_short_door():
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MOST_LINES, f"README.md has {lines} lines: move the detail into docs/"


def test_the_readme_links_every_docs_page():
    linked = {(README.parent / target.partition("#")[0]).resolve() for _, target in links(README)}
    assert DOCS.is_dir() and len(list(DOCS.glob("*.md"))) > 5
    assert [page.name for page in sorted(DOCS.glob("*.md")) if page.resolve() not in linked] == []


def key_rows() -> list[tuple[str, str]]:
    """(key, default) of every row of the key table in docs/configuration.md's section `## gpu-rent.vars`."""
    rows, inside = [], False
    for _, line in prose(CONFIGURATION):
        heading = HEADING.match(line)
        if heading and len(heading[1]) <= 2:
            inside = heading[2] == "gpu-rent.vars"
        match = KEY_ROW.match(line)
        if inside and match:
            rows.append((match[1], match[2]))
    return rows


def _shown(default) -> str:
    """A default as the key table writes it: as gpu-rent.vars does, but for the two it cannot show there."""
    if default is REQUIRED:
        return "required"
    if default is None or default == ():
        return "(none)"
    return in_vars_file(default)


def test_the_configuration_page_documents_every_key_and_no_other():
    rows = key_rows()
    documented = [key for key, _ in rows]
    assert len(documented) > 10, "no key table found under `## gpu-rent.vars` in docs/configuration.md"
    assert [key for key in documented if documented.count(key) > 1] == [], "a key has two rows"
    assert [key for key in KEYS if key not in documented] == [], "keys of the code without a row"
    assert [key for key in documented if key not in KEYS] == [], "rows for keys the code does not have"
    wrong = {key: shown for key, shown in rows if shown != _shown(KEYS[key].default)}
    assert wrong == {}, "the default column differs from the code's default"


def test_the_architecture_page_names_every_module_in_its_packages_row():
    """docs/architecture.md's table has a row per package of gpu_rent/ that names each of its modules."""
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)/` \| (.*) \|$", page, re.M))
    packages = sorted(p.name for p in (REPO / "gpu_rent").iterdir() if (p / "__init__.py").is_file())
    assert sorted(rows) == packages
    unnamed = {
        package: [m.name for m in sorted((REPO / "gpu_rent" / package).glob("*.py"))
                  if m.name != "__init__.py" and f"`{m.name}`" not in rows[package]]
        for package in packages
    }  # fmt: skip
    assert {package: names for package, names in unnamed.items() if names} == {}
