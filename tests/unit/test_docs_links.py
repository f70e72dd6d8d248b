"""Every reference to a doc file, and to a section of one, points at something that exists.

Code comments, docstrings and the docs point readers at ``docs/<file>.md``,
``docs/<file>.md#anchor`` or ``docs/<file>.md, "Section name"`` (also ``CHANGELOG.md`` and
``README.md`` at the repository root, and inside docs/ the bare ``<file>.md`` of a sibling
and Markdown links ``[text](<file>.md#anchor)``). A doc rewritten or a heading renamed
leaves such pointers dangling without anyone noticing; this test reads them all from
escalation/, tests/, migrations/, docs/, README.md and CHANGELOG.md and fails on a missing
file or heading.

Anchors are GitHub's: the heading text lowercased, inline-code backticks and link
targets dropped, every character that is not a letter, digit, space, ``-`` or ``_``
removed, spaces turned into ``-``; a repeated heading gets ``-1``, ``-2``, ... A quoted
section name names a heading by its words or by its first words (``"Maintenance"`` for
"Maintenance (run once across workers)"): its anchor equals the heading's anchor or is the
start of it up to a ``-`` (so case and punctuation may differ, the words may not). A bold
run-in paragraph title (``**A replica that holds nothing.** ...``) counts as a section for a
quoted name, not for an ``#anchor``. Headings inside fenced code blocks are not headings.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED_DIRS = ("escalation", "tests", "migrations", "docs")
SCANNED_FILES = ("README.md", "CHANGELOG.md")
SUFFIXES = {".py", ".md", ".lua", ".mjs", ".toml", ".sql", ".txt", ".mako", ".html", ".ini"}
THIS_FILE = Path(__file__).resolve()

# A line break plus the next line's indentation and comment leader (#, --, //, *), so that a
# reference or a quoted section name wrapped across comment lines reads as one line.
_LINE_BREAK = re.compile(r"[ \t]*\n[ \t]*(?:#+|--|//|\*)?[ \t]*")
# docs/x.md, docs/adr/x.md, CHANGELOG.md, README.md (optionally #anchor), then optionally a
# quoted section name: `, "Name"`, ` "Name"`, ` ("Name"`, `, section "Name"`.
_REFERENCE = re.compile(
    r"(?<![\w/.-])(?P<path>docs/[\w./-]+?\.md|CHANGELOG\.md|README\.md)"
    r"(?:#(?P<anchor>[\w-]+))?"
    r"(?:(?:[,:]?[ ]\(?|\()(?:section[ ])?\"(?P<section>[^\"\n]{1,120})\")?"
)
# inside docs/: a sibling named bare (`operations.md, "Logs"`) or a Markdown link target
_SIBLING = re.compile(
    r"(?<![\w/.-])(?P<path>[\w.-]+\.md)(?:#(?P<anchor>[\w-]+))?"
    r"(?:(?:[,:]?[ ]\(?|\()\"(?P<section>[^\"\n]{1,120})\")?"
)
_LINK = re.compile(r"\]\((?P<path>(?!https?:|mailto:)[^)\s#]*)(?:#(?P<anchor>[^)\s]+))?\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(?P<text>.+?)\s*#*\s*$")
_BOLD_LEAD = re.compile(r"^\s*(?:[-*]\s+)?\*\*(?P<text>[^*]+?)[.:]?\*\*")


def github_anchor(text: str) -> str:
    """The anchor GitHub gives a heading (``text`` as written after the ``#`` marks)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [words](target) -> words
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(markdown: str) -> set[str]:
    """Every heading anchor of a Markdown text, repeats suffixed ``-1``, ``-2``, ...

    Lines inside fenced code blocks are skipped (a ``# comment`` in a shell block is no
    heading).
    """
    seen: Counter[str] = Counter()
    found: set[str] = set()
    fenced = False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match is None:
            continue
        anchor = github_anchor(match["text"])
        found.add(anchor if seen[anchor] == 0 else f"{anchor}-{seen[anchor]}")
        seen[anchor] += 1
    return found


def bold_leads_of(markdown: str) -> set[str]:
    """The anchors of the bold run-in titles that open paragraphs or list items."""
    return {
        github_anchor(m["text"])
        for line in markdown.splitlines()
        if (m := _BOLD_LEAD.match(line)) is not None
    }


def names_section(name: str, anchors: set[str]) -> bool:
    """Whether a quoted section name is a heading's words or its first words."""
    wanted = github_anchor(name)
    return any(a == wanted or a.startswith(wanted + "-") for a in anchors)


@functools.lru_cache(maxsize=256)
def _headings(markdown: str) -> tuple[set[str], set[str]]:
    """``(anchors, anchors and bold run-in titles)`` of a doc's text: computed once per
    text, not once per reference to it (a doc is named by hundreds of references)."""
    anchors = anchors_of(markdown)
    return anchors, anchors | bold_leads_of(markdown)


@functools.lru_cache(maxsize=256)
def _headings_of(path: Path) -> tuple[set[str], set[str]]:
    """:func:`_headings` of the doc at ``path``, read once for all the references to it."""
    return _headings(path.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Reference:
    """One pointer at a doc: where it is written, the file it names, and the heading."""

    source: str
    target: Path
    anchor: str | None
    section: str | None

    def problem(self) -> str | None:
        """Why the reference does not resolve, or None when it does."""
        if not self.target.is_file():
            return f"{self.source}: {self.target.relative_to(ROOT)} does not exist"
        if self.anchor is None and self.section is None:
            return None
        anchors, sections = _headings_of(self.target)
        if self.anchor is not None:
            if self.anchor in anchors:
                return None
        elif names_section(self.section or "", sections):
            return None
        shown = f"#{self.anchor}" if self.anchor is not None else f'"{self.section}"'
        return f"{self.source}: {self.target.relative_to(ROOT)} has no heading {shown}"


def references_in(path: Path, text: str) -> list[Reference]:
    """The doc references written in ``text``, the content of ``path`` (under ROOT)."""
    flat = _LINE_BREAK.sub(" ", text)
    name = path.relative_to(ROOT).as_posix()
    found = [
        Reference(name, ROOT / m["path"], m["anchor"], m["section"])
        for m in _REFERENCE.finditer(flat)
    ]
    if path.suffix == ".md":
        base = path.parent
        for m in _LINK.finditer(flat):
            target = (base / m["path"]).resolve() if m["path"] else path
            if target.suffix == ".md":
                found.append(Reference(name, target, m["anchor"], None))
        if base.is_relative_to(ROOT / "docs"):
            for m in _SIBLING.finditer(flat):
                target = base / m["path"]
                if m["path"] in SCANNED_FILES or not target.is_file():
                    continue  # a root file, or a name of something else (not a sibling)
                found.append(Reference(name, target, m["anchor"], m["section"]))
    return found


def _scanned_files() -> list[Path]:
    files = [ROOT / name for name in SCANNED_FILES if (ROOT / name).is_file()]
    for folder in SCANNED_DIRS:
        files += [
            p
            for p in sorted((ROOT / folder).rglob("*"))
            if p.is_file()
            and p.suffix in SUFFIXES
            and "__pycache__" not in p.parts
            and p.resolve() != THIS_FILE
        ]
    return files


@functools.lru_cache(maxsize=1)
def _all_references() -> list[Reference]:
    """Every reference of the scanned files (read once for the tests of this module)."""
    found: list[Reference] = []
    for path in _scanned_files():
        found += references_in(path, path.read_text(encoding="utf-8", errors="replace"))
    return found


def test_every_doc_reference_resolves() -> None:
    problems = sorted({p for r in _all_references() if (p := r.problem()) is not None})
    assert not problems, "dangling doc references:\n" + "\n".join(problems)


def test_the_scan_reads_the_references_it_must() -> None:
    """The scan is not vacuous: code points into the performance doc and the changelog."""
    refs = _all_references()
    targets = {r.target.relative_to(ROOT).as_posix() for r in refs}
    assert {"docs/performance.md", "docs/architecture.md", "CHANGELOG.md"} <= targets
    assert sum(1 for r in refs if r.section is not None) >= 10


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Scale-out on a Redis Cluster", "scale-out-on-a-redis-cluster"),
        ("`escalation bench compare`", "escalation-bench-compare"),
        ("Firing path CPU (sixth pass)", "firing-path-cpu-sixth-pass"),
        ("Idle: commands per worker, server-side", "idle-commands-per-worker-server-side"),
        ("See [the ADR](adr/0003.md) now", "see-the-adr-now"),
        ("snake_case stays", "snake_case-stays"),
    ],
)
def test_anchors_are_githubs(heading: str, anchor: str) -> None:
    assert github_anchor(heading) == anchor


