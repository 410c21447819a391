"""The services reach an op family only through the registry (`services.ops.family(name)`, `judging(name)`): no file
of a family-agnostic service imports a family's package, so a new family is a new package and a registry line."""

from __future__ import annotations

import ast
from pathlib import Path

from services.ops import FAMILIES

ROOT = Path(__file__).resolve().parents[2]
# Every service folder and the TUI: only the registry (services/ops/__init__.py) and the family packages name a family.
FOLDERS = [p for p in sorted((ROOT / "services").iterdir()) if p.is_dir() and p.name not in ("ops", "__pycache__")]
FOLDERS.append(ROOT / "tui")


def family_imports(path: Path) -> list[str]:
    """`services.ops.<family>` modules (or names of them) a Python file imports, at any depth of the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[:2] == ["services", "ops"] and len(parts) > 2 and parts[2] in FAMILIES:
                found.append(node.module)
            elif node.module == "services.ops":
                found += [f"services.ops.{a.name}" for a in node.names if a.name in FAMILIES]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[2:3] and a.name.split(".")[2] in FAMILIES]
    return found


def test_family_agnostic_services_import_no_family_package():
    offenders = {
        str(path.relative_to(ROOT)): names
        for folder in FOLDERS
        for path in sorted(folder.rglob("*.py"))
        if (names := family_imports(path))
    }
    assert not offenders, offenders


def test_the_check_sees_every_form_of_import(tmp_path):
    """The scan is no test that cannot fail: each way of naming a family module is found."""
    source = tmp_path / "x.py"
    source.write_text(
        "from services.ops import rotary, family\n"
        "import services.ops.gated_mlp.judging\n"
        "def f():\n    from services.ops.plain_mlp import reference\n"
        "from services.ops.protocol import JudgeAsk\n"
    )
    assert family_imports(source) == [
        "services.ops.rotary",
        "services.ops.gated_mlp.judging",
        "services.ops.plain_mlp",
    ]
