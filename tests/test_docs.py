"""The documentation holds together: links resolve, generated pages are current, README is short."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from types import ModuleType
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250

DOCS = sorted(
    {
        ROOT / "README.md",
        *ROOT.glob("docs/**/*.md"),
        *ROOT.glob("roles/*/README.md"),
        *ROOT.glob("molecule/README.md"),
    }
)
SKIPPED_SCHEMES = ("http://", "https://", "mailto:")

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HTML_LINK = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)["']""")
HTML_ANCHOR = re.compile(r"""<a\b[^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']""")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)\s*$")


def prose_lines(text: str) -> list[str]:
    """Return the lines outside fenced code blocks (code blocks become blank lines)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    return lines


def links(text: str) -> list[str]:
    """Return every link target of a Markdown text, leaving out code blocks and spans."""
    found = []
    for line in prose_lines(text):
        line = CODE_SPAN.sub("code", line)
        found += INLINE_LINK.findall(line)
        found += REFERENCE_DEFINITION.findall(line)
        found += HTML_LINK.findall(line)
    return found


def slug(heading: str) -> str:
    """Return GitHub's anchor for a heading's text.

    GitHub's rules: the rendered text (links become their text), lowercased,
    with every character other than a letter, a digit, a space, ``-`` or ``_``
    dropped, then each space turned into ``-``.
    """
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Return every anchor of a Markdown text: its headings' slugs and HTML ids."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    lines = prose_lines(text)
    for number, line in enumerate(lines):
        heading = ATX_HEADING.match(line)
        title = heading.group(2) if heading else None
        following = lines[number + 1] if number + 1 < len(lines) else ""
        paragraph = line.strip() and not line.lstrip().startswith(("-", "*", "+", "|", ">"))
        if title is None and paragraph and SETEXT_UNDERLINE.match(following):
            title = line.strip()
        if title is not None:
            base = slug(title)
            count = counts.get(base, 0)
            counts[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(HTML_ANCHOR.findall(line))
    return found


def broken_links(doc: Path) -> list[str]:
    """Return a line for each relative link of ``doc`` that names no file or no heading."""
    text = doc.read_text()
    problems = []
    for target in links(text):
        if not target or target.startswith(SKIPPED_SCHEMES):
            continue
        path_part, _, anchor = target.partition("#")
        path_part = unquote(path_part)
        if not path_part:
            linked = doc
        elif path_part.startswith("/"):
            linked = ROOT / path_part.lstrip("/")
        else:
            linked = (doc.parent / path_part).resolve()
        if not linked.exists():
            problems.append(f"{target}: no file {os.path.relpath(linked, ROOT)}")
        elif (
            anchor and linked.suffix == ".md" and unquote(anchor) not in anchors(linked.read_text())
        ):
            problems.append(f"{target}: no heading with anchor #{anchor} in {linked.name}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    problems = broken_links(doc)
    assert not problems, f"{doc.relative_to(ROOT)} has broken links:\n" + "\n".join(problems)


def load_generator() -> ModuleType:
    """Import docs/variables.py (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("docs_variables", ROOT / "docs/variables.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_variables_md_is_generated_from_the_argument_specs() -> None:
    expected = load_generator().render(ROOT)
    actual = (ROOT / "docs/variables.md").read_text()
    assert actual == expected, "docs/variables.md is out of date: run make docs"


def test_variables_md_check_names_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    generator = load_generator()
    for name in ("roles", "playbooks"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/variables.md").write_text("edited by hand\n")
    assert generator.main(["--check", "--root", str(tmp_path)]) == 1
    assert "run make docs" in capsys.readouterr().err
    assert generator.main(["--root", str(tmp_path)]) == 0
    assert generator.main(["--check", "--root", str(tmp_path)]) == 0


def test_slug_follows_github() -> None:
    assert slug("tf_cluster: main") == "tf_cluster-main"
    assert slug("What `make test` runs, stage by stage") == "what-make-test-runs-stage-by-stage"
    assert slug("A [link](x.md) here") == "a-link-here"


def test_readme_is_short() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; at most {README_MAX_LINES}: move depth into docs/"
    )
