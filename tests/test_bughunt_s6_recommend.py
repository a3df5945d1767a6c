"""Bug hunt s6 (#2, #3, #6, #9c, #9d): recommend's overrides, weights, ranking, flags; diff layers."""

from __future__ import annotations

import json

import pytest

from service.changes import classify, diff
from service.cli import main
from service.planner import make_request, plan
from service.recommend import recommend
from service.yamlio import OverrideError
from recipe_index import get_hardware, resolve_model
from tests.test_index_models import _cache_repo, offline_hub  # noqa: F401 (a fixture)
from trainer.dotted import get_dotted


def _plan_matches_config(rec) -> None:
    """The layout shown is the layout of the config written: batch math and sequence agree."""
    row, req = rec.best, rec.plan.request
    gbs = get_dotted(rec.config, "step_scheduler.global_batch_size")
    assert req.global_batch_size == gbs
    assert row.layout.micro_batch_size * row.dp * row.grad_accumulation_steps == gbs
    assert req.seq_length == get_dotted(rec.config, "dataset.seq_length")
    assert rec.config["hardware"]["gpu_type"] == req.hardware.name


@pytest.mark.parametrize("override, field, value", [
    ("--dataset.seq_length=32768", "seq_length", 32768),
    ("--step_scheduler.global_batch_size=64", "global_batch_size", 64),
    ("--precision=fp8", "precision", "fp8"),
])
def test_overrides_of_request_keys_are_planned(override, field, value):
    # bughunt s6 #2: the plan, estimates and commands used to describe the run before the override.
    rec = recommend("llama3-8b", 8, "h100", overrides=[override])
    assert getattr(rec.plan.request, field) == value
    _plan_matches_config(rec)
    assert rec.errors == 0


def test_an_override_that_agrees_with_the_flag_is_fine_and_one_that_contradicts_it_is_refused():
    rec = recommend("llama3-8b", 8, "h100", seq_length=4096, overrides=["--dataset.seq_length=4096"])
    assert rec.plan.request.seq_length == 4096
    with pytest.raises(OverrideError, match=r"--dataset.seq_length 8192 contradicts --seq-length 4096"):
        recommend("llama3-8b", 8, "h100", seq_length=4096, overrides=["--dataset.seq_length=8192"])
    with pytest.raises(OverrideError, match=r"--hardware.gpu_type a100-40gb contradicts --gpu-type h100"):
        recommend("llama3-8b", 8, "h100", overrides=["--hardware.gpu_type=a100-40gb"])
    with pytest.raises(OverrideError, match=r"expected an integer from 2 to 4,194,304, got .long."):
        recommend("llama3-8b", 8, "h100", overrides=["--dataset.seq_length=long"])


