"""The documents build as a site, say every option, and speak to readers, not to the workshop."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
READERS_FILES = [ROOT / "README.md", *PAGES]

#: shorthand only the people who wrote the code can follow: what a reader needs is what the
#: thing is, not the ticket, the design note or the commit it came from
SHORTHAND = [
    (re.compile(r"\bseeds? \d{3}\b", re.I), "a design-note number"),
    (re.compile(r"\bissues? #?\d+\b", re.I), "a ticket number"),
    (re.compile(r"\.\./shared\b|\bshared[/\\](testdata|seeds|NOTES|FORMAT)"), "a path outside the repository"),
    (re.compile(r"\bFORMAT\.md\b"), "a document the repository does not hold (docs/format.md is)"),
]
#: a commit hash: 7 to 12 hex digits with at least one letter and one digit (outside code blocks,
#: where run output may print ids)
COMMIT = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,12}(?![\w/-])")
FENCED = re.compile(r"^( *)(```|~~~).*?^\1\2", re.S | re.M)


def test_00_site_builds_in_strict_mode(tmp_path):
    """A broken link or anchor, or a page left out of mkdocs.yml's nav, fails the build."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "guide" / "options.html").exists()


def test_01_every_spark_option_is_in_the_options_page():
    from wal3_spark.spark.options import OPTIONS, store_option_names
    from wal3_spark.spark.table import METADATA_COLUMNS_OPTION

    page = (ROOT / "docs" / "guide" / "options.md").read_text()
    names = [*OPTIONS, *store_option_names(), METADATA_COLUMNS_OPTION]
    missing = [n for n in names if f"`{n}`" not in page]
    assert not missing, f"options the data source takes but docs/guide/options.md does not name: {missing}"


def test_02_no_workshop_shorthand_where_users_read():
    found = []
    for path in READERS_FILES:
        text = path.read_text()
        for pattern, what in SHORTHAND:
            found += [f"{path.relative_to(ROOT)}: {m.group(0)!r} ({what})" for m in pattern.finditer(text)]
        prose = FENCED.sub("", text)
        found += [f"{path.relative_to(ROOT)}: {m.group(0)!r} (a commit hash)" for m in COMMIT.finditer(prose)]
    assert not found, "say what the thing is instead:\n" + "\n".join(found)


def test_03_readme_fits_on_a_few_screens():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines: move detail to docs/"
    assert "./dev quickstart" in (ROOT / "README.md").read_text()
    assert "./dev test" in (ROOT / "README.md").read_text()
