"""Small files with names that explain themselves: a service file past 400 lines says why at its top."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 400
REASON = "Over 400 lines, one file:"


def oversized_without_reason(folder: Path, root: Path = ROOT) -> list[str]:
    out = []
    for path in sorted(folder.rglob("*.py")):
        if "pb" in path.relative_to(root).parts:  # generated protobuf code
            continue
        source = path.read_text()
        if source.count("\n") <= LIMIT:
            continue
        doc = ast.get_docstring(ast.parse(source)) or ""
        if REASON not in doc:
            out.append(f"{path.relative_to(root)} ({source.count(chr(10))} lines)")
    return out


def test_every_service_file_past_400_lines_says_why_at_its_top():
    assert oversized_without_reason(ROOT / "services") + oversized_without_reason(ROOT / "tui") == []


def test_the_check_finds_a_long_file_without_a_reason(tmp_path):
    (tmp_path / "long.py").write_text('"""A module."""\n' + "x = 1\n" * 401)
    (tmp_path / "said.py").write_text(f'"""A module.\n\n{REASON} it is a table."""\n' + "x = 1\n" * 401)
    assert oversized_without_reason(tmp_path, root=tmp_path) == ["long.py (402 lines)"]
