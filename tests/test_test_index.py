"""``tests/README.md`` is the index a newcomer reads to find the tests of a stage: it names every
test file, and every test file it names exists."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
INDEX = TESTS / "README.md"


def test_the_index_names_every_test_file_and_only_files_that_exist():
    text = INDEX.read_text(encoding="utf-8")
    named = set(re.findall(r"`((?:\w+/)?\w+\.py)`", text))
    files = {
        str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py") if "node_modules" not in p.parts
    }
    assert sorted(files - named) == [], "add these to tests/README.md"
    tests = {n for n in named if n.split("/")[-1].startswith("test_")}
    assert sorted(tests - files) == []
