"""Sweeps: the trials written for Megatron Bridge, NeMo AutoModel and the bundled trainer, and read back."""

import json

import yaml

from service.cli.app import main
from service.runs.store import RunsStore

LLAMA_8B = ["tune", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "--engine", "megatron",
            "--trials", "4", "--steps", "8", "--warmup", "2"]
ITERATION = (" [2025-06-01 10:0{i}:00.000000] iteration {i:>8}/{n:>8} | consumed samples: {s:>12} | elapsed time per "
             "iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): 300.0 | learning rate: 3.000000E-05 | "
             "global batch size: {gbs:>5} | lm loss: 1.000000E+01 | loss scale: 1.0 | grad norm: 1.000 | number of "
             "skipped iterations:   0 | number of nan iterations:   0 |")


def megatron_log(config: dict, step_ms: float, iterations: int = 10) -> str:
    """A Megatron-LM log (arguments block, then one iteration line per step) of a trial's config."""
    d, s = config["distributed"], config["step_scheduler"]
    args = {"tensor_model_parallel_size": d.get("tp_size", 1), "pipeline_model_parallel_size": d.get("pp_size", 1),
            "virtual_pipeline_model_parallel_size": d.get("vp_size"), "context_parallel_size": d.get("cp_size", 1),
            "expert_model_parallel_size": 1, "micro_batch_size": s["local_batch_size"],
            "global_batch_size": s["global_batch_size"], "seq_length": config["dataset"]["seq_length"],
            "world_size": 8, "train_iters": iterations, "bf16": True, "use_distributed_optimizer": True,
            "recompute_granularity": d.get("activation_checkpointing")}
    lines = ["------------------------ arguments ------------------------"]
    lines += [f"  {key} {'.' * (48 - len(key))} {value}" for key, value in sorted(args.items())]
    lines += ["-------------------- end of arguments ---------------------", "training ..."]
    gbs = s["global_batch_size"]
    lines += [ITERATION.format(i=i, n=iterations, s=i * gbs, ms=step_ms * (3 if i == 1 else 1), gbs=gbs)
              for i in range(1, iterations + 1)]
    return "\n".join(lines) + "\n"


def test_a_megatron_sweep_is_written_then_collected_and_the_measured_fastest_kept(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    assert main([*LLAMA_8B, "--emit-sweep", str(sweep), "--format", "json"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    assert [t["index"] for t in manifest["trials"]] == [1, 2, 3, 4]
    run = (sweep / "trial-02" / "run.sh").read_text()
    assert "run_recipe.py --recipe" in run and "train.train_iters=10" in run and "logger.log_interval=1" in run
    assert '> "$TRIAL/megatron.log"' in run
    assert "--array=1-4" in (sweep / "sweep.sbatch").read_text()
    assert (sweep / "commands.sh").read_text().count("bash trial-") == 4

    configs = {t["index"]: yaml.safe_load((sweep / t["folder"] / "trial.yaml").read_text())
               for t in manifest["trials"]}
    (sweep / "trial-01" / "megatron.log").write_text(megatron_log(configs[1], 2000.0))
    (sweep / "trial-02" / "megatron.log").write_text(megatron_log(configs[2], 1500.0))  # measured fastest
    (sweep / "trial-03" / "megatron.log").write_text(
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB.\n")
    db = str(tmp_path / "runs.sqlite")
    output = tmp_path / "best.yaml"
    assert main([*LLAMA_8B, "--collect", str(sweep), "--db", db, "-o", str(output), "--format", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["best"]["index"] == 2
    assert {t["index"]: t["outcome"] for t in answer["trials"]} == {1: "completed", 2: "completed",
                                                                     3: "out_of_memory"}
    assert "1 not run yet" in answer["stop_reason"]
    assert yaml.safe_load(output.read_text())["distributed"] == configs[2]["distributed"]
    with RunsStore(db) as store:
        assert sorted(r.outcome for r in store.query(engine="megatron")) == ["completed", "completed",
                                                                             "out_of_memory"]


def test_an_automodel_sweep_runs_automodel_with_the_trial_length(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    assert main(["tune", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--trials", "2", "--steps", "6",
                 "--warmup", "2", "--emit", "automodel", "--emit-sweep", str(sweep)]) == 0
    assert "wrote 2 automodel trial(s)" in capsys.readouterr().out
    trial = yaml.safe_load((sweep / "trial-01" / "trial.yaml").read_text())
    assert trial["step_scheduler"]["max_steps"] == 8
    assert "automodel trial.yaml --nproc-per-node 2" in (sweep / "trial-01" / "run.sh").read_text()


def test_a_bundled_sweep_collects_the_trainers_metrics(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    request = ["tune", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--trials", "2", "--steps", "4",
               "--warmup", "1"]
    assert main([*request, "--emit-sweep", str(sweep)]) == 0
    assert "$LAUNCH -m trainer trial.yaml" in (sweep / "trial-01" / "run.sh").read_text()
    tokens = 16 * 64
    records = [{"step": i, "epoch": 0, "loss": 6.0, "grad_norm": 1.0, "lr": 1e-3, "mem": 0.3,
                "tps": tokens / 0.05, "mfu": None} for i in range(1, 6)]
    (sweep / "trial-02" / "training.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    capsys.readouterr()
    assert main([*request, "--collect", str(sweep), "--no-store", "--format", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["best"]["index"] == 2
    assert answer["best"]["measured_tokens_per_s_per_gpu"] == tokens / 0.05 / 2


def test_collecting_a_sweep_of_another_request_is_refused(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    assert main([*LLAMA_8B, "--emit-sweep", str(sweep)]) == 0
    capsys.readouterr()
    assert main(["tune", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--collect", str(sweep)]) == 2
    assert "written for llama3-8b" in capsys.readouterr().err


def test_engines_tune_does_not_launch_here_ask_for_a_sweep(capsys):
    assert main(["tune", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "--engine", "megatron"]) == 2
    assert "--emit-sweep DIR" in capsys.readouterr().err
    assert main(["tune", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--emit", "automodel"]) == 2
    assert "only as a sweep" in capsys.readouterr().err


def test_a_multi_node_megatron_sweep_runs_the_recipe_on_every_node(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    two_nodes = [*LLAMA_8B[:4], "16", *LLAMA_8B[5:]]
    assert main([*two_nodes, "--trials", "1", "--emit-sweep", str(sweep)]) == 0
    run = (sweep / "trial-01" / "run.sh").read_text()
    assert "run_recipe.py --recipe" in run and "--nnodes=$SLURM_NNODES" in run
    assert "#SBATCH --nodes=2" in (sweep / "sweep.sbatch").read_text()