def test_repeated_headings_and_fenced_lines() -> None:
    text = "# A\n\n## Figures\n\n```sh\n# not a heading\n```\n\n### Figures\n"
    assert anchors_of(text) == {"a", "figures", "figures-1"}


def test_a_dangling_reference_is_reported(tmp_path: Path) -> None:
    """Each form of reference is read, and a missing heading or file is named."""
    source = ROOT / "escalation" / "example.py"
    text = (
        '"""See docs/architecture.md, "No such\n    heading" and docs/nope.md.\n'
        'Also docs/architecture.md#no-such-anchor and CHANGELOG.md."""\n'
        '# and docs/performance.md ("Method")\n'
    )
    refs = references_in(source, text)
    assert [(r.target.name, r.anchor, r.section) for r in refs] == [
        ("architecture.md", None, "No such heading"),
        ("nope.md", None, None),
        ("architecture.md", "no-such-anchor", None),
        ("CHANGELOG.md", None, None),
        ("performance.md", None, "Method"),
    ]
    problems = [r.problem() for r in refs]
    assert problems[0] == (
        'escalation/example.py: docs/architecture.md has no heading "No such heading"'
    )
    assert problems[1] == "escalation/example.py: docs/nope.md does not exist"
    assert problems[2] is not None and "#no-such-anchor" in problems[2]
    assert problems[4] is None
