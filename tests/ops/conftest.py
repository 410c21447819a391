"""The family tests under tests/ops/<family>/ judge candidates with the judge's test kit (tests/judge/judge_testkit.py:
a run log, a ProfileCaptured of a live module, a sandbox run), imported by name as the judge's own tests import it.
No folder under tests/ is a package, so pytest puts only a test file's own folder (and tests/, for its conftest) on
sys.path: the kit's folder is added here, after them, so no name of a family's folder is shadowed by the judge's."""

from __future__ import annotations

import sys
from pathlib import Path

JUDGE_KIT = str(Path(__file__).resolve().parents[1] / "judge")
if JUDGE_KIT not in sys.path:
    sys.path.append(JUDGE_KIT)
