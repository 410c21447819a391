"""The coder finds every family's template through the registry alone: by family, and back from the template name a
config carries (what a judged proposal's next search step is rendered with)."""

from __future__ import annotations

import pytest

from services import ops
from services.ops.protocol import FamilyTemplate

MEMBERS = [name for name in dir(FamilyTemplate) if not name.startswith("_")] + list(FamilyTemplate.__annotations__)


@pytest.mark.parametrize("family", list(ops.FAMILIES))
def test_every_family_has_a_template_named_back_to_it(family):
    template = ops.template(family)
    assert template.OP_FAMILY == family and template.__name__ == f"services.ops.{family}.template"
    assert [name for name in MEMBERS if not hasattr(template, name)] == []
    assert ops.template_family(template.TEMPLATE) == family
    config = template.search_configs(template.VARIANTS[0])[0]  # what it renders names it and plans for its family
    assert config.template == template.TEMPLATE and template.plan(config).family == family


def test_template_names_are_one_a_family_and_unknown_ones_name_none():
    names = [ops.template(family).TEMPLATE for family in ops.FAMILIES]
    assert len(set(names)) == len(names)
    assert ops.template_family("") is None  # an LLM author's candidate carries no config
    assert ops.template_family("no_such_template") is None
    with pytest.raises(ops.UnknownFamily):
        ops.template("matmul")


def test_an_unranked_target_is_tried_as_the_family_a_norms_roofline_class_names():
    assert ops.UNRANKED in ops.FAMILIES and ops.template(ops.UNRANKED).variant_for("") == ""
    assert ops.UNRANKED == "row_reduction"  # the family recorded runs' unranked targets were written as
