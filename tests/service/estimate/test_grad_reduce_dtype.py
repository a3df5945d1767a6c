"""`distributed.grad_reduce_dtype`: the dtype gradients are reduced (and, under Megatron, buffered) in.

Megatron Bridge's performance recipes set ``grad_reduce_in_fp32=False`` (``_benchmark_common()``,
mbridge_rules.md); the library recipes keep fp32. The setting moves the memory estimate (Megatron's
gradient buffer: 4 -> 2 bytes per parameter), the DP traffic of the step-time estimate, what the
planner ranks, what validate warns about, and how `diff` classifies the change. The trainer side
(FSDP2 reduce_dtype, DDP's bf16 hook) is tested for real in tests/trainer/distributed/test_parallel_dist.py.
"""

from __future__ import annotations

import json

import pytest
import yaml

from recipe_index import find_bundled_model, get_hardware
from recipe_index.recipes import RECIPES_DIR
from service.cli.app import main
from service.configs.changes import diff
from service.estimate.memory import estimate_memory, model_shape
from service.estimate.steptime import estimate_step_time
from service.facts import Layout
from service.plan.planner import PlanError, make_request, plan
from service.recommend.recommendation import recommend
from service.validate.document import validate_text

GIB = 1024**3


@pytest.fixture(scope="module")
def llama8b():
    return model_shape(find_bundled_model("llama3-8b"))


def test_megatron_bf16_gradients_move_the_fp32_copy_into_the_optimizer(llama8b):
    """Megatron's distributed-optimizer table: 2 + 4 + 12/d bytes per parameter with fp32 gradients,
    2 + 2 + 16/d with 16-bit ones (the optimizer keeps an fp32 gradient shard)."""
    n, d = llama8b.total_params, 8
    fp32 = estimate_memory(llama8b, Layout(), world_size=d, seq_length=4096)
    bf16 = estimate_memory(llama8b, Layout(), world_size=d, seq_length=4096, grad_reduce_dtype="bf16")
    assert fp32.grads == pytest.approx(n * 4 / GIB, rel=1e-9)
    assert fp32.optimizer == pytest.approx(n * 12 / d / GIB, rel=1e-9)
    assert bf16.grads == pytest.approx(n * 2 / GIB, rel=1e-9)
    assert bf16.optimizer == pytest.approx(n * 16 / d / GIB, rel=1e-9)
    assert (bf16.weights, bf16.activations) == (fp32.weights, fp32.activations)
    # Without the distributed optimizer (d = 1 for the state) bf16 gradients cost 2 bytes more.
    unsharded = [estimate_memory(llama8b, Layout(), world_size=d, seq_length=4096, sharding="none",
                                 grad_reduce_dtype=dtype) for dtype in ("fp32", "bf16")]
    assert (unsharded[1].grads + unsharded[1].optimizer) - (unsharded[0].grads + unsharded[0].optimizer) == \
        pytest.approx(n * 2 / GIB, rel=1e-9)


def test_megatron_fp32_parameters_keep_fp32_gradients(llama8b):
    plain = estimate_memory(llama8b, Layout(), world_size=8, seq_length=4096, precision="fp32")
    asked = estimate_memory(llama8b, Layout(), world_size=8, seq_length=4096, precision="fp32",
                            grad_reduce_dtype="bf16")
    assert asked.grads == plain.grads


def test_fsdp2_keeps_fp32_sharded_gradients(llama8b):
    """FSDP2 reduces in reduce_dtype, then stores the shard in its fp32 sharded parameters' dtype."""
    kw = dict(world_size=8, seq_length=4096, sharding="full", engine="bundled")
    assert estimate_memory(llama8b, Layout(), **kw, grad_reduce_dtype="bf16").grads == \
        estimate_memory(llama8b, Layout(), **kw).grads


def test_unknown_dtype_is_refused(llama8b):
    with pytest.raises(ValueError, match="grad_reduce_dtype"):
        estimate_memory(llama8b, Layout(), world_size=8, seq_length=4096, grad_reduce_dtype="fp8")
    with pytest.raises(PlanError) as err:
        make_request("llama3-8b", 8, "h100", grad_reduce_dtype="fp16")
    assert err.value.field == "grad_reduce_dtype" and "fp32, bf16" in str(err.value)


@pytest.mark.parametrize("engine,sharding", [("megatron", "optimizer"), ("bundled", "full"), ("bundled", "none")])
def test_data_parallel_traffic_halves_in_bf16(llama8b, engine, sharding):
    """DP=64 over InfiniBand, one short micro batch: the gradient traffic is exposed, and bf16 halves it."""
    kw = dict(world_size=64, seq_length=1024, global_batch_size=64, engine=engine, sharding=sharding)
    fp32 = estimate_step_time(llama8b, get_hardware("h100"), Layout(), **kw)
    bf16 = estimate_step_time(llama8b, get_hardware("h100"), Layout(), **kw, grad_reduce_dtype="bf16")
    assert fp32.dp_comm_s > 0.05
    assert bf16.dp_comm_s < 0.8 * fp32.dp_comm_s
    assert bf16.compute_s == fp32.compute_s


