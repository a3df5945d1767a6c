"""The ways in that read files: a bundled (or AutoModel) run folder, and the checks every way in applies.

``prepared(record)`` is what each way in stores: the model and GPU type in canonical names, the planner's
estimate of the layout beside the measurement.
"""

from __future__ import annotations

import json
import os
import platform
import re
from importlib import metadata
from pathlib import Path
from typing import Optional

import yaml
from pydantic import ValidationError

from service.runs.bundled import METRICS_FILE, read_metrics, record_from_metrics
from service.runs.checks import checked, known_gpu_type
from service.runs.errors import RunInputError, from_validation
from service.runs.estimate import with_estimate
from service.runs.schema import MAX_CONFIG_CHARS, RunRecord

CLUSTER_ENV, TEAM_ENV = "RECIPE_ADVISOR_CLUSTER", "RECIPE_ADVISOR_TEAM"
# Environment variables that change a run's speed: kept with it so it can be run again at that speed. Inductor's
# cache folder is a local path (torch sets it itself once it compiles), not a setting: it is left out.
SPEED_ENV = re.compile(r"^(NCCL_|NVTE_|TORCH_NCCL_|UCX_|FI_|CUDA_DEVICE_MAX_CONNECTIONS$|OMP_NUM_THREADS$|"
                       r"PYTORCH_CUDA_ALLOC_CONF$|CUDA_LAUNCH_BLOCKING$|TORCHINDUCTOR_(?!CACHE_DIR$))")
SOFTWARE = ("torch", "recipe-advisor", "megatron-core", "megatron-bridge", "nemo-automodel", "transformer-engine")


def prepared(record: RunRecord) -> RunRecord:
    return with_estimate(checked(record))


def speed_env(environ: Optional[dict] = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {key: value[:256] for key, value in sorted(environ.items()) if SPEED_ENV.match(key)}


def software_here() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in SOFTWARE:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def driver_here() -> Optional[str]:
    try:
        first = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    match = re.search(r"Kernel Module\s+([\d.]+)", first)
    return match.group(1) if match else first[:200]


def labels(cluster: Optional[str] = None, team: Optional[str] = None) -> dict:
    """The cluster and team labels: as given, else RECIPE_ADVISOR_CLUSTER / RECIPE_ADVISOR_TEAM."""
    return {"cluster": cluster or os.environ.get(CLUSTER_ENV) or None, "team": team or os.environ.get(TEAM_ENV) or None}


def read_config(path: Path) -> tuple[dict, str]:
    """A YAML config as data (safe loader: a config from others runs no code) and its text."""
    if not path.is_file():
        raise RunInputError(str(path), "no such config file", "pass the YAML the run was launched with")
    text = path.read_text(encoding="utf-8", errors="replace")
    if len(text) > MAX_CONFIG_CHARS:
        raise RunInputError(str(path), f"larger than {MAX_CONFIG_CHARS >> 10} KiB", "is this a config?")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise RunInputError(where, f"not readable YAML ({getattr(exc, 'problem', exc)})", "fix the YAML") from None
    if not isinstance(data, dict):
        raise RunInputError(str(path), "not a YAML mapping", "pass the run's config file")
    return data, text


def run_config(run_dir: Path, config: Optional[Path]) -> Path:
    """The config of a run folder: as given, else the one its newest checkpoint keeps (config.yaml)."""
    if config is not None:
        return config
    kept = sorted(run_dir.glob("epoch_*_step_*/config.yaml"), key=lambda p: p.stat().st_mtime)
    if not kept:
        raise RunInputError(str(run_dir), "holds no checkpoint with its config.yaml",
                            "pass the config the run was launched with: --config CFG")
    return kept[-1]


def from_run_dir(run_dir: Path, *, config: Optional[Path] = None, engine: str = "bundled",
                 outcome: str = "completed", drop_torn_tail: bool = False, gpus_per_node: Optional[int] = None,
                 nodes: Optional[int] = None, provenance: Optional[dict] = None,
                 reproduce: Optional[dict] = None) -> RunRecord:
    """A run folder (its ``training.jsonl`` and config) as a prepared RunRecord."""
    metrics_path = run_dir / METRICS_FILE if run_dir.is_dir() else run_dir
    records = read_metrics(metrics_path, drop_torn_tail=drop_torn_tail or outcome != "completed")
    data, text = read_config(run_config(run_dir, config))
    try:
        record = record_from_metrics(records, data, engine=engine, gpus_per_node=gpus_per_node, nodes=nodes,
                                     config_text=text, outcome=outcome, provenance=provenance or {},
                                     reproduce={"log_path": str(metrics_path), **(reproduce or {})})
    except ValidationError as exc:
        raise from_validation(exc) from None
    return prepared(record)


def from_megatron_log(log_path: Path, *, config: Optional[Path] = None, model: Optional[str] = None,
                      gpu_type: Optional[str] = None, gpus_per_node: Optional[int] = None,
                      outcome: Optional[str] = None, provenance: Optional[dict] = None) -> RunRecord:
    """A Megatron-LM / Megatron Bridge log (and optionally its config) as a prepared RunRecord."""
    from service.runs.megatron_log import find_key, read_log, record_data

    log = read_log(log_path)
    data, text = read_config(config) if config is not None else (None, None)
    gpu_type = gpu_type or (find_key(data, "gpu_type") if data else None)
    if not gpu_type:
        raise RunInputError("request.gpu_type", "a Megatron log does not name its GPU type",
                            "pass --gpu-type (e.g. h100)")
    fields = record_data(log, data, model=model, gpu_type=known_gpu_type(gpu_type), gpus_per_node=gpus_per_node,
                         source=str(log_path))
    if outcome is not None:
        fields["outcome"], fields["outcome_detail"] = outcome, None
    try:
        record = RunRecord.model_validate({**fields, "config_text": text,
                                           "provenance": {"engine": "megatron", **(provenance or {})},
                                           "reproduce": {"log_path": str(log_path)}})
    except ValidationError as exc:
        raise from_validation(exc) from None
    return prepared(record)


def from_json(path: Path) -> list[RunRecord]:
    """Runs as `runs export` writes them (a list) or one run (an object), each checked as any way in checks it;
    ids and recording times are the store's and are dropped."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RunInputError(str(path), f"not readable JSON ({exc})", "pass a file `runs export` wrote") from None
    items = data if isinstance(data, list) else [data]
    records = []
    for index, item in enumerate(items):
        if isinstance(item, dict):
            item = {k: v for k, v in item.items() if k not in ("id", "recorded_at")}
        try:
            records.append(prepared(RunRecord.model_validate(item)))
        except ValidationError as exc:
            raise from_validation(exc, prefix=f"{path}[{index}].") from None
    return records
