"""Context parallel's memory and pipeline parallel's bubble in the bundled trainer, on CPU (gloo), each against a
reference run in the same script.

- CP memory: one optimizer step at a long sequence on 2 processes, measured per rank by
  trainer/components/memory_probe.py (benchmarks/estimate_vs_measured.py's worker): CP=2 (each rank holds half of
  one sequence) against CP=1 with DP=2 (each rank a whole sequence; FSDP2 shards the same training state over the
  same 2 ranks, so only the activations differ). Peak per process = weights + gradients + optimizer states + the
  most activation bytes alive at once + FSDP2's unsharded parameters.
- PP step time: the trainer's own step time (training.jsonl) of PP=2 with 1F1B over M micro batches on 2 processes
  against one process running one stage's worth of the model (half the layers, same batch) without a pipeline:
  its step is M stage times. The planner predicts the pipelined step at (M + bubble) stage times, bubble =
  service.estimate.steptime.pipeline_bubble (PP-1 for 1F1B); the ratio measured / predicted is reported. The
  whole model on one process is shown too (ideally 2 M stage times).

Run: .venv/bin/python benchmarks/context_pipeline_cpu.py [--cp-seq 16384] [--pp-steps 8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

CP_SHAPE = dict(vocab_size=8192, hidden_size=256, intermediate_size=768, num_hidden_layers=2,
                num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=65536, rope_theta=500000.0)
PP_SHAPE = dict(vocab_size=512, hidden_size=256, intermediate_size=768, num_hidden_layers=8,
                num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096)
PP_SEQ, PP_MICRO_BATCHES = 256, 4


def write_model(folder: Path, shape: dict) -> Path:
    from trainer.models.config import DecoderConfig

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(DecoderConfig(**shape).to_hf(), indent=1))
    return folder


def cp_config(model_dir: Path, out_dir: Path, seq: int, cp: int) -> dict:
    return {
        "model": {"pretrained_model_name_or_path": str(model_dir)},
        "step_scheduler": {"global_batch_size": 2 // cp, "local_batch_size": 1, "max_steps": 1},
        "distributed": {"strategy": "fsdp2", "cp_size": cp, "activation_checkpointing": "none"},
        "dataset": {"_target_": "trainer.data.MockDataset", "seq_length": seq, "num_samples": 8},
        "optimizer": {"_target_": "torch.optim.AdamW", "lr": 1e-4},
        "checkpoint": {"enabled": False, "checkpoint_dir": str(out_dir)},
        "precision": "fp32",
        "hardware": {"gpu_type": "cpu", "gpus_per_node": 2},
    }


def peak_bytes(measured: dict) -> int:
    return (measured["weights"] + measured["grads"] + measured["optimizer"] + measured["activations_peak"]
            + measured["fsdp_unsharded"])


def context_parallel_memory(seq: int) -> dict:
    from estimate_vs_measured import measure

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_model(Path(tmp) / "model", CP_SHAPE)
        for cp in (1, 2):
            folder = Path(tmp) / f"cp{cp}"
            folder.mkdir()
            rows[cp] = measure(cp_config(model_dir, folder / "out", seq, cp), 2, folder)
    return rows


def trainer_step_seconds(config: dict, folder: Path, nproc: int) -> list[float]:
    path = folder / "config.yaml"
    path.write_text(json.dumps(config))
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    launcher = ([sys.executable] if nproc == 1 else
                [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--standalone"])
    out = subprocess.run(launcher + ["-m", "trainer", str(path)], cwd=folder, env=env, capture_output=True, text=True,
                         timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"training failed ({out.returncode}):\n{out.stderr[-3000:]}")
    rows = [json.loads(line) for line in (folder / "ckpt" / "training.jsonl").read_text().splitlines()]
    tokens = config["step_scheduler"]["global_batch_size"] * config["dataset"]["seq_length"]
    return [tokens / row["tps"] for row in rows[1:]]  # the first step pays for set-up and first-call costs


def pp_config(model_dir: Path, steps: int, pp: int) -> dict:
    return {
        "model": {"pretrained_model_name_or_path": str(model_dir)},
        "step_scheduler": {"global_batch_size": PP_MICRO_BATCHES, "local_batch_size": 1, "max_steps": steps,
                           "log_interval": 1},
        "distributed": {"strategy": "fsdp2", "pp_size": pp, "backend": "gloo"},
        "dataset": {"_target_": "trainer.data.MockDataset", "seq_length": PP_SEQ, "num_samples": 256},
        "optimizer": {"_target_": "torch.optim.AdamW", "lr": 1e-4},
        "checkpoint": {"enabled": False, "checkpoint_dir": "ckpt"},
        "precision": "fp32",
        "hardware": {"gpu_type": "cpu", "gpus_per_node": pp},
    }


def pipeline_step_time(steps: int) -> dict:
    from service.estimate.steptime import pipeline_bubble

    with tempfile.TemporaryDirectory() as tmp:
        whole = write_model(Path(tmp) / "whole", PP_SHAPE)
        half = write_model(Path(tmp) / "half", dict(PP_SHAPE, num_hidden_layers=PP_SHAPE["num_hidden_layers"] // 2))
        times = {}
        for name, model_dir, pp in (("stage", half, 1), ("pipelined", whole, 2), ("whole", whole, 1)):
            folder = Path(tmp) / f"run_{name}"
            folder.mkdir()
            times[name] = min(trainer_step_seconds(pp_config(model_dir, steps, pp), folder, pp))
    stage = times["stage"] / PP_MICRO_BATCHES
    predicted = (PP_MICRO_BATCHES + pipeline_bubble(2, 1, PP_MICRO_BATCHES)) * stage
    return {**times, "predicted": predicted, "ratio": times["pipelined"] / predicted}


def pipeline_bubble_text() -> str:
    from service.estimate.steptime import pipeline_bubble

    return f"{pipeline_bubble(2, 1, PP_MICRO_BATCHES):g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cp-seq", type=int, default=16384)
    parser.add_argument("--pp-steps", type=int, default=8)
    parser.add_argument("--skip", choices=["cp", "pp"], action="append", default=[])
    parser.add_argument("--smoke", action="store_true",
                        help="the same code path in seconds (the suite runs it): CP at seq 256, PP for 2 steps, "
                             "hidden 64")
    args = parser.parse_args()
    if args.smoke:  # every launch of both parts, on models of hidden 64
        args.cp_seq, args.pp_steps = 256, 2
        for shape in (CP_SHAPE, PP_SHAPE):
            shape.update(hidden_size=64, intermediate_size=192, num_attention_heads=4, num_key_value_heads=2)
        PP_SHAPE.update(num_hidden_layers=2)
    if "cp" not in args.skip:
        rows = context_parallel_memory(args.cp_seq)
        mib = {cp: {k: v / 2**20 for k, v in row.items()} for cp, row in rows.items()}
        print(f"CP memory, seq {args.cp_seq}, 2 processes, fp32 (MiB per process, the fullest rank)")
        print("| term | CP=1 x DP=2 | CP=2 | ratio |")
        print("|---|---|---|---|")
        for term in ("weights", "grads", "optimizer", "activations", "activations_peak", "fsdp_unsharded"):
            ratio = mib[2][term] / mib[1][term] if mib[1][term] else float("nan")
            print(f"| {term} | {mib[1][term]:.1f} | {mib[2][term]:.1f} | {ratio:.2f} |")
        print(f"| peak per process | {peak_bytes(rows[1]) / 2**20:.1f} | {peak_bytes(rows[2]) / 2**20:.1f} | "
              f"{peak_bytes(rows[2]) / peak_bytes(rows[1]):.2f} |")
    if "pp" not in args.skip:
        pp = pipeline_step_time(args.pp_steps)
        print(f"\nPP=2 1F1B, {PP_MICRO_BATCHES} micro batches of {PP_SEQ} tokens, 8 layers (fastest step of a run, s)")
        print("| run | step (s) |\n|---|---|")
        print(f"| one process, half the layers (M stage times) | {pp['stage']:.3f} |")
        print(f"| one process, the whole model | {pp['whole']:.3f} |")
        print(f"| PP=2 1F1B, 2 processes | {pp['pipelined']:.3f} |")
        print(f"| planner: (M + {pipeline_bubble_text()}) stage times | {pp['predicted']:.3f} |")
        print(f"\nmeasured / predicted: {pp['ratio']:.2f}")


if __name__ == "__main__":
    main()