@pytest.mark.parametrize("key", ["hardware.gpus_per_node", "hardware.num_nodes"])
def test_gpu_count_keys_are_refused_naming_the_flags(key, capsys):
    assert main(["recommend", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", f"--{key}", "4"]) == 2
    assert "set by --gpus and --nodes" in capsys.readouterr().err


def test_http_overrides_of_request_keys_are_planned():
    from fastapi.testclient import TestClient

    from service.app import app

    body = {"model": "llama3-8b", "gpus": 8, "gpu_type": "h100", "overrides": {"dataset.seq_length": 32768}}
    answer = TestClient(app).post("/v1/recommend", json=body)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert get_dotted(data["config"], "dataset.seq_length") == 32768
    assert data["layout"]["memory_gib"]["total"] < 80  # the planned layout, at 32K
    assert TestClient(app).post("/v1/recommend", json={**body, "overrides": {"hardware.num_nodes": 2}}).status_code == 400


def test_a_mistyped_flag_is_named_not_located_in_an_unwritten_file(tmp_path, capsys):
    out = tmp_path / "c.yaml"
    code = main(["recommend", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "-o", str(out),
                 "--override", "optimizer.lr=1e-4"])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert "--override: not an option and not a config section" in err and str(out) not in err


def test_bundled_fine_tuning_starts_from_the_published_weights():
    # bughunt s6 #3: LoRA and SFT used to train a randomly initialised model.
    for goal in ("sft", "peft"):
        rec = recommend("llama3-8b", 8, "h100", engine="bundled", goal=goal)
        assert rec.config["model"]["load_weights"] is True
        assert any("meta-llama/Meta-Llama-3-8B's weights" in n for n in rec.notes)
    pretrain = recommend("llama3-8b", 8, "h100", engine="bundled")
    assert "load_weights" not in pretrain.config["model"]
    tiny = recommend("tiny-llama", 2, "cpu", engine="bundled", goal="sft")
    assert "load_weights" not in tiny.config["model"]
    assert any("no published weights" in n for n in tiny.notes)


@pytest.mark.parametrize("model, gpus, gpu_type, goal, seq", [
    ("nemotronh-8b", 16, "a100-40gb", "peft", None),
    ("deepseek-v3", 128, "b200", "pretrain", 4096),
])
def test_recommend_applies_the_plans_first_layout(model, gpus, gpu_type, goal, seq):
    # bughunt s6 #6: recommend re-picked for memory headroom, so `plan` and `recommend` named two bests.
    rec = recommend(model, gpus, gpu_type, goal=goal, seq_length=seq)
    again = plan(rec.plan.request)
    assert rec.best.layout == again.best.layout and rec.best.sharding == again.best.sharding


def test_overlap_merge_and_logging_are_execution_but_the_reduce_dtype_is_not():
    assert classify("distributed.overlap_grad_reduce", False, True)[0] == "execution"
    assert classify("peft.merge_on_save", False, True)[0] == "execution"
    assert classify("logger.log_interval", 1, 10)[0] == "execution"
    assert classify("train.manual_gc", False, True)[0] == "execution"
    assert classify("distributed.grad_reduce_dtype", "fp32", "bf16")[0] == "convergence"
    assert classify("ddp.grad_reduce_in_fp32", True, False)[0] == "convergence"
    assert [c.layer for c in diff({"peft": {"rank": 8}}, {"peft": {"rank": 8, "merge_on_save": True}})] == ["execution"]


def test_bundled_sequence_beyond_the_models_positions_is_refused_naming_the_flag(capsys):
    # The bundled trainer refuses it (RA-C011 is an error for fsdp2/ddp): plan and recommend say so
    # up front, naming --seq-length, instead of writing nothing after validate fails.
    for command in ("plan", "recommend"):
        assert main([command, "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled",
                     "--seq-length", "1000"]) == 2
        assert "error: --seq-length: seq_length 1000 is beyond the 256 positions of tiny-llama" in capsys.readouterr().err
    assert main(["plan", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "h100", "--engine", "megatron",
                 "--seq-length", "1000"]) == 0  # Megatron extends positions (RA-C011 warns there)


def test_a_local_model_loads_weights_only_when_they_lie_beside_its_config(tmp_path):
    # review s6 #2: a folder with only config.json got load_weights: true, which the workers refuse.
    import shutil

    from recipe_index.models import MODELS_DIR

    folder = tmp_path / "my-model"
    folder.mkdir()
    shutil.copy(MODELS_DIR / "tiny-llama.json", folder / "config.json")
    bare = recommend(str(folder), 2, "cpu", engine="bundled", goal="sft")
    assert "load_weights" not in bare.config["model"]
    assert any("no safetensors beside" in n for n in bare.notes)
    (folder / "model.safetensors").write_bytes(b"")
    weighted = recommend(str(folder), 2, "cpu", engine="bundled", goal="sft")
    assert weighted.config["model"]["load_weights"] is True
    assert any(f"weights in {folder}" in n for n in weighted.notes)


def test_request_keys_inside_a_whole_section_override_are_planned_too():
    # review s6 #3: `--dataset "{seq_length: 32768}"` planned at the recipe's length but wrote 32768.
    rec = recommend("llama3-8b", 8, "h100", overrides=["--dataset={seq_length: 32768}"])
    assert rec.plan.request.seq_length == 32768
    _plan_matches_config(rec)
    with pytest.raises(OverrideError, match="set by --gpus and --nodes"):
        recommend("llama3-8b", 8, "h100", overrides=["--hardware={gpus_per_node: 4}"])


def test_override_values_are_bounded_and_checked_like_the_fields():
    # review s6 #4/#5/#12: `none` clears a key; bounds and choices as the API's fields; GPU aliases agree.
    assert recommend("llama3-8b", 8, "h100", overrides=["--dataset.seq_length=none"]).plan.request.seq_length == 8192
    with pytest.raises(OverrideError, match=r"expected an integer from 2 to 4,194,304, got 1000000000000"):
        recommend("llama3-8b", 8, "h100", overrides=["--dataset.seq_length=1000000000000"])
    with pytest.raises(OverrideError, match=r"'fp7' is not one of bf16"):
        recommend("llama3-8b", 8, "h100", overrides=["--precision=fp7"])
    assert recommend("llama3-8b", 8, "h100", overrides=["--hardware.gpu_type=H100-SXM"]).plan.request.hardware.name == "h100"


@pytest.mark.parametrize("model, gpus, gpu_type, goal", [
    ("qwen25-7b", 8, "h100", "pretrain"),  # a card that declares no max_position_embeddings
    ("llama3-8b", 8, "h100", "peft"),
    ("tiny-llama", 2, "cpu", "sft"),
    ("qwen3-8b", 16, "a100-40gb", "sft"),
])
def test_what_recommend_writes_for_the_bundled_trainer_passes_its_preflight(tmp_path, offline_hub, model, gpus,
                                                                            gpu_type, goal):
    # review s6 #1: validate passed configs that the trainer's pre-flight then refused. Offline, the pre-flight
    # also asks the Hugging Face cache for the published tokenizer and weights SFT/PEFT start from (bug hunt
    # s12b B6): here the cache holds them, as it must before such a run.
    from trainer.launch import load_config, preflight

    hf_id = resolve_model(model).hf_id
    if hf_id:
        _cache_repo(offline_hub, hf_id, {})
        snapshot = next((offline_hub / ("models--" + hf_id.replace("/", "--")) / "snapshots").iterdir())
        (snapshot / "tokenizer.json").write_text("{}")
        (snapshot / "model.safetensors").write_bytes(b"")
    rec = recommend(model, gpus, gpu_type, engine="bundled", goal=goal)
    assert rec.errors == 0
    path = tmp_path / "c.yaml"
    path.write_text(rec.config_yaml)
    _, cfg = load_config(str(path), [])
    preflight(cfg, rec.plan.request.world_size)


def test_an_adapter_file_alone_is_no_model_weights(tmp_path):
    # Second read: recommend now asks the loader's own has_hf_weights; any *.safetensors used to count.
    import shutil

    from recipe_index.models import MODELS_DIR

    folder = tmp_path / "m"
    folder.mkdir()
    shutil.copy(MODELS_DIR / "tiny-llama.json", folder / "config.json")
    (folder / "adapter_model.safetensors").write_bytes(b"")
    assert "load_weights" not in recommend(str(folder), 2, "cpu", engine="bundled", goal="sft").config["model"]
