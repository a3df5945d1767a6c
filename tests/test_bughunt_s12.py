"""Bug hunt s12 (notes/hunt_s12.md): the service's Hub mode and local paths, digits that int() refuses,
`recommend -o` atomicity, `diff` values and sections, `validate` on empty folders, content negotiation."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from recipe_index import find_bundled_model
from service.app import create_app
from service.changes import diff, verdict
from service.cli import main
from service.validate import validate_text
from tests.test_index_models import _cache_repo, offline_hub  # noqa: F401 (a fixture)

REPO = Path(__file__).resolve().parents[1]
BUNDLED_SFT = (REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_sft.yaml").read_text()
SMALL_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
               "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 2048}


@pytest.fixture
def client() -> TestClient:
    return TestClient(create_app(), raise_server_exceptions=False)


# ---- H13: with the Hub allowed, the service still never reads a folder a client names -----------------------

@pytest.fixture
def hub_mode_beside_a_secret(tmp_path, monkeypatch, offline_hub):  # noqa: F811
    secret = {**SMALL_LLAMA, "hidden_size": "SECRET-API-KEY-abc123"}
    for repo in ("org-s12/leak", "org-s12/cached"):
        (tmp_path / repo).mkdir(parents=True)
        (tmp_path / repo / "config.json").write_text(json.dumps(secret))
    _cache_repo(offline_hub, "org-s12/cached", SMALL_LLAMA)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECIPE_ADVISOR_ALLOW_HUB", "1")


def test_a_hub_id_that_names_a_server_folder_is_not_read(hub_mode_beside_a_secret, client):
    response = client.post("/v1/plan", json={"model": "org-s12/leak", "gpus": 8, "gpu_type": "h100"})
    assert response.status_code == 404 and "SECRET" not in response.text
    yaml = "model:\n  pretrained_model_name_or_path: org-s12/leak\n"
    response = client.post("/v1/validate", content=yaml, headers={"content-type": "application/yaml"})
    assert response.status_code == 200 and "SECRET" not in response.text
    assert "RA-C009" in response.text  # unknown to the service: not resolvable, said so


def test_a_hub_id_resolves_from_the_cache_not_from_a_folder_of_that_name(hub_mode_beside_a_secret, client):
    response = client.post("/v1/plan", json={"model": "org-s12/cached", "gpus": 8, "gpu_type": "h100"})
    assert response.status_code == 200, response.text
    assert response.json()["model"] == "org-s12/cached" and "SECRET" not in response.text  # the folder's is invalid


# ---- H10, H11: str.isdigit() is true for '²', which int() refuses ----------------------------------------------

@pytest.mark.parametrize("field", ["gpus", "nodes"])
def test_a_superscript_digit_in_the_validate_form_is_a_form_problem(client, field):
    response = client.post("/validate", data={"yaml": "model:\n  pretrained_model_name_or_path: llama3-8b\n",
                                              field: "²"})
    assert response.status_code == 422 and "text/html" in response.headers["content-type"]
    assert "whole number" in response.text


def test_a_superscript_size_in_a_config_json_is_refused_naming_the_field(tmp_path):
    from recipe_index.errors import ModelConfigError
    from recipe_index.models import resolve_model

    (tmp_path / "config.json").write_text(json.dumps({**SMALL_LLAMA, "num_hidden_layers": "²"}))
    with pytest.raises(ModelConfigError, match="num_hidden_layers"):
        resolve_model(str(tmp_path))


# ---- H6: recommend -o replaces the file whole or not at all ------------------------------------------------------

def _recommend_to(out: Path, file_size_limit: int | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "service.cli", "recommend", "--model", "llama3-8b", "--gpus", "8",
           "--gpu-type", "h100", "--goal", "sft", "--engine", "bundled", "-o", str(out)]

    def limit() -> None:  # the disk "fills" after this many bytes
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run(cmd, preexec_fn=limit if file_size_limit else None, capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)


def test_a_failed_recommend_write_keeps_the_old_file(tmp_path):
    out = tmp_path / "config.yaml"
    out.write_text("model:\n  pretrained_model_name_or_path: keep-me\n")
    result = _recommend_to(out, file_size_limit=1024)
    assert result.returncode == 2 and "the file is as it was" in result.stderr, result.stderr
    assert out.read_text() == "model:\n  pretrained_model_name_or_path: keep-me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]  # no staging file left behind


def test_recommend_writes_through_a_symlink_and_into_a_pipe(tmp_path):
    target = tmp_path / "real.yaml"
    target.write_text("old\n")
    (tmp_path / "link.yaml").symlink_to(target)
    assert _recommend_to(tmp_path / "link.yaml").returncode == 0
    assert (tmp_path / "link.yaml").is_symlink() and "pretrained_model_name_or_path" in target.read_text()
    fifo = tmp_path / "fifo"  # a pipe of the test's own, never a device of the host's (review s12 F12)
    os.mkfifo(fifo)
    read = []
    reader = __import__("threading").Thread(target=lambda: read.append(fifo.read_text()))
    reader.start()
    assert _recommend_to(fifo).returncode == 0
    reader.join(timeout=60)
    assert fifo.exists() and not fifo.is_file() and "pretrained_model_name_or_path" in read[0]


@pytest.mark.parametrize("redirect", ["w", "a"])
def test_o_dev_stdout_into_a_file_keeps_what_the_shell_opened(tmp_path, redirect):
    """Review s12 F4: /dev/stdout redirected to a file was replaced by a new file, and the summary lost."""
    log = tmp_path / "log.txt"
    log.write_text("earlier\n")
    with open(log, redirect) as fh:
        subprocess.run([sys.executable, "-m", "service.cli", "recommend", "--model", "tiny-llama", "--gpus", "1",
                        "--gpu-type", "cpu", "--engine", "bundled", "--goal", "sft", "-o", "/dev/stdout"],
                       stdout=fh, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=True, timeout=120)
    text = log.read_text()
    assert text.startswith("earlier\n") == (redirect == "a")
    config = text.removeprefix("earlier\n")  # as `-o -`: the config alone, the summary on stderr (last read L5)
    assert "pretrained_model_name_or_path" in config and "\nlayout: TP" not in config
    assert not [f for f in validate_text(config, "c.yaml").findings if f.severity == "error"]


def _recommend_in_process(out: Path) -> int:
    return main(["recommend", "--model", "tiny-llama", "--gpus", "1", "--gpu-type", "cpu", "--engine", "bundled",
                 "-o", str(out)])


def test_o_through_a_symlink_loop_is_a_clean_error(tmp_path, capsys):
    """Review s12 F3: Path.resolve raised RuntimeError (a traceback, exit 1)."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert _recommend_in_process(tmp_path / "a") == 2
    assert "cannot write" in capsys.readouterr().err


