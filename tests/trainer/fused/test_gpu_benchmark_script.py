"""benchmarks/gpu: the one-call GPU benchmark, exercised where it can run here (CPU, dry run, smoke).

tests/test_gpu_bench_parts.py holds its pieces (wheel selection, the throughput row, the summary)
to their contracts without processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.paths import REPO

GPU = REPO / "benchmarks" / "gpu"
PUBLISHED = REPO / "recipe_index" / "data" / "published_throughput.json"


def _env(**extra) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), PYTHON=sys.executable)
    env.pop("OUT", None)
    env.pop("GPU_BENCH_MODE", None)
    env.update(extra)
    return env


def test_bench_runs_the_recipe_and_reports_against_the_planner(tmp_path) -> None:
    out = subprocess.run([sys.executable, str(GPU / "bench.py"), "--device", "cpu", "--tiny", "--steps", "2",
                          "--warmup", "1", "--batch", "2", "--seq", "32", "--no-compile"],
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "tokens/s:" in out.stdout and "planner estimate" in out.stdout
    report = json.loads(out.stdout.split("RESULT ", 1)[1])
    assert report["steps_timed"] == 2 and report["tokens_per_s"] > 0 and report["seq"] == 32
    assert report["planner"]["memory_gib"]["total"] > 0 and report["peak_allocated_gib"] > 0
    assert report["complete"] and report["stopped_by"] is None
    assert report["environment"]["torch"] and report["kernels"] == {"blocks": "torch", "loss": "torch"}


def test_smoke_writes_the_report_and_a_published_throughput_row(tmp_path) -> None:
    out = subprocess.run([sys.executable, str(GPU / "bench.py"), "--smoke", "--out-dir", str(tmp_path), "--name",
                          "smoke"], env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "smoke.json").read_text())
    assert report["device"] == "cpu" and report["steps_timed"] == 2 and report["warmup_steps"] == 1
    assert len(report["step_seconds"]) == 3 and report["complete"]
    estimate = report["planner"]  # its MFU at the trainer's FLOPs count, to compare with the measured one
    assert estimate["mfu_at_trainer_flops"] / estimate["tokens_per_s_per_gpu"] == \
        pytest.approx(report["mfu"] / report["tokens_per_s"])
    rows = json.loads((tmp_path / "throughput_rows.json").read_text())
    published_keys = set(json.loads(PUBLISHED.read_text())[0])
    assert len(rows) == 1 and published_keys <= set(rows[0])
    assert rows[0]["engine"] == "bundled" and rows[0]["tokens_per_s_per_gpu"] == round(report["tokens_per_s"], 1)


def test_the_time_budget_ends_a_long_run_with_its_figures(tmp_path) -> None:
    # No warm-up: however long the setup takes on a loaded machine, the step that meets the deadline is timed.
    out = subprocess.run([sys.executable, str(GPU / "bench.py"), "--device", "cpu", "--tiny", "--no-compile",
                          "--steps", "100000", "--warmup", "0", "--batch", "2", "--seq", "32", "--time-budget", "14",
                          "--out-dir", str(tmp_path)], env=_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "dense-bf16.json").read_text())
    assert not report["complete"] and report["stopped_by"].startswith("time budget: stopped after step")
    assert 0 < report["steps_timed"] < 100000 and report["tokens_per_s"] > 0
    row = json.loads((tmp_path / "throughput_rows.json").read_text())[0]
    assert "incomplete: time budget" in row["note"]


def test_kernel_check_passes_on_cpu(tmp_path) -> None:
    out = subprocess.run([sys.executable, str(GPU / "bench.py"), "--device", "cpu", "--check-kernels", "--out-dir",
                          str(tmp_path)], env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert out.stdout.count(" ok") == 4 and "FAIL" not in out.stdout
    result = json.loads((tmp_path / "kernel_check.json").read_text())
    assert result["ok"] and {r["op"] for r in result["results"]} == {"rms_norm", "silu_mul", "rotary",
                                                                      "linear_cross_entropy"}


def _dry_run(tmp_path, *args, **env) -> list[str]:
    out = subprocess.run(["bash", str(GPU / "run.sh"), "--dry-run", *args], env=_env(**env), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.splitlines()


def test_dry_run_on_the_lent_machine_installs_only_what_is_missing_and_nothing_yet(tmp_path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    # One wheel of a package this interpreter lacks, one of a package it has in a newer version.
    (wheels / "lacked_by_this_python-1.0-py3-none-any.whl").write_bytes(b"")
    (wheels / "pyyaml-1.0-py3-none-any.whl").write_bytes(b"")
    site, out_dir = tmp_path / "site", tmp_path / "out"
    lines = _dry_run(tmp_path, "--steps", "10", GPU_BENCH_MODE="machine", WHEELS=str(wheels), SITE=str(site),
                     OUT=str(out_dir))
    text = "\n".join(lines)
    installs = [line for line in lines if " -m pip install " in line]
    assert len(installs) == 1 and f"--no-index --no-deps --no-compile --no-cache-dir --upgrade --target {site}" \
        in installs[0]
    assert "lacked_by_this_python-1.0" in installs[0] and "pyyaml" not in installs[0]
    assert " -m venv " not in text and "requirements.txt" not in text  # the machine's torch, no virtualenv
    assert any("kernel_check.py --device cuda --out-dir " + str(out_dir) in line for line in lines)
    dense = next(line for line in lines if "--name dense-bf16" in line)
    assert dense.startswith("+ timeout ") and "--time-budget" in dense and dense.endswith("--steps 10")
    moe = next(line for line in lines if "--name moe-bf16" in line)
    assert "--model qwen3-30b-a3b --layers 4 --no-compile" in moe and moe.endswith("--steps 10")
    assert any("--name dense-fp8" in line and "--fp8" in line for line in lines)
    assert any("--name dense-profile" in line and "--profile" in line for line in lines)
    assert "== done" in text and "300 s" in text  # the call's own budget: 300 s, room for a second call
    assert not site.exists() and not out_dir.exists()  # a dry run installs and writes nothing


def test_dry_run_without_pip_unpacks_the_wheels(tmp_path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=120)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "lacked_by_this_python-1.0-py3-none-any.whl").write_bytes(b"")
    lines = _dry_run(tmp_path, GPU_BENCH_MODE="machine", WHEELS=str(wheels), SITE=str(tmp_path / "site"),
                     PYTHON=str(tmp_path / "bare" / "bin" / "python"))
    assert any(line.startswith("no pip: unpacking the wheels") for line in lines)
    assert any(" -m zipfile -e " in line and "lacked_by_this_python-1.0" in line for line in lines)
    assert not any(" -m pip install " in line for line in lines) and not (tmp_path / "site").exists()


def test_dry_run_elsewhere_builds_a_virtualenv_from_the_wheel_folder(tmp_path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    lines = _dry_run(tmp_path, GPU_BENCH_MODE="venv", WHEELS=str(wheels), VENV=str(tmp_path / "venv"))
    assert any(line.endswith(f"-m venv {tmp_path / 'venv'}") for line in lines)
    assert any("--no-index --find-links " + str(wheels) in line and "requirements.txt" in line for line in lines)
    assert not (tmp_path / "venv").exists()
    pins = (GPU / "requirements.txt").read_text()
    assert "torch==" in pins and "liger-kernel==" in pins and "torchao==" in pins


def test_run_sh_smoke_runs_every_phase_and_leaves_the_json(tmp_path) -> None:
    out_dir = tmp_path / "out"
    out = subprocess.run(["bash", str(GPU / "run.sh"), "--smoke"], env=_env(OUT=str(out_dir)), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " -m pip install" not in out.stdout  # the interpreter's packages, as they are
    for name in ("run.log", "kernel_check.json", "dense-bf16.json", "moe-bf16.json", "hf-moe.json",
                 "throughput_rows.json"):
        assert (out_dir / name).is_file(), name
    assert "kernel checks: 4 of 4 ok" in out.stdout and "dense-bf16: " in out.stdout
    assert "skipped: fp8 needs a CUDA GPU" in out.stdout
    assert "== done in" in (out_dir / "run.log").read_text()
    assert len(json.loads((out_dir / "throughput_rows.json").read_text())) == 2  # dense and MoE
    moe = json.loads((out_dir / "moe-bf16.json").read_text())  # the MoE phase's tiny stand-in: tiny-moe
    assert moe["model"] == "tiny-moe (smoke)" and moe["moe"] == {"experts": 8, "top_k": 2, "expert_ffn": 32}
    reference = json.loads((out_dir / "hf-moe.json").read_text())  # transformers' model at the same shape
    assert reference["reference"] == "transformers Qwen3MoeForCausalLM" and reference["timed_steps"] == 2
    assert "hf-moe (transformers): " in out.stdout and "x tokens/s" in out.stdout
    assert json.loads((out_dir / "dense-bf16.json").read_text())["profile"]["steps"] == 2
    peer_ran = (out_dir / "peer-torchtitan.json").is_file()  # only where torchtitan imports (not in CI)
    assert peer_ran or "peer: skipped: torchtitan does not import here" in out.stdout


def test_fetch_wheels_dry_run_downloads_nothing(tmp_path) -> None:
    dest = tmp_path / "wheels"
    out = subprocess.run(["bash", str(GPU / "fetch_wheels.sh"), "--dry-run", "--dest", str(dest)], env=_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    downloads = out.stdout.splitlines()
    assert len(downloads) == 14 and all(" -m pip download --no-deps --only-binary=:all: --python-version 3.12 "
                                       in line for line in downloads)
    assert any(line.endswith("pydantic-core==2.50.5") for line in downloads)
    assert any(line.endswith("torchtitan==0.3.0") for line in downloads)  # the peer run's
    assert not dest.exists()


def test_gpu_names_map_to_hardware_cards() -> None:
    sys.path.insert(0, str(GPU))
    from bench import detect_gpu_type

    assert detect_gpu_type("NVIDIA H100 80GB HBM3") == "h100"
    assert detect_gpu_type("NVIDIA H200") == "h200"
    assert detect_gpu_type("Tesla T4") is None


def test_dry_run_of_the_moe_phase_alone(tmp_path) -> None:
    lines = _dry_run(tmp_path, GPU_BENCH_MODE="machine", WHEELS=str(tmp_path / "none"), OUT=str(tmp_path / "out"),
                     GPU_BENCH_ONLY="moe")
    text = "\n".join(lines)
    assert "kernel_check.py" not in text and "--name dense-bf16" not in text and "--name dense-fp8" not in text
    assert any("--name moe-bf16" in line and "--layers 4" in line for line in lines)
