"""The layout rules accept a layout if and only if a brute-force definition of validity does.

The brute force states what Megatron needs in terms of explicit objects
(rank grids, head assignments, per-stage layer counts) and searches for
them, instead of the rules' arithmetic shortcuts.
"""


from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from recipe_index.cards import ModelCard
from service.facts import Facts, Layout
from service.validate.checks import check_layout


def _grid_exists(world: int, dims: tuple[int, ...]) -> bool:
    """Ranks 0..world-1 tile a grid of these dims times a whole DP: try every DP."""
    for dp in range(1, world + 1):
        size = dp
        for d in dims:
            size *= d
        if size == world:
            return True
    return False


def _heads_split(heads: int, tp: int) -> bool:
    return any(per * tp == heads for per in range(1, heads + 1))


def _kv_split(kv: int, tp: int) -> bool:
    # each rank holds whole KV groups, or each group is replicated on a whole number of ranks
    return any(per * tp == kv for per in range(1, kv + 1)) or any(rep * kv == tp for rep in range(1, tp + 1))


def _compositions(total: int, parts: int):
    if parts == 1:
        if total >= 1:
            yield (total,)
        return
    for first in range(1, total - parts + 2):
        for rest in _compositions(total - first, parts - 1):
            yield (first,) + rest


def _layers_split(layers: int, pp: int, vp: int) -> bool:
    """Some per-stage assignment that Megatron accepts (even, embedding/loss counted, or uneven ends)."""
    if pp == 1:
        return True
    for counts in _compositions(layers, pp):
        if all(c % vp == 0 for c in counts) and len(set(counts)) == 1:
            return True
        for emb, loss in ((1, 1), (1, 0), (0, 1)):
            padded = list(counts)
            padded[0] += emb
            padded[-1] += loss
            if len(set(padded)) == 1 and padded[0] % vp == 0 and padded[0] > emb + loss:
                return True
        middle = counts[1:-1]
        if all(c % vp == 0 for c in counts) and len(set(middle)) <= 1:
            return True
    return False


def brute_force_valid(model: ModelCard, lay: Layout, world: int, gbs: int, seq: int) -> bool:
    if not _heads_split(model.num_attention_heads, lay.tp):
        return False
    if not _kv_split(model.num_key_value_heads, lay.tp):
        return False
    if not _grid_exists(world, (lay.tp, lay.pp, lay.cp)) or not _grid_exists(world, (lay.pp, lay.ep, lay.etp)):
        return False
    if lay.ep > 1 and (not model.is_moe or not any(k * lay.ep == model.num_experts for k in range(1, 257))):
        return False
    if lay.vp and lay.vp > 1 and lay.pp == 1:
        return False
    if not _layers_split(model.num_hidden_layers, lay.pp, lay.vp or 1):
        return False
    if lay.cp > 1 and not any(chunk * 2 * lay.cp == seq for chunk in range(1, seq + 1)):
        return False
    if lay.sp and lay.tp > 1 and not any(share * lay.tp * lay.cp == seq for share in range(1, seq + 1)):
        return False  # sequence parallel scatters each CP rank's tokens evenly over TP (RA-L018)
    dp = world // (lay.tp * lay.pp * lay.cp)
    return any(acc * lay.micro_batch_size * dp == gbs for acc in range(1, gbs + 1))


small = st.sampled_from
models = st.builds(
    lambda heads_kv, layers, experts: ModelCard(
        id="m", hidden_size=heads_kv[0] * 8, num_hidden_layers=layers, num_attention_heads=heads_kv[0],
        num_key_value_heads=heads_kv[1], head_dim=8, intermediate_size=64, vocab_size=128,
        num_experts=experts, num_experts_per_tok=2 if experts else 0),
    st.sampled_from([(8, 8), (8, 2), (12, 4), (16, 8), (6, 6), (12, 3), (32, 8), (10, 5)]),
    st.integers(2, 16),
    st.sampled_from([0, 6, 8, 16]),
)
layouts = st.builds(
    Layout, tp=small([1, 2, 3, 4, 8]), pp=small([1, 2, 3, 4]), vp=small([None, None, 2, 3]), cp=small([1, 1, 2, 3]),
    ep=small([1, 1, 2, 4, 8]), etp=small([1, 2]), sp=st.booleans(), micro_batch_size=small([1, 2, 3]),
)


def _lcm(a: int, b: int) -> int:
    from math import gcd

    return a * b // gcd(a, b)


@settings(max_examples=500, deadline=None)
@given(model=models, lay=layouts, data=st.data())
def test_rules_accept_iff_brute_force_does(model, lay, data):
    # Half the worlds and batches are drawn aligned with the layout so valid cases are common too.
    if data.draw(st.booleans(), label="aligned world"):
        world = _lcm(lay.tp * lay.pp * lay.cp, lay.pp * lay.ep * lay.etp) * data.draw(st.integers(1, 3))
    else:
        world = data.draw(st.integers(1, 32), label="world")
    dp = max(world // (lay.tp * lay.pp * lay.cp), 1)
    if data.draw(st.booleans(), label="aligned batch"):
        gbs = lay.micro_batch_size * dp * data.draw(st.integers(1, 4))
    else:
        gbs = data.draw(st.integers(1, 96), label="gbs")
    seq = data.draw(small([2048, 4096, 4098, 6000, 4099]), label="seq")
    # The planner's facts: the config it builds writes the split Megatron needs, so any split that exists counts.
    facts = Facts(layout=lay, world_size=world, model=model, hardware=None, global_batch_size=gbs, seq_length=seq,
                  precision="bf16", strategy="megatron", extra={"planner": True})
    errors = [f.code for f in check_layout(facts) if f.severity == "error"]
    assert (not errors) == brute_force_valid(model, lay, world, gbs, seq), errors
    # A config as written places nothing: Megatron then asserts an even split (or no pipeline).
    as_written = [f.code for f in check_layout(replace(facts, extra={})) if f.severity == "error"]
    uneven = lay.pp > 1 and model.num_hidden_layers % (lay.pp * (lay.vp or 1)) != 0
    assert ("RA-L011" in as_written) == (uneven or "RA-L011" in errors)