def test_a_writable_file_in_a_folder_without_room_for_staging_is_written_in_place(tmp_path, monkeypatch, capsys):
    """Review s12 F2: a group-writable config in a read-only folder was refused, blaming the file."""
    import errno

    out = tmp_path / "c.yaml"
    out.write_text("old\n")
    real_open = os.open

    def no_new_files(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and str(path) != str(out):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_new_files)
    assert _recommend_in_process(out) == 0
    assert "pretrained_model_name_or_path" in out.read_text() and "written in place" in capsys.readouterr().err


def test_a_failed_folder_sync_after_the_rename_says_the_new_config_is_in_place(tmp_path, monkeypatch, capsys):
    """Review s12 F16: it said "the file is as it was" about a file that held the new config."""
    import errno

    import trainer.atomic_files as files

    def failing(path):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(files, "fsync_path", failing)
    out = tmp_path / "c.yaml"
    out.write_text("old\n")
    assert _recommend_in_process(out) == 2
    assert "the new config is in place" in capsys.readouterr().err and out.read_text() != "old\n"
    monkeypatch.setattr(files, "fsync_path", lambda path: (_ for _ in ()).throw(OSError(errno.EINVAL, "no")))
    out.write_text("old\n")
    assert _recommend_in_process(out) == 0  # a filesystem that cannot sync folders at all


