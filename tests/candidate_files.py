"""Candidate files of the tests: kernel source whose `# plan: {...}` comment line holds its launch plan.

A candidate is kernel source plus a LaunchPlan; a test file keeps both in one place. The comment is
part of the source (it is judged and hashed with it) and means nothing to the kernel schema.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from google.protobuf import json_format

from services.core.pb import events_pb2 as pb

_PLAN = re.compile(r"^# plan: (\{.*\})$", re.M)


def plan_of(source: str) -> pb.LaunchPlan:
    """The plan a source's `# plan:` line holds, or an empty plan (a host-code candidate of the old format)."""
    match = _PLAN.search(source)
    if match is None:
        return pb.LaunchPlan()
    return json_format.ParseDict(json.loads(match.group(1)), pb.LaunchPlan())


def plan_line(plan: pb.LaunchPlan) -> str:
    return "# plan: " + json.dumps(json_format.MessageToDict(plan, preserving_proto_field_name=True), sort_keys=True)


def load(path: Path) -> tuple[str, pb.LaunchPlan]:
    source = path.read_text()
    return source, plan_of(source)
