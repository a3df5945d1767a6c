"""What the config rules judge: a parsed config and what could be resolved from it.

Below both the rules that read it (``service.validate.rules``) and the validator that builds it
(``service.validate.document``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from service.configs.yamlio import Document
from service.facts import Facts
from trainer.contract.config import RecipeConfig


@dataclass
class ConfigView:
    """A parsed config and what could be resolved from it, for the config rules."""

    doc: Document
    config: Optional[RecipeConfig] = None
    facts: Optional[Facts] = None
    unknown_keys: list[tuple[str, set]] = field(default_factory=list)
    invalid_values: list[tuple[str, str, str]] = field(default_factory=list)
    model_error: Optional[str] = None
    # With model_error: True when the name resolved to nothing (recipe_index's UnknownModelError), False
    # when a config.json was found but cannot describe a model (RA-C009 makes only the latter an error).
    model_unknown: bool = False
    hardware_error: Optional[str] = None
    gpus_flag: Optional[int] = None  # --gpus as given: the GPUs per node were read from it, not the file
    gpus_read_as_total: bool = False  # --gpus filled whole nodes and replaced the file's num_nodes
    nodes_flag: Optional[int] = None
    bridge_version_flag: Optional[str] = None  # --bridge-version: over metadata.bridge_version

    def bridge_version(self) -> Optional[str]:
        """The Megatron Bridge release whose defaults the config assumes, as stated (the flag first), or None."""
        meta = self.config.metadata if self.config is not None else None
        return self.bridge_version_flag or (meta.bridge_version if meta is not None else None)