def test_recommend_keeps_the_permissions_of_the_file_it_replaces(tmp_path):
    out = tmp_path / "private.yaml"
    out.write_text("old\n")
    out.chmod(0o600)
    assert _recommend_to(out).returncode == 0
    assert out.stat().st_mode & 0o777 == 0o600 and "pretrained_model_name_or_path" in out.read_text()


# ---- H1, H7, H9, H12: diff ----------------------------------------------------------------------------------------

def test_adamw_default_betas_written_out_is_no_change():
    base = {"optimizer": {"_target_": "torch.optim.AdamW", "lr": 1e-4}}
    assert diff(base, {"optimizer": {**base["optimizer"], "betas": [0.9, 0.999], "eps": 1e-8}}) == []
    assert [c.key for c in diff(base, {"optimizer": {**base["optimizer"], "betas": [0.9, 0.95]}})] == [
        "optimizer.betas"]


def test_a_bool_or_a_float_for_a_strict_integer_is_a_change_but_not_for_a_float_setting():
    base = {"distributed": {"tp_size": 1}, "step_scheduler": {"global_batch_size": 32},
            "optimizer": {"_target_": "torch.optim.AdamW", "weight_decay": 0}}
    new = {"distributed": {"tp_size": True}, "step_scheduler": {"global_batch_size": 32.0},
           "optimizer": {"_target_": "torch.optim.AdamW", "weight_decay": 0.0}}
    assert {c.key for c in diff(base, new)} == {"distributed.tp_size", "step_scheduler.global_batch_size"}
    # a bool setting reads 1 as true (review R1): no change there
    assert diff({"dataloader": {"shuffle": 1}, "checkpoint": {"enabled": 1}},
                {"dataloader": {"shuffle": True}, "checkpoint": {"enabled": True}}) == []


def test_a_section_replaced_by_a_value_is_one_change_shown_whole():
    [change] = diff({"distributed": {"tp_size": 2}}, {"distributed": 5})
    assert (change.key, change.old, change.new) == ("distributed", {"tp_size": 2}, 5)
    # null is no section: the keys written on the other side are the changes
    [change] = diff({"restore_from": None}, {"restore_from": {"path": "/ckpt/epoch_0_step_4"}})
    assert (change.key, change.old, change.new) == ("restore_from.path", "<absent>", "/ckpt/epoch_0_step_4")


def test_index_metadata_is_not_a_change_except_the_labels_that_are_convergence():
    changes = diff({"metadata": {"name": "a", "description": "x"}}, {"metadata": {"name": "b", "description": "y"}})
    assert changes == [] and verdict(changes) is None
    [change] = diff({"metadata": {"name": "a", "precision_recipe": "fp8cs"}},
                    {"metadata": {"name": "a", "precision_recipe": "fp8mx"}})
    assert (change.key, change.layer) == ("metadata.precision_recipe", "convergence")


# ---- H5: validate on a folder with nothing to check ------------------------------------------------------------

