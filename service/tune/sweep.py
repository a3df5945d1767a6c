"""A tune to run elsewhere: the same candidates written as a sweep (``--emit-sweep DIR``), read back (``--collect``).

The folder holds ``sweep.json`` (the request and one entry per trial), a folder per trial with its config and
``run.sh`` (one trial: plain torchrun on one node, or under ``srun`` on each node of a Slurm allocation), and
``commands.sh`` (every trial in turn) and ``sweep.sbatch`` (a Slurm job array, one task per trial). Engines:

- ``megatron``: the Megatron Bridge command `recommend` prints for the layout (``run_recipe.py --recipe ...``
  with its overrides) plus ``train.train_iters`` and ``logger.log_interval=1``, run from the user's
  Megatron-Bridge checkout (``MEGATRON_BRIDGE_DIR``), its output in the trial's ``megatron.log``;
- ``bundled``: the trial config with ``python -m trainer``, its metrics in the trial's ``training.jsonl``;
- ``automodel`` (``--emit automodel``): the NeMo AutoModel recipe of the layout with ``step_scheduler.max_steps``,
  run with AutoModel's CLI on one node; its metrics in the trial's ``training.jsonl``.

Collecting reads each trial's log with the runs store's readers (service.runs.ingest) and records it; a trial
without a log yet is listed as not run; an unreadable log is classified from its text (service.tune.outcome).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from service.configs.yamlio import plain_copy
from service.recommend.automodel_emit import automodel_runs
from service.recommend.recommendation import Prepared
from service.tune.candidates import Candidate, Candidates, Skipped
from service.tune.trials import candidate_config, dump, trial_config

MANIFEST = "sweep.json"
LOGS = {"megatron": "megatron.log", "bundled": "training.jsonl", "automodel": "training.jsonl"}
SCRIPT_HEAD = "#!/bin/bash\nset -euo pipefail\n"


@dataclass
class SweepTrial:
    index: int
    candidate: Candidate
    config_text: str
    program: str  # what run.sh runs in the trial folder


def _launcher(nproc: int) -> str:
    """torchrun on one node, or on each node of the Slurm allocation run.sh is started in (srun)."""
    return ('if [ -n "${SLURM_JOB_ID:-}" ] && [ "${SLURM_NNODES:-1}" -gt 1 ]; then\n'
            '  MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
            f'  LAUNCH="python -m torch.distributed.run --nnodes=$SLURM_NNODES --nproc-per-node={nproc} '
            '--rdzv-backend=c10d --rdzv-endpoint=${MASTER_ADDR}:29500 --rdzv-id=$SLURM_JOB_ID"\n'
            'else\n'
            f'  LAUNCH="python -m torch.distributed.run --standalone --nproc-per-node={nproc}"\n'
            'fi\n')


def bridge_program(torchrun: str, steps: int) -> str:
    """The Megatron Bridge program and overrides of recommend's torchrun command, with the trial's length."""
    line = next(line for line in torchrun.splitlines() if "run_recipe.py" in line)
    words = shlex.split(line)
    start = next(i for i, word in enumerate(words) if word.endswith("run_recipe.py"))
    return shlex.join(words[start:] + [f"train.train_iters={steps}", "logger.log_interval=1"])


def _torchrun(commands: dict) -> str:
    """recommend's torchrun command: the one-node one, else the multi-node one (the same program and overrides)."""
    return commands.get("torchrun") or commands["torchrun_multinode"]


def _automodel_trial(config: dict, steps: int) -> dict:
    trial = plain_copy(config)
    scheduler = trial.setdefault("step_scheduler", {})
    scheduler.update(max_steps=steps, val_every_steps=steps + 1, ckpt_every_steps=steps + 1)
    trial["checkpoint"] = {**(trial.get("checkpoint") or {}), "enabled": False}
    trial.pop("validation_dataset", None)
    return trial


def sweep_trials(prepared: Prepared, candidates: Candidates, engine: str, *, trials: int, steps: int,
                 warmup: int) -> tuple[list[SweepTrial], list[Skipped]]:
    """The first ``trials`` candidates the engine runs, as sweep trials; those it cannot run, with why."""
    out, skipped = [], []
    total = warmup + steps
    for candidate in candidates.trials:
        if len(out) == trials:
            break
        if engine == "automodel" and not automodel_runs(candidate.row, prepared.card):
            skipped.append(Skipped(candidate.label, "AutoModel's mesh does not run it (VP, ETP, or TP not dividing "
                                                    "the attention and KV heads)"))
            continue
        cfg = candidate_config(prepared, candidate, "trial.yaml", emit="automodel" if engine == "automodel" else
                               "recipe-advisor")
        if cfg.errors:
            skipped.append(Skipped(candidate.label, "; ".join(cfg.errors)[:300]))
            continue
        index = len(out) + 1
        header = [f"# tune sweep trial {index}: {candidate.label}, {warmup} warm-up + {steps} timed steps"]
        if engine == "megatron":
            program = "cd \"${MEGATRON_BRIDGE_DIR:?set MEGATRON_BRIDGE_DIR to your Megatron-Bridge checkout}\"\n" \
                      f"$LAUNCH {bridge_program(_torchrun(cfg.recommendation.commands), total)} " \
                      f"> \"$TRIAL/{LOGS['megatron']}\" 2>&1\n"
            text = dump(cfg.config, header)
        elif engine == "automodel":
            program = f"automodel trial.yaml --nproc-per-node {prepared.request.gpus_per_node}\n"
            text = dump(_automodel_trial(cfg.config, total), header)
        else:
            program = "$LAUNCH -m trainer trial.yaml\n"
            text = dump(trial_config(cfg.config, steps=steps, warmup=warmup), header)
        out.append(SweepTrial(index, candidate, text, program))
    return out, skipped


