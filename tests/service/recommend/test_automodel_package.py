"""Optional: the emitted AutoModel YAML read by nemo-automodel's own parser and config classes.

Skipped unless nemo-automodel is installed (``pip install nemo-automodel``; it is not a dev dependency: it pins
its own transformers and pulls CUDA and Triton packages). Its loader resolves every ``_target_`` while it reads a
file, and some of its modules compile GPU kernels at import, so on a CPU machine the whole-file load may fail:
each part is checked on its own and what could not be checked is named in a warning.
"""

from __future__ import annotations

import inspect
import warnings

import pytest
import yaml

from service.recommend.recommendation import recommend

automodel = pytest.importorskip("nemo_automodel", reason="nemo-automodel is not installed (optional check)")

REQUESTS = [("llama32-1b", 8, "sft"), ("llama32-1b", 8, "peft"), ("llama32-1b", 8, "pretrain"),
            ("qwen3-30b-a3b", 16, "sft")]


def _targets(node, key=""):
    if isinstance(node, dict):
        if "_target_" in node:
            yield key, node["_target_"], {k: v for k, v in node.items() if k != "_target_"}
        for name, value in node.items():
            yield from _targets(value, f"{key}.{name}" if key else name)


def _resolve(target: str):
    """AutoModel's own resolver (its allow-list and attribute rules), or why it could not run here."""
    from nemo_automodel.components.config.loader import _resolve_target

    try:
        return _resolve_target(target), None
    except ImportError as err:
        if "cannot resolve attribute" in str(err):
            raise  # the module imported and the name is not in it: the emitted target is wrong
        return None, f"{target}: {type(err).__name__}"
    except Exception as err:  # a GPU kernel compiled at import, a missing CUDA library
        return None, f"{target}: {type(err).__name__}: {str(err)[:80]}"


@pytest.mark.parametrize("model, gpus, goal", REQUESTS)
def test_emitted_yaml_reads_in_automodels_classes(model, gpus, goal, tmp_path):
    from nemo_automodel.components.config.loader import load_yaml_config
    from nemo_automodel.components.training.step_scheduler import StepScheduler
    from nemo_automodel.recipes._dist_utils import parse_distributed_section

    rec = recommend(model, gpus, "h100", goal=goal, emit="automodel")
    path = tmp_path / "recipe.yaml"
    path.write_text(rec.config_yaml)
    data = yaml.safe_load(rec.config_yaml)
    unchecked = []

    parsed = parse_distributed_section(dict(data["distributed"]))
    dist = data["distributed"]
    for size in ("tp_size", "pp_size", "cp_size", "ep_size"):
        assert parsed[size] == dist[size], size
    assert type(parsed["strategy_config"]).__name__ == "FSDP2Config"
    assert (parsed["pipeline_config"] is not None) == (dist["pp_size"] > 1)

    dp = gpus // (dist["tp_size"] * dist["cp_size"] * dist["pp_size"])
    scheduler = data["step_scheduler"]
    steps = StepScheduler(global_batch_size=scheduler["global_batch_size"],
                          local_batch_size=scheduler["local_batch_size"], dp_size=dp, dataloader=None,
                          max_steps=scheduler["max_steps"])
    assert steps.grad_acc_steps >= 1

    for key, target, kwargs in _targets(data):
        if key == "recipe":
            continue
        resolved, why = _resolve(target)
        if resolved is None:
            unchecked.append(why)
            continue
        params = inspect.signature(resolved).parameters
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            assert set(kwargs) <= set(params), f"{key}: {set(kwargs) - set(params)} not taken by {target}"

    try:
        load_yaml_config(str(path))
    except Exception as err:  # its loader imports every target: one that needs a GPU stops the whole file here
        unchecked.append(f"the whole-file load ({type(err).__name__}: {str(err)[:80]})")
    if unchecked:
        warnings.warn(f"{model} {goal}: not checked on this machine: {'; '.join(unchecked)}", stacklevel=1)