def test_an_empty_folder_beside_a_file_is_an_error_in_every_format(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    good = tmp_path / "a.yaml"
    good.write_text((REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_pretrain.yaml").read_text())
    assert main(["validate", str(good), str(tmp_path / "empty"), "--format", "json"]) == 2
    files = {f["path"]: f["findings"] for f in json.loads(capsys.readouterr().out)["files"]}
    assert [f["code"] for f in files[str(tmp_path / "empty")]] == ["RA-F001"]
    assert main(["validate", str(tmp_path / "empty"), "--format", "sarif"]) == 2
    assert json.loads(capsys.readouterr().out)["runs"][0]["results"][0]["ruleId"] == "RA-F001"


# ---- H2, H4, H8 ---------------------------------------------------------------------------------------------------

def test_the_per_node_overflow_fix_offers_only_what_the_next_call_accepts(client):
    detail = client.post("/v1/plan", json={"model": "llama3-8b", "gpus": 9, "nodes": 1, "gpu_type": "h100"}).json()
    assert "without nodes" not in detail["detail"] and "gpus <= 8 with nodes" in detail["detail"]
    detail = client.post("/v1/plan", json={"model": "llama3-8b", "gpus": 16, "nodes": 2, "gpu_type": "h100"}).json()
    assert "the total (32) without nodes" in detail["detail"]
    assert client.post("/v1/plan", json={"model": "llama3-8b", "gpus": 32, "gpu_type": "h100"}).status_code == 200


@pytest.mark.parametrize("size", ["8B", "70B", "405B"])
def test_llama31_is_found_by_its_current_hub_id(size):
    card = find_bundled_model(f"meta-llama/Llama-3.1-{size}")
    assert card is not None and card.id == f"llama31-{size.lower()}"


@pytest.mark.parametrize("accept, yaml", [
    ("application/yaml", True), ("application/yaml;q=0, application/json", False),
    ("application/json, application/yaml;q=0.5", False), ("*/*", False), ("text/yaml;q=0.9, */*;q=0.1", True),
    ("application/yaml;q=abc", False)])
def test_recipe_negotiation_honours_q_values_and_varies_on_accept(client, accept, yaml):
    response = client.get("/v1/recipes/llama3_8b_pretrain_config", headers={"accept": accept})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/yaml" if yaml else "application/json")
    assert response.headers["vary"] == "Accept"


# ---- H3: the config carries the uneven pipeline split the estimates assumed -------------------------------------

@pytest.mark.parametrize("model, gpus, split", [
    ("llama3-8b", 3, {"account_for_embedding_in_pipeline_split": True}),
    ("olmoe-7b", 6, {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True})])
def test_a_recommended_uneven_pipeline_carries_its_split(client, model, gpus, split):
    answer = client.post("/v1/recommend", json={"model": model, "gpus": gpus, "gpu_type": "h100",
                                                "goal": "pretrain"}).json()
    config = yaml.safe_load(answer["config_yaml"])
    layers = find_bundled_model(model).num_hidden_layers
    dist = config["distributed"]
    assert layers % (dist["pp_size"] * (dist.get("vp_size") or 1)), "the case needs an uneven split"
    assert {k: v for k, v in config["model"].items() if "pipeline" in k} == split
    assert "RA-L011" not in [f["code"] for f in answer["findings"]]


def test_a_layout_string_takes_no_split_settings_and_a_stale_split_goes():
    from service.recommend_config import _place_layers

    def placed(model: str, written: dict, **distributed) -> dict:
        config = {"model": dict(written), "distributed": distributed}
        _place_layers(config, find_bundled_model(model))
        return config["model"]

    assert placed("deepseek-v3", {"account_for_loss_in_pipeline_split": True},
                  pp_size=7, vp_size=7, pipeline_layout="explicit") == {}
    # llama3-8b's 32 layers: this split no longer places PP 4 (5 + 11 + 11 + 6 != 32 in even middles) ...
    assert placed("llama3-8b", {"num_layers_in_first_pipeline_stage": 5, "num_layers_in_last_pipeline_stage": 6},
                  pp_size=4) == {}
    # ... this one places PP 3, so it stays
    edges = {"num_layers_in_first_pipeline_stage": 10, "num_layers_in_last_pipeline_stage": 10}
    assert placed("llama3-8b", edges, pp_size=3) == edges
    assert placed("llama3-8b", {}, pp_size=3, vp_size=2) == {"num_layers_in_first_pipeline_stage": 10,
                                                             "num_layers_in_last_pipeline_stage": 10}


@pytest.mark.parametrize("overrides, split", [
    (["--distributed.vp_size", "2"], {"num_layers_in_first_pipeline_stage": 10,
                                      "num_layers_in_last_pipeline_stage": 10}),
    (["--distributed.vp_size", "null", "--distributed.pipeline_layout", "explicit"], {}),
    (["--distributed.vp_size", "null", "--model.num_layers_in_first_pipeline_stage", "12",
      "--model.num_layers_in_last_pipeline_stage", "8"],
     {"num_layers_in_first_pipeline_stage": 12, "num_layers_in_last_pipeline_stage": 8})])
def test_the_split_follows_the_layout_the_overrides_end_with(capsys, tmp_path, overrides, split):
    """Review s12 F1: the split was placed for the planner's layout before the overrides moved it."""
    out = tmp_path / "c.yaml"
    args = ["recommend", "--model", "llama3-8b", "--gpus", "3", "--gpu-type", "h100", "--goal", "pretrain",
            "-o", str(out), *overrides]
    assert main(args) == 0, capsys.readouterr().err
    model = yaml.safe_load(out.read_text())["model"]
    assert {k: v for k, v in model.items() if "pipeline" in k} == split


# ---- H14: recommend's JSON holds .nan as "nan", as diff's does ------------------------------------------------

def test_recommend_json_holds_a_nan_override_as_a_string(client, capsys):
    def refuse(constant):
        raise ValueError(constant)

    args = ["recommend", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "--goal", "pretrain",
            "--model.moe_aux_loss_coeff", ".nan", "--format", "json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert data["config"]["model"]["moe_aux_loss_coeff"] == "nan"
    answer = client.post("/v1/recommend", json={"model": "llama3-8b", "gpus": 8, "gpu_type": "h100",
                                                "overrides": {"model.moe_aux_loss_coeff": ".nan"}}).json()
    assert answer["config"]["model"]["moe_aux_loss_coeff"] == "nan"


def test_an_octal_looking_override_is_refused_like_the_file(client):
    answer = client.post("/v1/recommend", json={"model": "llama3-8b", "gpus": 8, "gpu_type": "h100",
                                                "overrides": {"step_scheduler.global_batch_size": "0100"}})
    assert answer.status_code == 400 and "octal" in answer.text


# ---- minor items (M1, M3, M9, M13, M22) -------------------------------------------------------------------------

def test_lora_target_modules_in_another_order_are_no_change():
    base = {"peft": {"target_modules": ["q_proj", "v_proj"]}}
    assert diff(base, {"peft": {"target_modules": ["v_proj", "q_proj"]}}) == []
    assert [c.key for c in diff(base, {"peft": {"target_modules": ["q_proj", "k_proj"]}})] == ["peft.target_modules"]


def test_an_empty_output_name_is_refused(capsys):
    args = ["recommend", "--model", "tiny-llama", "--gpus", "1", "--gpu-type", "cpu", "--engine", "bundled", "-o", ""]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert "empty file name" in captured.err and captured.out == ""


def test_a_file_named_twice_is_validated_once(tmp_path, capsys, monkeypatch):
    (tmp_path / "a.yaml").write_text(BUNDLED_SFT)
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "a.yaml", "./a.yaml", str(tmp_path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["files"] == 1


def test_tp_over_pcie_inside_an_l40s_node_is_not_called_inter_node():
    from service.validate import validate_text

    text = ("model:\n  pretrained_model_name_or_path: llama3-8b\ndistributed:\n  strategy: megatron\n  tp_size: 8\n"
            "hardware:\n  gpu_type: l40s\n  gpus_per_node: 8\n")
    [finding] = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-L015"]
    assert "PCIe inside the node" in finding.message and "inter-node" not in finding.message


@pytest.mark.parametrize("path, checked", [
    ("recipes/llama.yaml", True), ("team/configs/sft/a.yml", True), ("recipe/x.yaml", True),
    (".github/workflows/ci.yml", False), (".pre-commit-config.yaml", False), ("docker-compose.yml", False),
    ("recipes/README.md", False), ("configs/.github/x.yaml", False)])
def test_the_pre_commit_hook_checks_recipe_folders_only(path, checked):
    """Bug hunt s12 M18: the hook matched every YAML, failing any commit that touched a workflow."""
    import re


    [hook] = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert bool(re.search(hook["files"], path) and not re.search(hook["exclude"], path)) is checked


def test_a_failed_download_is_text_for_curl_and_a_page_for_a_browser(client):
    """Bug hunt s12 M4: `curl -s -o config.yaml .../recommend.yaml?...` saved the HTML form page as the config."""
    url = "/recommend.yaml?model=llama3-8b&gpu_type=h100&gpus=9&goal=pretrain"
    answer = client.get(url, headers={"accept": "*/*"})
    assert answer.status_code == 400 and answer.headers["content-type"].startswith("text/plain")
    assert answer.text.startswith("error: gpus") and "<" not in answer.text
    page = client.get(url, headers={"accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert page.status_code == 400 and page.headers["content-type"].startswith("text/html")


def test_a_memory_fix_that_cannot_close_the_gap_says_so():
    """Bug hunt s12 M14: activation checkpointing was offered for a gap larger than all activations."""
    from service.validate import validate_text

    text = ("model:\n  pretrained_model_name_or_path: llama3-8b\ndataset:\n  _target_: trainer.data.MockDataset\n"
            "  seq_length: 4096\ndistributed:\n  strategy: ddp\nhardware:\n  gpu_type: h100\n  gpus_per_node: 1\n")
    [finding] = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-M002"]
    assert "activation_checkpointing: selective (or full) (not enough alone: activations are" in finding.fix
    small = text.replace("seq_length: 4096", "seq_length: 4096\nstep_scheduler:\n  local_batch_size: 16")
    small = small.replace("llama3-8b", "llama32-1b").replace("strategy: ddp", "strategy: fsdp2")
    fixes = [f.fix for f in validate_text(small, "c.yaml").findings if f.code == "RA-M002"]
    assert fixes and "not enough alone" not in fixes[0].split(";")[0]  # here micro batch / recompute do close it


def test_an_empty_uploaded_file_is_named(client):
    """Bug hunt s12 M7: an empty upload was answered "paste a YAML config or choose a file"."""
    page = client.post("/validate", files={"file": ("empty.yaml", b"", "application/yaml")}, data={"yaml": ""})
    assert page.status_code == 422 and "empty.yaml is empty" in page.text


def test_an_unwritable_stdout_is_one_error_line():
    """Bug hunt s12 M2: `recommend --format json > /dev/full` ended in a traceback."""
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "service.cli", "recipes"], stdout=full, stderr=subprocess.PIPE,
                                text=True, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)
    assert result.returncode == 2 and result.stderr == "error: cannot write the output: No space left on device\n"


@pytest.mark.parametrize("flags, says", [(["--host", "bad host"], "--host 'bad host' cannot be resolved"),
                                          (["--root-path", "advisor"], "--root-path 'advisor' must start with /")])
def test_serve_names_a_bad_flag_before_starting(capsys, flags, says):
    """Bug hunt s12 M5: uvicorn's own "Name or service not known" named neither flag nor value."""
    assert main(["serve", *flags]) == 2
    assert says in capsys.readouterr().err


def test_an_uncached_hub_model_offline_says_how_to_fetch_it(offline_hub):  # noqa: F811
    """Bug hunt s12 M10: the message told CLI users to "set 'local_files_only' to False"."""
    from recipe_index.errors import UnknownModelError
    from recipe_index.models import resolve_model

    with pytest.raises(UnknownModelError) as refused:
        resolve_model("org-s12/absent")
    text = str(refused.value)
    assert "local_files_only" not in text and "huggingface-cli download org-s12/absent config.json" in text


@pytest.mark.parametrize("accept, yaml", [("*/*, application/json;q=0", True), ("text/*", True),
                                          ("application/yaml, application/json", True), ("", False),
                                          ("application/*;q=0.5, application/json", False)])
def test_the_most_specific_accept_range_decides(client, accept, yaml):
    """Review s12 F8: q-values were combined by maximum, so `*/*` outvoted `application/json;q=0`."""
    response = client.get("/v1/recipes/llama3_8b_pretrain_config", headers={"accept": accept})
    assert response.headers["content-type"].startswith("application/yaml" if yaml else "application/json")


def test_validate_names_each_folder_once_and_the_hidden_folders_it_skipped(tmp_path, capsys):
    """Review s12 F9, F18."""
    (tmp_path / "quiet").mkdir()
    (tmp_path / "hid" / ".git").mkdir(parents=True)
    (tmp_path / "hid" / ".git" / "x.yaml").write_text("a: 1\n")
    paths = [str(tmp_path / "quiet")] * 2 + [str(tmp_path / "hid"), "nope-s12", "nope-s12"]
    assert main(["validate", *paths, "--format", "json"]) == 2
    files = {f["path"]: f["findings"][0]["message"] for f in json.loads(capsys.readouterr().out)["files"]}
    assert len(files) == 3
    assert files[str(tmp_path / "quiet")] == "no .yaml/.yml file in this folder or below it"
    assert files[str(tmp_path / "hid")].endswith("(hidden folders are skipped: .git)")
    assert main(["validate", ""]) == 2 and "an empty path" in capsys.readouterr().err


def test_published_fits_agrees_with_the_published_total_and_mfu_is_never_zero(capsys):
    """Bug hunt s12b A2, A3: a total a hair above the limit rounded onto it; MFU rounded to 0.0."""
    assert main(["plan", "--model", "deepseek-v3", "--gpus", "1024", "--gpu-type", "l40s", "--goal", "sft",
                 "--precision", "fp8", "--format", "json", "--top", "0"]) == 0
    plan = json.loads(capsys.readouterr().out)
    usable = plan["hardware"]["usable_gib"]
    assert all(row["fits"] == (row["memory_gib"]["total"] <= usable) for row in plan["layouts"])
    assert main(["plan", "--model", "tiny-llama", "--gpus", "64", "--gpu-type", "r100", "--goal", "peft",
                 "--precision", "fp8mx", "--format", "json", "--top", "0"]) == 0
    assert all(row["mfu"] > 0 for row in json.loads(capsys.readouterr().out)["layouts"])


def test_an_moe_model_on_the_cpu_card_is_sent_to_a_gpu_type_too(capsys):
    """Bug hunt s12b A1: the fix said --engine megatron, which the cpu card refuses in turn."""
    assert main(["recommend", "--model", "tiny-moe", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled"]) == 2
    fix = capsys.readouterr().err.split("Fix:")[-1]
    assert "--engine megatron" in fix and "--gpu-type" in fix


def test_a_local_config_on_gpus_keeps_the_library_contract_on_the_bundled_engine(capsys):
    """Bug hunt s12b A4: a local config.json took the CPU smoke recipe's contract (fp32, seq 64) onto an H100."""
    local = str(REPO / "recipe_index" / "models" / "llama31-8b.json")
    contracts = []
    for model in (local, "llama31-8b"):
        assert main(["recommend", "--model", model, "--gpus", "8", "--gpu-type", "h100", "--engine", "bundled",
                     "--format", "json"]) == 0
        config = json.loads(capsys.readouterr().out)["config"]
        contracts.append((config["precision"], config["dataset"]["seq_length"],
                          config["step_scheduler"]["global_batch_size"]))
    assert contracts[0] == contracts[1] == ("bf16", 8192, 512)


# ---- final read s12 (notes/final_read_s12.md) -------------------------------------------------------------------

@pytest.mark.parametrize("accept, yaml_wanted", [("application/json, application/*", False), ("application/*", False),
                                                 ("text/*", True)])
def test_a_wildcard_does_not_name_yaml(client, accept, yaml_wanted):
    """Final read s12 F2: `application/*` alone answered YAML."""
    response = client.get("/v1/recipes/llama3_8b_pretrain_config", headers={"accept": accept})
    assert response.headers["content-type"].startswith("application/yaml" if yaml_wanted else "application/json")


def test_a_download_for_a_client_that_refuses_html_is_text(client):
    url = "/recommend.yaml?model=llama3-8b&gpu_type=h100&gpus=9&goal=pretrain"
    response = client.get(url, headers={"accept": "text/html;q=0, */*"})
    assert response.headers["content-type"].startswith("text/plain")


def test_o_dev_stdout_with_json_is_refused_like_o_dash(capsys):
    """Final read s12 F5: YAML then JSON on one stdout."""
    assert main(["recommend", "--model", "tiny-llama", "--gpus", "1", "--gpu-type", "cpu", "--engine", "bundled",
                 "-o", "/dev/stdout", "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "-o /dev/stdout: --format json writes its JSON to stdout" in captured.err


def test_o_dev_stdout_writes_to_the_stdout_of_now(capsys):
    """Final read s12 F10: the stream of import time was written."""
    assert _recommend_in_process(Path("/dev/stdout")) == 0
    assert "pretrained_model_name_or_path" in capsys.readouterr().out


def test_a_failed_in_place_write_does_not_claim_the_old_file(tmp_path, monkeypatch, capsys):
    """Final read s12 F7."""
    import errno

    import service.cli_recommend as cli_recommend

    out = tmp_path / "c.yaml"
    out.write_text("old\n")

    def no_staging(path, text):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    def disk_full(self, text, encoding=None):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli_recommend, "write_atomic", no_staging)
    monkeypatch.setattr(Path, "write_text", disk_full)
    assert _recommend_in_process(out) == 2
    err = capsys.readouterr().err
    assert "it may hold part of the new config" in err and "as it was" not in err


def test_a_command_error_without_a_file_is_not_called_a_stdout_failure(monkeypatch):
    """Final read s12 F13: a TimeoutError became "cannot write the output"."""
    import service.cli_plan as cli_plan

    def timed_out(args):
        raise TimeoutError(110, "Connection timed out")

    monkeypatch.setattr(cli_plan, "run", timed_out)
    with pytest.raises(TimeoutError):
        main(["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100"])


@pytest.mark.parametrize("output, redirect", [("/dev/full", None), ("/dev/stderr", "/dev/full")])
def test_a_write_error_on_a_device_is_one_line_not_a_read_of_the_device(output, redirect):
    """Last read s12 H1: the error message read the device back to compare, which never ends on /dev/full."""
    def limited() -> None:  # a read that never ends fails fast instead of taking the machine's memory
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    with open(redirect or os.devnull, "w") as err_sink:
        done = subprocess.run([sys.executable, "-m", "service.cli", "recommend", "--model", "llama3-8b", "--gpus",
                               "8", "--gpu-type", "h100", "-o", output], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=err_sink if redirect else subprocess.PIPE, text=True, timeout=120,
                              preexec_fn=limited, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if redirect is None:
        assert done.returncode == 2 and "cannot write /dev/full" in done.stderr and "MemoryError" not in done.stderr
    else:
        assert done.returncode in (1, 2)  # stderr itself is full, so no message gets out; it must end, not hang or OOM


def test_accept_weights_that_are_no_number_count_as_zero(client):
    """Last read s12 L1, L2: `q=nan` outweighed a YAML type; `text/*` is no browser asking for the form page."""
    response = client.get("/v1/recipes/llama3_8b_pretrain_config",
                          headers={"accept": "application/yaml;q=0.5, application/json;q=nan"})
    assert response.headers["content-type"].startswith("application/yaml")
    page = client.get("/recommend.yaml?model=llama3-8b&gpu_type=h100&gpus=9&goal=pretrain", headers={"accept": "text/*"})
    assert page.headers["content-type"].startswith("text/plain")

