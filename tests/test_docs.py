"""The README and the contributor docs name only files that exist: a move or a rename that
forgets them fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATH = re.compile(r"(?<![\w/.-])(?:sim3d|calibrate|benchmarks|scenarios|validation)/[\w./-]*\w")


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md", "validation/README.md"])
def test_every_path_a_doc_names_exists(doc):
    text = (ROOT / doc).read_text()
    named = {m.group(0) for m in PATH.finditer(text) if "." in m.group(0).rsplit("/", 1)[-1] or m.group(0).endswith("/")}
    missing = sorted(p for p in named if not (ROOT / p).exists() and not (ROOT / doc).parent.joinpath(p).exists())
    assert named and not missing, f"{doc} names files that do not exist: {missing}"


def test_the_readme_links_the_contributor_docs():
    assert "docs/architecture.md" in (ROOT / "README.md").read_text()
