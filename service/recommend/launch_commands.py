"""Launch commands for an advised config (templates/launch/*.j2).

Single-node torchrun, multi-node torchrun (c10d), a Slurm sbatch script, and Megatron Bridge's
``scripts/training/run_recipe.py --recipe NAME --dataset PRESET key=value ...`` (its overrides, and
when it cannot be given: service/recommend/bridge_command.py).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from recipe_index.recipes import RecipeEntry
from service.recommend.bridge_command import (
    bridge_overrides,
    bridge_recipe_name,
    fine_tuning_checkpoint,
    uncarried_note,
)
from trainer.contract.dotted import get_dotted as _get

if TYPE_CHECKING:
    from jinja2 import Environment

TEMPLATES = Path(__file__).resolve().parents[2] / "templates" / "launch"
RENDEZVOUS_PORT = 29500
# Megatron Bridge's default dataset presets by goal.
DATASET_PRESET = {"pretrain": "mock", "sft": "squad", "peft": "squad"}
# Slurm reads #SBATCH lines itself, without a shell, so quoting cannot make a job name safe there.
_NOT_IN_JOB_NAMES = re.compile(r"[^A-Za-z0-9_.-]+")


def job_name(config: dict) -> str:
    """metadata.name as the Slurm job name (and log file stem) and the c10d rendezvous id: each run of
    characters outside [A-Za-z0-9_.-] becomes one "_", so it needs no quoting anywhere. The config's
    metadata.name itself is left as it is."""
    return _NOT_IN_JOB_NAMES.sub("_", str(_get(config, "metadata.name") or "")) or "recipe-advisor"


def _environment() -> Environment:
    # jinja2 is imported here: a command that renders no launch command (a tune answered from the runs store)
    # does not pay for it.
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    return Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined, autoescape=False,
                       keep_trailing_newline=True, trim_blocks=False)


def render_commands(config_path: str, config: dict, base: dict, request, engine: str,
                    recipe: Optional[RecipeEntry], gaps: tuple[str, ...] = (),
                    bridge_args: Optional[list[str]] = None) -> dict[str, str]:
    """Launch commands from templates/launch: single-node torchrun, multi-node torchrun (c10d),
    a Slurm sbatch script, and Megatron Bridge's run_recipe.py with key=value overrides. With
    ``gaps`` (see bridge_gaps) there is no Bridge command, and no torchrun of it. ``bridge_args``:
    those overrides, when the caller has them (bridge_command), else they are worked out here."""
    env = _environment()
    req = request
    common = {"nproc_per_node": req.gpus_per_node, "num_nodes": req.num_nodes, "port": RENDEZVOUS_PORT,
              "job_name": job_name(config),
              "config": shlex.quote(config_path)}
    bridge_recipe = None if gaps else bridge_recipe_name(base, recipe)
    bridge = None
    not_carried = ""  # the line naming the config's changes the Bridge program does not carry
    if bridge_recipe:
        not_carried = uncarried_note(base, config)
        dataset = shlex.quote(str(_get(config, "dataset.preset") or DATASET_PRESET[req.goal]))
        args = bridge_overrides(base, config) if bridge_args is None else list(bridge_args)
        bridge = (shlex.quote(bridge_recipe), dataset, args + fine_tuning_checkpoint(req.goal))
    if engine == "bundled":
        program = f"-m trainer {shlex.quote(config_path)}"
    elif bridge is not None:
        recipe_name, dataset, overrides = bridge
        program = " ".join(["scripts/training/run_recipe.py", "--recipe", recipe_name, "--dataset", dataset,
                            *overrides])
    else:
        program = None
    commands: dict[str, str] = {}
    # torchrun and sbatch run the Bridge program on the megatron engine; the bundled trainer reads it all.
    launched = {**common, "program": program, "not_carried": "" if engine == "bundled" else not_carried}
    if program is not None:
        if req.num_nodes == 1:
            commands["torchrun"] = env.get_template("torchrun.sh.j2").render(bundled=engine == "bundled", **launched)
        else:
            commands["torchrun_multinode"] = env.get_template("torchrun_multinode.sh.j2").render(**launched)
        commands["sbatch"] = env.get_template("sbatch.sh.j2").render(
            time_limit="04:00:00", script_name="train.sbatch", cpu=req.hardware.arch == "cpu", **launched)
    if bridge is not None:
        commands["megatron_bridge"] = env.get_template("megatron_bridge.sh.j2").render(
            recipe=bridge[0], dataset=bridge[1], overrides=bridge[2], not_carried=not_carried, **common)
    return commands
