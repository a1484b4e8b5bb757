"""The README and docs: every relative link resolves, to a file and, where it names one, to a heading
(GitHub's anchors); the README stays a front page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CODE_BLOCK = re.compile(r"```.*?```", re.DOTALL)
README_LINES = 150


def anchor_of(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens and underscores dropped, spaces
    to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in CODE_BLOCK.sub("", path.read_text()).splitlines():
        if match := re.match(r"^#{1,6}\s+(.*)$", line):
            anchor = anchor_of(match.group(1))
            found.add(anchor if anchor not in seen else f"{anchor}-{seen[anchor]}")
            seen[anchor] = seen.get(anchor, 0) + 1
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    out = []
    for target in LINK.findall(CODE_BLOCK.sub("", page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page.resolve()
        if not resolved.exists():
            out.append(f"{page.relative_to(root)}: {target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            out.append(f"{page.relative_to(root)}: {target} (no such heading)")
    return out


def test_every_link_in_the_readme_and_the_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    assert [bad for page in pages for bad in broken_links(page)] == []


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path: Path):
    (tmp_path / "other.md").write_text("# The agent family, on L4s\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#the-agent-family-on-l4s) [gone](missing.md) [no](other.md#nope) "
                    "[web](https://example.com)\n```\n[in code](nowhere.md)\n```\n")
    assert broken_links(page, tmp_path) == ["page.md: missing.md (no such file)",
                                            "page.md: other.md#nope (no such heading)"]


def test_the_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_LINES
    assert not re.search(r"\b[0-9a-f]{7,40}\b", CODE_BLOCK.sub("", text)), "a commit hash on the front page"
    assert not re.search(r"\bissues? \d+", text, re.IGNORECASE)


def test_the_front_pages_table_is_the_one_the_results_files_give():
    """``python -m hetflow.bench.headline bench/headline.yaml`` prints it: a results file re-run, or a row
    added, leaves the README behind until the command is run again."""
    from hetflow.bench.headline import load_rows, table

    assert table(load_rows(ROOT / "bench" / "headline.yaml")) in (ROOT / "README.md").read_text()
