"""What the op families can write, as a ranking and its reason read it: recorded, not versioned.

The profiler records the live catalogue (family -> writable variants, from the registry) in the profile it ranks
(`ProfileObservation.catalogue`), so a replay ranks and words its reason against the catalogue of its own time, and
a family that learns to write a variant changes no schema. A profile recorded before the catalogue was holds none:
its catalogue is the frozen one below, read by the rules of its schema (each rung the variants that schema's code
named among the writable). Nothing here changes when a family grows.
"""

from __future__ import annotations

from services import ops
from services.core.pb import events_pb2 as pb

# The catalogue every profile without one was ranked against (the families' writable variants at schema 11, when
# the catalogue began to be recorded). Frozen: a new variant enters only through a recorded catalogue.
FROZEN: dict[str, tuple[str, ...]] = {
    "row_reduction": (
        "rmsnorm", "rmsnorm_offset", "layernorm", "layernorm_no_bias", "rmsnorm_fp32_weight", "layernorm_offset",
    ),
    "gated_mlp": ("swiglu", "geglu_tanh", "geglu"),
    "rotary": (
        "rope_half", "rope_interleaved", "rope_half_partial", "rope_pairs_partial", "rope_half_angles",
        "rope_pairs_angles",
    ),
    "residual_norm": (
        "add_rmsnorm", "add_rmsnorm_offset", "add_layernorm", "add_layernorm_no_bias", "add_rmsnorm_fp32_weight",
        "add_layernorm_offset",
    ),
    "plain_mlp": ("mlp_gelu_tanh", "mlp_relu2"),
}  # fmt: skip


# The authors whose kernels are the templates' (RunRequested.author: unset, or the coder's "template"). Every other
# author is an LLM (services.coder.authors), which writes source of its own: it may write any variant a family's op
# runs and its judging has the oracle of, not only what a template renders.
TEMPLATE_AUTHORS = ("", "template")


def live(author: str = "") -> list[pb.FamilyCatalogue]:
    """The catalogue of the code running now for a run by `author`, in the registry's order: what the profiler
    records. The template author's is what the templates write (each family's WRITABLE); an LLM author's is every
    variant a family recognises (its VARIANTS: its op's wrapper runs each, and its judging builds each one's oracle
    from torch's own formula), so a run with an LLM author is offered the targets no template writes."""
    judged = author not in TEMPLATE_AUTHORS
    return [
        pb.FamilyCatalogue(family=name, writable=list(fam.VARIANTS if judged else fam.WRITABLE))
        for name, fam in ops.FAMILIES.items()
    ]


def of(observed: pb.ProfileObservation) -> dict[str, tuple[str, ...]]:
    """family -> writable variants a profile is ranked against: its recorded catalogue, else the frozen one."""
    if observed.catalogue:
        return {c.family: tuple(c.writable) for c in observed.catalogue}
    return dict(FROZEN)


def writable_variants(observed: pb.ProfileObservation, schema_version: int) -> tuple[str, ...]:
    """What the templates write, as the reason of a profile recorded at `schema_version` names it: the recorded
    catalogue in its order, or (before it was recorded) the frozen one by the rules of the schema (an older run keeps
    its words)."""
    if observed.catalogue:
        return tuple(v for c in observed.catalogue for v in c.writable)
    writable = FROZEN["row_reduction"]
    if schema_version >= 5:  # gated MLPs and RoPE
        writable += FROZEN["gated_mlp"] + FROZEN["rotary"]
    if schema_version >= 6:  # the residual norm and the plain MLP's activation
        writable += FROZEN["residual_norm"] + FROZEN["plain_mlp"]
    if schema_version < 7:  # OLMo2's RMSNorm (its weight in fp32), alone and in a residual norm
        writable = tuple(v for v in writable if not v.endswith("rmsnorm_fp32_weight"))
    if schema_version < 8:  # the RoPE functions that rotate part of the head (GPT-NeoX's, GLM's)
        writable = tuple(v for v in writable if v not in ("rope_half_partial", "rope_pairs_partial"))
    if schema_version < 9:  # Nemotron's relu² MLP and LayerNorm1P, alone and in a residual norm
        writable = tuple(v for v in writable if v not in ("mlp_relu2", "layernorm_offset", "add_layernorm_offset"))
    if schema_version < 10:  # GPT-OSS's RoPE of one angle a pair; the gated MLP of torch's exact GELU
        writable = tuple(v for v in writable if v not in ("rope_half_angles", "rope_pairs_angles", "geglu"))
    return writable
