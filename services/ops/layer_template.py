"""What every layer family's template says the same way: which config variant writes what a layer was seen
computing, and its layer contract from the recorded roles (refused in the words TargetConcluded records). The
elementwise templates (services.ops.block_template) and the row-plan layer templates
(services.ops.row_reduction.template.RowLayerTemplate) build on it."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from services.core.pb import events_pb2 as pb


@dataclass(frozen=True)
class LayerTemplate:
    name: str  # TemplateConfig.template
    op: ModuleType  # the op family's module (services/ops/<family>/__init__.py): its plans' vocabulary, its contract
    roles_said: str  # the children its layer contract binds, as a refusal says them ("gate, up and down")
    variants: tuple[str, ...]

    def variant_for(self, computes: str) -> str | None:
        """The config variant that writes what a module was seen computing; None when this template cannot."""
        return computes if computes in self.variants else None

    def contract_for(self, intro: pb.ModuleIntrospection, profile: pb.ModuleClassProfile) -> pb.Contract:
        """The layer contract: its children bound by the roles the profile recorded them running as."""
        from services.ops import ContractRefused

        contract = self.op.layer_contract(intro.class_path, intro.forward_params, profile.roles)
        if contract is None:  # the reason recorded in TargetConcluded: replay re-derives it, word for word
            raise ContractRefused(f"{intro.class_path} has no recorded {self.roles_said} roles for a layer contract")
        return contract

    def problem(self, config: pb.TemplateConfig) -> str:
        raise NotImplementedError

    def valid(self, config: pb.TemplateConfig) -> bool:
        return not self.problem(config)

    def checked(self, config: pb.TemplateConfig) -> pb.TemplateConfig:
        problem = self.problem(config)
        if problem:
            raise ValueError(problem)
        return config
