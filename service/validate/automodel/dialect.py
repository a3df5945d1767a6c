"""Which dialect a config is written in, and the world size an AutoModel recipe states.

AutoModel's recipes name their recipe class (``recipe: TrainFinetuneRecipeForNextTokenPrediction``, a
dotted class path, or ``recipe: {_target_: nemo_automodel...}``), set up torch.distributed under
``dist_env`` and build their components from ``nemo_automodel.*`` targets. A Recipe Advisor config has a
``recipe:`` section of its own (``recipe._target_: trainer.recipes...``) and none of these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from service.validate.megatron.dialect import BRIDGE, MEGATRON_LM  # the Megatron dialects validate reads too

NATIVE = "recipe-advisor"
AUTOMODEL = "automodel"
AUTO = "auto"
DIALECTS = (AUTO, NATIVE, AUTOMODEL, BRIDGE, MEGATRON_LM)
AUTOMODEL_PACKAGE = "nemo_automodel."

# A recipe's header says how to run it (`automodel FILE --nproc-per-node 8`, `torchrun --nproc-per-node=8 ...`).
_NPROC = re.compile(r"--nproc[-_]per[-_]node[= ]+(\d+)")
_NNODES = re.compile(r"--nnodes[= ]+(\d+)")
DEFAULT_GPUS_PER_NODE = 8  # AutoModel's examples are sized for one node of 8 GPUs unless they say otherwise


def detect(data: Any) -> str:
    """``automodel`` when the file is written in AutoModel's dialect, else ``recipe-advisor``."""
    if not isinstance(data, dict):
        return NATIVE
    recipe = data.get("recipe")
    if isinstance(recipe, str):
        return AUTOMODEL  # a class name or path: Recipe Advisor's `recipe:` is a section
    if isinstance(recipe, dict) and str(recipe.get("_target_", "")).startswith(AUTOMODEL_PACKAGE):
        return AUTOMODEL
    if "dist_env" in data:
        return AUTOMODEL
    for section in data.values():
        if isinstance(section, dict) and str(section.get("_target_", "")).startswith(AUTOMODEL_PACKAGE):
            return AUTOMODEL
    return NATIVE


@dataclass(frozen=True)
class StatedWorld:
    gpus_per_node: int
    num_nodes: int
    source: str  # where the numbers were read, for the findings that quote them
    ci_nodes: Optional[int] = None  # the nodes AutoModel's own CI runs the recipe on (`ci.nodes`): a hint only

    @property
    def size(self) -> int:
        return self.gpus_per_node * self.num_nodes


def _positive(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def ci_cluster(data: dict):
    """The hardware card of the cluster AutoModel's CI runs the recipe on (``ci.cluster_tag``), or None."""
    from recipe_index import get_hardware

    ci = data.get("ci") if isinstance(data.get("ci"), dict) else {}
    tag = ci.get("cluster_tag")
    try:
        return get_hardware(tag) if isinstance(tag, str) and tag else None
    except (LookupError, ValueError):
        return None


def stated_world(text: str, data: dict, gpus: Optional[int] = None, nodes: Optional[int] = None,
                 node_size: int = DEFAULT_GPUS_PER_NODE) -> StatedWorld:
    """The world a recipe is judged at: ``--gpus``/``--nodes`` when given; else the ``--nproc-per-node`` (and
    ``--nnodes``) its comment header's launch command names, else its ``ci.nproc_per_node`` (the workers AutoModel's
    CI launches per node), else 8 GPUs, on one node. ``--gpus`` alone above one node of ``node_size`` that fills
    whole nodes is the total, as elsewhere. ``ci.nodes`` (a multi-node CI run, which may also override the batch
    sizes there) is not read as the world: findings name it in their fix."""
    comments = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
    ci = data.get("ci") if isinstance(data.get("ci"), dict) else {}
    ci_nodes = _positive(ci.get("nodes"))
    if gpus is not None:
        if nodes is None and gpus > node_size and gpus % node_size == 0:
            return StatedWorld(node_size, gpus // node_size, "--gpus", ci_nodes)
        return StatedWorld(gpus, nodes or 1, "--gpus" + (" and --nodes" if nodes else ""), ci_nodes)
    header_nproc, header_nodes = _NPROC.search(comments), _NNODES.search(comments)
    if header_nproc and int(header_nproc.group(1)) > 0:
        per_node, source = int(header_nproc.group(1)), "the header's --nproc-per-node"
    elif _positive(ci.get("nproc_per_node")):
        per_node, source = ci["nproc_per_node"], "ci.nproc_per_node"
    else:
        per_node, source = DEFAULT_GPUS_PER_NODE, f"{DEFAULT_GPUS_PER_NODE} GPUs, the default"
    if nodes is not None:
        return StatedWorld(per_node, nodes, f"{source} and --nodes", ci_nodes)
    if header_nodes and int(header_nodes.group(1)) > 0:
        return StatedWorld(per_node, int(header_nodes.group(1)), f"{source} and --nnodes", ci_nodes)
    if ci_nodes:  # AutoModel's CI launches the recipe on ci.nodes nodes of its cluster (tests/ci_tests/README.md)
        cluster = ci_cluster(data)
        if not _positive(ci.get("nproc_per_node")) and cluster is not None:
            per_node, source = cluster.gpus_per_node, f"ci.cluster_tag {cluster.name}'s {cluster.gpus_per_node} GPUs"
        return StatedWorld(per_node, ci_nodes, f"{source} and ci.nodes", ci_nodes)
    return StatedWorld(per_node, 1, source, ci_nodes)
