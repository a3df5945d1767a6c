"""`recipe-advisor train`: validate's rules before any worker starts, launcher flags checked as torchrun
would, and `--dry-run` refusing what the launch or the workers would refuse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from service.cli.app import main
from tests.paths import BUNDLED_RECIPES, REPO
from trainer.contract.preflight import load_config


def _recipe(tmp_path: Path, name: str = "tiny_llama_pretrain.yaml") -> Path:
    """A bundled CPU recipe whose checkpoints go under tmp_path."""
    cfg = yaml.safe_load((BUNDLED_RECIPES / name).read_text())
    cfg["checkpoint"]["checkpoint_dir"] = str(tmp_path / "ckpt")
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.fixture
def launches(monkeypatch):
    """Stand in for torch.distributed.run: records what would have been launched, starts nothing."""
    from service.cli import train as cli_train

    calls = []
    monkeypatch.setattr(cli_train, "launch", lambda args: calls.append(args) or 0)
    return calls


def test_train_refuses_a_config_validate_rejects_before_anything_starts(tmp_path, capsys, launches):
    from service.cli.train import run_argv

    config = _recipe(tmp_path)
    code = run_argv([str(config), "--model.pretrained_model_name_or_path", "llama3-8b"])
    err = capsys.readouterr().err
    assert code == 2
    assert launches == [], "no worker may start"
    assert not (tmp_path / "ckpt").exists(), "nothing may be written"
    [line] = [line for line in err.splitlines() if line.startswith("error: RA-")]
    assert line.startswith(f"error: RA-M002 ({config}:")
    assert "distributed.activation_checkpointing)" in line and "GiB" in line and "; fix: " in line
    assert "--ignore-validation-errors" in err.splitlines()[-1] and "nothing was started" in err


def test_an_error_from_an_override_names_the_flag(tmp_path, capsys, launches):
    from service.cli.train import run_argv

    code = run_argv([str(_recipe(tmp_path)), "--optimizer.lrr", "1e-3", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and launches == []
    assert "error: RA-S002 (--optimizer.lrr, optimizer.lrr): torch.optim.AdamW takes no keyword `lrr`; " \
           "fix: did you mean `lr`?" in err


def test_validation_errors_can_be_ignored_on_purpose(tmp_path, capsys, launches):
    from service.cli.train import run_argv

    code = run_argv([str(_recipe(tmp_path)), "--model.pretrained_model_name_or_path", "llama3-8b",
                     "--ignore-validation-errors"])
    err = capsys.readouterr().err
    assert code == 0 and len(launches) == 1
    assert "--ignore-validation-errors" not in launches[0], "a launcher flag, not a config override"
    assert "warning: ignored error RA-M002" in err and "error:" not in err.replace("ignored error", "")


def test_warnings_are_printed_and_the_run_goes_on_for_the_launched_world(tmp_path, capsys, launches):
    """One process for a recipe sized for 2: judged for the world launched, so RA-C006 warns."""
    from service.cli.train import run_argv

    code = run_argv([str(_recipe(tmp_path)), "--nproc-per-node", "1"])
    err = capsys.readouterr().err
    assert code == 0 and len(launches) == 1
    assert "warning: RA-C006 (" in err and "sized for 2 GPUs but runs on 1" in err
    assert "error" not in err


@pytest.mark.parametrize("name", sorted(p.name for p in BUNDLED_RECIPES.glob("*.yaml")))
def test_bundled_recipes_pass_the_launchers_validation_silently(tmp_path, capsys, name):
    from service.cli.train import report_validation

    path = _recipe(tmp_path, name)
    raw, cfg = load_config(str(path), [])
    assert report_validation(str(path), raw, cfg, [], gpus_per_node=cfg.hardware.gpus_per_node,
                             num_nodes=1) == 0
    assert capsys.readouterr().err == ""


def test_train_help_does_not_import_the_validator():
    code = ("import sys\nfrom service.cli import app as cli\ntry:\n    cli.main(['train', '--help'])\n"
            "except SystemExit:\n    pass\n"
            "assert 'service.validate.document' not in sys.modules and 'torch' not in sys.modules, "
            "sorted(sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--ignore-validation-errors" in result.stdout


def test_train_refuses_an_unreadable_integer_without_a_traceback(tmp_path, capsys):
    # The trainer's own loader let PyYAML's ValueError through.
    from service.cli.app import main

    config = tmp_path / "big.yaml"
    config.write_text("distributed:\n  tp_size: " + "9" * 5000 + "\n")
    assert main(["train", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    # The trainer's loader has the service's limits, so it names the line and the cause
    assert "line 2: a value is an integer with 5,000 digits" in err and "at most 64 bits" in err
    assert "Traceback" not in err


def test_torchruns_spelling_of_a_launcher_flag_is_named(capsys):
    """`--nproc_per_node 1` was an unknown key of the config file."""
    config = str(REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_pretrain.yaml")
    assert main(["train", config, "--dry-run", "--nproc_per_node", "1"]) == 2
    assert "--nproc_per_node: a launcher flag is spelt --nproc-per-node here" in capsys.readouterr().err


@pytest.mark.parametrize("flags, says", [
    (["--nnodes", "2", "--rdzv-endpoint", "h:29500", "--node-rank", "5"], "--node-rank 5: ranks of 2 node(s)"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:99999"], "a port from 1 to 65535"),
    (["--rdzv-endpoint", "h:29500"], "are for --nnodes > 1")])
def test_rendezvous_flags_torchrun_would_refuse_are_refused_before_it(capsys, flags, says):
    """They passed --dry-run (and a standalone launch dropped them silently)."""
    config = str(REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_pretrain.yaml")
    assert main(["train", config, "--dry-run", *flags]) == 2
    assert says in capsys.readouterr().err


def test_a_bare_rendezvous_host_takes_torchruns_default_port(capsys):
    """Torchrun accepts HOST alone (port 29400)."""
    config = str(REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_pretrain.yaml")
    assert main(["train", config, "--dry-run", "--nnodes", "2", "--rdzv-endpoint", "node0"]) == 0
    assert "--rdzv-endpoint=node0" in capsys.readouterr().out


def test_a_layer_past_the_model_is_refused_by_dry_run(capsys):
    """`model.layers.9...` on a 2-layer model passed the pre-flight; the workers refused it."""
    sft = str(REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_sft.yaml")
    assert main(["train", sft, "--dry-run", "--peft.target_modules", "[q_proj, model.layers.9.self_attn.q_proj]"]) == 2
    assert "model.layers.9.self_attn.q_proj" in capsys.readouterr().err
    assert main(["train", sft, "--dry-run", "--peft.target_modules", "[q_proj, model.layers.1.self_attn.q_proj]"]) == 0


@pytest.mark.parametrize("override, says", [
    (["--dataset.tokenizer", "Qwen/Qwen3-8B"], "dataset.tokenizer"),
    (["--model.pretrained_model_name_or_path", "qwen3-600m", "--model.load_weights", "true"], "model.load_weights")])
def test_dry_run_offline_refuses_what_the_cache_lacks_for_a_bundled_model(offline_hub, capsys,
                                                                        override, says):
    """A bundled model's tokenizer and weights come from the cache too; the workers refused them."""
    sft = str(REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_sft.yaml")
    assert main(["train", sft, "--dry-run", *override]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("folder, why", [("/proc/no/such", "in '/proc', the nearest folder that exists"),
                                         ("{tmp}/a_file/sub", "Not a directory")])
def test_dry_run_checks_the_checkpoint_folder_without_creating_it(tmp_path, capsys, folder, why):
    """`--dry-run` printed the command for a folder the launch then refused."""
    (tmp_path / "a_file").write_text("x")
    config = tmp_path / "c.yaml"
    assert main(["recommend", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled",
                 "-o", str(config)]) == 0
    capsys.readouterr()
    target = folder.format(tmp=tmp_path)
    assert main(["train", str(config), "--dry-run", "--checkpoint.checkpoint_dir", target]) == 2
    err = capsys.readouterr().err
    assert "checkpoint.checkpoint_dir: cannot create or write in" in err and why in err
    fresh = tmp_path / "new" / "ckpt"
    assert main(["train", str(config), "--dry-run", "--checkpoint.checkpoint_dir", str(fresh)]) == 0
    assert not (tmp_path / "new").exists() and not list(tmp_path.glob(".write_probe_*"))
