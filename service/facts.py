"""The plain facts the rules judge, shared by the validator and the planner.

A ``Facts`` holds one parallel layout with everything the layout rules need
(model card, hardware card, world size, batch, sequence length, precision).
The validator builds one from a config file; the planner builds one per
candidate layout. Rules never see YAML, so both sides apply the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

from recipe_index.cards import HardwareCard, ModelCard

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    vp: Optional[int] = None  # virtual pipeline stages per rank; None = off
    cp: int = 1
    ep: int = 1
    etp: int = 1
    sp: bool = False
    micro_batch_size: int = 1
    recompute: str = "none"  # none | selective | full

    @property
    def vp_or_1(self) -> int:
        return self.vp or 1

    def dp(self, world_size: int) -> int:
        """Dense data-parallel size (0 when the world does not divide)."""
        denom = self.tp * self.pp * self.cp
        return world_size // denom if world_size % denom == 0 else 0

    def expert_dp(self, world_size: int) -> int:
        denom = self.pp * self.ep * self.etp
        return world_size // denom if world_size % denom == 0 else 0

    def with_(self, **changes) -> "Layout":
        return replace(self, **changes)


def with_fix(message: str, fix: Optional[str]) -> str:
    """One line of a problem and its fix: ``why. Fix: what to do`` (a full stop between them)."""
    if not fix:
        return message
    stop = "" if message.rstrip().endswith((".", "!", "?", ":", ";")) else "."
    return f"{message.rstrip()}{stop} Fix: {fix}"


@dataclass
class Finding:
    code: str
    severity: str
    message: str
    key: Optional[str] = None
    fix: Optional[str] = None
    line: Optional[int] = None
    column: Optional[int] = None
    # Findings of the same code and severity after this one that the list leaves out (validate's cap);
    # counted in the summary, said in the message.
    not_listed: int = 0
    # Accepted by the user (service/validate/suppress.py): {"kind": "inSource" | "external", "justification": why}.
    # Listed in JSON and SARIF (as SARIF suppressions), left out of text, GitHub and the counts.
    suppressed: Optional[dict] = None
    # Where the finding points when its key is not written yet (a setting its fix adds): the key whose value broke
    # the rule (RA-L011's split setting, at pp_size). Not part of the answer.
    at: Optional[str] = field(default=None, repr=False, compare=False)

    @property
    def text(self) -> str:
        """The message and its fix as one line."""
        return with_fix(self.message, self.fix)

    def to_dict(self) -> dict:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "key": self.key,
            "line": self.line,
            "column": self.column,
            "fix": self.fix,
        } | ({"suppressed": self.suppressed} if self.suppressed else {})


@dataclass
class Facts:
    layout: Layout
    world_size: int
    model: Optional[ModelCard] = None
    hardware: Optional[HardwareCard] = None
    gpus_per_node: Optional[int] = None
    global_batch_size: Optional[int] = None
    seq_length: Optional[int] = None
    model_seq_length: Optional[int] = None
    precision: str = "bf16"
    mode: str = "pretrain"
    strategy: str = "megatron"
    peft: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def dp(self) -> int:
        return self.layout.dp(self.world_size)

    @property
    def grad_accumulation_steps(self) -> Optional[int]:
        if not self.global_batch_size or not self.dp:
            return None
        denom = self.layout.micro_batch_size * self.dp
        if self.global_batch_size % denom:
            return None
        return self.global_batch_size // denom


def split_world(gpus: int, nodes: Optional[int], node_size: int) -> tuple[int, int]:
    """(gpus_per_node, num_nodes) from the CLI/API flags.

    ``--gpus`` is GPUs per node, as in the config's ``hardware.gpus_per_node``.
    Without ``--nodes``, a count above the hardware's node size is read as the
    total (``--gpus 1024`` on H100 = 128 nodes of 8) when it splits into whole
    nodes, so both ways people say it work.
    """
    if gpus < 1:
        raise ValueError("gpus must be at least 1")
    if nodes is not None:
        if nodes < 1:
            raise ValueError("nodes must be at least 1")
        return gpus, nodes
    if gpus > node_size and gpus % node_size == 0:
        return node_size, gpus // node_size
    return gpus, 1