def trial_folder(trial: SweepTrial) -> str:
    return f"trial-{trial.index:02d}"


def run_script(prepared: Prepared, trial: SweepTrial) -> str:
    """The trial's ``run.sh``: from its own folder, torchrun (or srun + torchrun) running its program."""
    return (SCRIPT_HEAD + 'TRIAL="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\ncd "$TRIAL"\n'
            + _launcher(prepared.request.gpus_per_node) + trial.program)


def manifest_entry(trial: SweepTrial, engine: str) -> dict:
    name = trial_folder(trial)
    return {"index": trial.index, "folder": name, "layout": trial.candidate.label,
            "kind": trial.candidate.kind, "why": trial.candidate.why,
            "estimate_tokens_per_s_per_gpu": round(trial.candidate.estimated_tokens_per_s_per_gpu, 1),
            "command": f"bash {name}/run.sh", "log": f"{name}/{LOGS[engine]}"}


def commands_script(entries: list[dict]) -> str:
    """``commands.sh``: every trial in turn, a failed one reported and passed over."""
    return SCRIPT_HEAD + 'cd "$(dirname "${BASH_SOURCE[0]}")"\n' + "".join(
        f"{e['command']} || echo \"trial {e['index']} failed: see {e['log']}\"\n" for e in entries)


def sbatch_script(prepared: Prepared, trials: int) -> str:
    """``sweep.sbatch``: a Slurm job array, one task per trial, one at a time."""
    req = prepared.request
    gpus = "" if req.hardware.arch == "cpu" else f"#SBATCH --gpus-per-node={req.gpus_per_node}\n"
    return ("#!/bin/bash\n#SBATCH --job-name=tune-" + req.model.id + f"\n#SBATCH --array=1-{trials}%1\n"
            f"#SBATCH --nodes={req.num_nodes}\n#SBATCH --ntasks-per-node=1\n{gpus}#SBATCH --exclusive\n"
            "#SBATCH --time=00:30:00\n#SBATCH --output=slurm-%A_%a.out\n"
            "# Submit from this folder: sbatch sweep.sbatch   (add --account/--partition for your cluster;\n"
            "# %1 runs one trial at a time, so trials do not share the GPUs)\n"
            "set -euo pipefail\n"
            'srun bash "$(printf "trial-%02d" "$SLURM_ARRAY_TASK_ID")/run.sh"\n')


def write_sweep(folder: Path, prepared: Prepared, trials: list[SweepTrial], engine: str, *, steps: int,
                warmup: int) -> dict:
    """Write the sweep (module docstring); returns the manifest it wrote."""
    folder.mkdir(parents=True, exist_ok=True)
    req = prepared.request
    entries = []
    for trial in trials:
        sub = folder / trial_folder(trial)
        sub.mkdir(exist_ok=True)
        (sub / "trial.yaml").write_text(trial.config_text, encoding="utf-8")
        (sub / "run.sh").write_text(run_script(prepared, trial), encoding="utf-8")
        (sub / "run.sh").chmod(0o755)
        entries.append(manifest_entry(trial, engine))
    manifest = {"engine": engine, "model": req.model.id, "gpu_type": req.hardware.name,
                "gpus_per_node": req.gpus_per_node, "nodes": req.num_nodes, "goal": prepared.goal,
                "seq_length": req.seq_length, "global_batch_size": req.global_batch_size, "steps": steps,
                "warmup": warmup, "trials": entries}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    (folder / "commands.sh").write_text(commands_script(entries), encoding="utf-8")
    (folder / "sweep.sbatch").write_text(sbatch_script(prepared, len(entries)), encoding="utf-8")
    return manifest


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no sweep here; write one with `tune --emit-sweep {folder}`")
    return json.loads(path.read_text(encoding="utf-8"))


def collect_trial(folder: Path, manifest: dict, entry: dict):
    """The RunRecord of one trial's log, or None when it has not run; a log the readers refuse is classified
    from its text."""
    from service.runs.errors import RunInputError
    from service.runs.ingest import from_megatron_log, from_run_dir
    from service.runs.schema import RunRecord
    from service.tune.outcome import classify

    sub = folder / entry["folder"]
    log = folder / entry["log"]
    if not log.is_file():
        return None
    engine = manifest["engine"]
    try:
        if engine == "megatron":
            return from_megatron_log(log, model=manifest["model"], gpu_type=manifest["gpu_type"],
                                     gpus_per_node=manifest["gpus_per_node"])
        return from_run_dir(sub, config=sub / "trial.yaml", engine=engine, drop_torn_tail=True)
    except RunInputError as exc:
        text = log.read_text(encoding="utf-8", errors="replace")
        ending = classify(1, text)
        detail = ending.detail if ending.outcome != "crashed" else f"{ending.detail} ({exc})"
        return RunRecord.model_validate({
            "provenance": {"engine": engine},
            "request": {"model": manifest["model"], "gpu_type": manifest["gpu_type"],
                        "gpus_per_node": manifest["gpus_per_node"], "nodes": manifest["nodes"],
                        "goal": manifest["goal"], "seq_length": manifest["seq_length"],
                        "global_batch_size": manifest["global_batch_size"]},
            "outcome": ending.outcome, "outcome_detail": (detail or "")[:4000],
            "reproduce": {"log_path": str(log)}})


def label_of(entry: dict) -> str:
    return entry["layout"]


def estimate_of(entry: dict) -> Optional[float]:
    return entry.get("estimate_tokens_per_s_per_gpu")