def test_plan_request_carries_it_to_the_estimates_and_the_json():
    kw = dict(seq_length=8192, global_batch_size=64, precision="fp8")
    fp32 = plan(make_request("llama31-405b", 128, "gb300", **kw))
    bf16 = plan(make_request("llama31-405b", 128, "gb300", **kw, grad_reduce_dtype="bf16"))
    assert fp32.to_dict()["grad_reduce_dtype"] == "fp32" and bf16.to_dict()["grad_reduce_dtype"] == "bf16"
    # The same layout needs less memory, so more layouts fit.
    assert len(bf16.fitting) > len(fp32.fitting)
    def memory(result, layout: Layout) -> float:
        return next(r.memory_total_gib for r in result.layouts if r.sharding == "optimizer" and r.layout == layout)

    tp4_pp8 = next(r.layout for r in fp32.layouts if (r.layout.tp, r.layout.pp, r.layout.cp) == (4, 8, 1)
                   and r.sharding == "optimizer")
    # 405B / (TP4 x PP8) = 12.7B parameters a GPU, d = 4: 2 - 4/4 = 1 byte each less, about 12 GiB.
    assert memory(fp32, tp4_pp8) - memory(bf16, tp4_pp8) == pytest.approx(12.5, abs=1.5)


def test_cli_plan_flag_and_text(capsys):
    assert main(["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100",
                 "--grad-reduce-dtype", "bf16", "--format", "json", "--top", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["grad_reduce_dtype"] == "bf16"
    assert main(["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100",
                 "--grad-reduce-dtype", "bf16", "--top", "1"]) == 0
    assert "bf16 gradient reduce" in capsys.readouterr().out


def test_benchmark_recipes_state_bf16_and_library_recipes_do_not():
    kinds = {"benchmark": set(), "library": set()}
    for path in (RECIPES_DIR / "megatron").rglob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        kinds[data["metadata"]["kind"]].add(data["distributed"].get("grad_reduce_dtype"))
    assert kinds == {"benchmark": {"bf16"}, "library": {None}}


def test_validate_estimates_the_recipes_own_gradient_buffer():
    """A Bridge benchmark recipe that warns only under the fp32 assumption."""
    path = RECIPES_DIR / "megatron" / "deepseek" / "deepseek_v3_pretrain_256gpu_gb200_bf16.yaml"
    text = path.read_text()
    assert "grad_reduce_dtype: bf16" in text
    as_shipped = [f for f in validate_text(text, str(path)).findings if f.code == "RA-M002"]
    as_fp32 = [f for f in validate_text(text.replace("grad_reduce_dtype: bf16", "grad_reduce_dtype: fp32"),
                                        str(path)).findings if f.code == "RA-M002"]
    assert "exceeds" in as_fp32[0].message
    assert not as_shipped or "exceeds" not in as_shipped[0].message


def test_a_bad_value_names_the_key_and_line():
    text = "distributed:\n  strategy: megatron\n  grad_reduce_dtype: fp8\n"
    bad = [f for f in validate_text(text, "c.yaml").findings if f.key == "distributed.grad_reduce_dtype"]
    assert bad and bad[0].severity == "error" and bad[0].line == 3


def test_diff_calls_it_a_convergence_change():
    base = {"distributed": {"tp_size": 2}}
    new = {"distributed": {"tp_size": 2, "grad_reduce_dtype": "bf16"}}
    assert [(c.key, c.layer) for c in diff(base, new)] == [("distributed.grad_reduce_dtype", "convergence")]
    # Megatron's own spelling, as in a Bridge override.
    bridge = diff({"ddp": {"grad_reduce_in_fp32": True}}, {"ddp": {"grad_reduce_in_fp32": False}})
    assert [c.layer for c in bridge] == ["convergence"]


def test_recommend_writes_it_lists_it_and_withholds_the_bridge_command():
    rec = recommend("llama3-8b", 8, "h100", grad_reduce_dtype="bf16")
    assert rec.config["distributed"]["grad_reduce_dtype"] == "bf16"
    assert rec.plan.request.grad_reduce_dtype == "bf16"
    assert ("distributed.grad_reduce_dtype", "convergence") in [(c.key, c.layer) for c in rec.changes]
    assert "megatron_bridge" not in rec.commands
    assert any("distributed.grad_reduce_dtype" in n for n in rec.notes if n.startswith("no Megatron Bridge"))
    assert not [f for f in rec.findings if f.severity == "error"]


def test_recommend_leaves_the_recipes_default_out():
    rec = recommend("llama3-8b", 8, "h100")
    assert "grad_reduce_dtype" not in rec.config["distributed"]
    assert "megatron_bridge" in rec.commands


def test_http_plan_and_recommend_take_it(client):
    body = {"model": "llama3-8b", "gpus": 8, "gpu_type": "h100", "grad_reduce_dtype": "bf16"}
    assert client.post("/v1/plan", json={**body, "top": 1}).json()["grad_reduce_dtype"] == "bf16"
    rec = client.post("/v1/recommend", json=body)
    assert rec.status_code == 200 and "grad_reduce_dtype: bf16" in rec.json()["config_yaml"]
    bad = client.post("/v1/plan", json={**body, "grad_reduce_dtype": "fp8"})
    assert bad.status_code in (400, 422) and "grad_reduce_dtype" in bad.text
