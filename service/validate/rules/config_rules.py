"""Rules over a whole config file: schema, security of `_target_`, and the
recipe-level consistency checks (metadata vs values, model vs dataset)."""

from __future__ import annotations

from difflib import get_close_matches
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Iterator, Optional

from recipe_index import get_recipe, list_recipes
from recipe_index.cards import HardwareCard
from recipe_index.errors import UnknownRecipeError
from service.validate.rules.precision import FP8_RECIPES, PRECISION_TOKEN, precision_of_token, token_runs_on
from service.validate.rules.registry import Violation, config_rule
from service.validate.rules.targets import TargetNotFound, is_registered, unknown_kwargs
from trainer.contract import target_registry
from trainer.contract.config import (
    MAX_TARGET_CHARS,
    TARGET_SECTIONS,
    section_fields,
    section_type,
    top_level_keys,
)
from trainer.contract.source_reader import module_file
from trainer.contract.text import clipped

if TYPE_CHECKING:  # pragma: no cover
    from service.validate.view import ConfigView


# A posted config may hold thousands of unknown keys: the difflib search runs only for the findings validate
# lists (the fix is deferred), is bounded by the candidates it compares and the length of the word it compares,
# and remembered, since one typo tends to recur across files and requests.
MAX_SUGGESTION_CANDIDATES = 64
MAX_SUGGESTED_WORD = 64


def _did_you_mean(word: str, options, tail: str = "") -> str:
    known = sorted(options)[:MAX_SUGGESTION_CANDIDATES]
    close = _closest(word, tuple(known)) if len(word) <= MAX_SUGGESTED_WORD else None
    if close is not None:
        return f"did you mean `{close}`?{tail}"
    more = len(options) - len(known)
    return f"known keys: {', '.join(known)}" + (f" and {more} more" if more > 0 else "") + tail


@lru_cache(maxsize=4096)
def _closest(word: str, candidates: tuple[str, ...]) -> Optional[str]:
    close = get_close_matches(word, candidates, n=1)
    return close[0] if close else None


@config_rule("RA-C001", "error", "", "known sections and keys",
             "trainer/contract/config.py schema; docs/config.md")
def unknown_keys(view: "ConfigView") -> Iterator[Violation]:
    for key, options in view.unknown_keys:
        dotted = _literal_dotted_key(view.doc.data, key)
        if dotted:  # `optimizer.lr: 0.1`, the override spelling, read as one key named "optimizer.lr"
            head, _, rest = dotted.partition(".")
            parent = key[:-len(dotted)].rstrip(".")
            known = section_fields(parent) if parent else top_level_keys()
            # Nesting helps only under a section: `optimizer.lr`, not `distributed.` or `seed.x` under rng.
            nests = not parent and rest and head in known and section_type(head) is not None
            fix = (f"nest it: `{head}:` on one line and `  {rest}: ...` under it" if nests
                   else partial(_did_you_mean, dotted.replace(".", "_").strip("_"), known) if known
                   else "write it as nested YAML")
            yield Violation(f"unknown key `{dotted}`: a YAML key is one name, not a dotted path (that is the "
                            f"spelling of an override, --{key})", fix, key=key)
            continue
        leaf = key.rpartition(".")[2]
        where = "section" if "." not in key else f"key in `{key.rpartition('.')[0]}`"
        yield Violation(f"unknown {where} `{leaf}`", partial(_did_you_mean, leaf, options, " (remove it if not)"),
                        key=key)


def _literal_dotted_key(data: object, path: str) -> Optional[str]:
    """The key with a dot in its name that ``path`` (a dotted key path) runs through, if any."""
    parts, node, i = path.split("."), data, 0
    while i < len(parts) and isinstance(node, dict):
        for j in range(len(parts), i, -1):
            name = ".".join(parts[i:j])
            if name in node:
                if j - i > 1:
                    return name
                node, i = node[name], j
                break
        else:
            return None
    return None


@config_rule("RA-C002", "error", "", "values have the right type and range", "trainer/contract/config.py schema")
def invalid_values(view: "ConfigView") -> Iterator[Violation]:
    for key, message, fix in view.invalid_values:
        yield Violation(message, fix, key=key)


@config_rule("RA-C003", "warning", "", "no duplicate keys", "YAML keeps only the last of duplicate keys")
def duplicate_keys(view: "ConfigView") -> Iterator[Violation]:
    for key, line, _ in view.doc.duplicates:
        yield Violation(f"`{key}` is set twice; YAML silently keeps the last value (line {line})",
                        "delete one of the two", key=key)


@config_rule("RA-C004", "warning", "model.seq_length", "model and dataset sequence lengths agree",
             "Bridge run_recipe syncs model.seq_length to dataset.seq_length (Megatron Bridge 2); before it "
             "(v0.6.0, commit e28e1ca3) training/config.py ConfigContainer.validate() asserts they match")
def model_dataset_seq_length(view: "ConfigView") -> Optional[Violation]:
    from trainer.contract.bridge_version import SEQ_LENGTH_SYNC, parse_bridge_version

    cfg = view.config
    if cfg is None or not cfg.model.seq_length or not cfg.dataset.seq_length:
        return None
    if cfg.model.seq_length == cfg.dataset.seq_length:
        return None
    version = view.bridge_version() if cfg.distributed.strategy == "megatron" else None
    if version is not None and not SEQ_LENGTH_SYNC.applies_after(parse_bridge_version(version)):
        return Violation(f"model.seq_length={cfg.model.seq_length} differs from dataset.seq_length="
                         f"{cfg.dataset.seq_length}: before {SEQ_LENGTH_SYNC.since} nothing syncs them and "
                         f"ConfigContainer.validate() asserts they match at start-up (bridge_version {version})",
                         f"set model.seq_length: {cfg.dataset.seq_length} or remove it", severity="error")
    return Violation(f"model.seq_length={cfg.model.seq_length} differs from dataset.seq_length="
                     f"{cfg.dataset.seq_length}; the runner overwrites the model value with the dataset's",
                     f"set model.seq_length: {cfg.dataset.seq_length} or remove it")


def _tokens_for(precision: str) -> str:
    return " or ".join(FP8_RECIPES) if precision == "fp8" else precision


def _indexed_recipe(name: Optional[str]):
    """The index's entry for a Megatron Bridge recipe name, or None."""
    try:
        return get_recipe(name) if name else None
    except UnknownRecipeError:
        return None


def _bridge_recipe_trains_in(name: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """(precision, FP8 recipe token) Megatron Bridge's recipe ``name`` really trains in, as the index records
    it ((None, None) when the index does not hold it). A few upstream names say bf16 for an fp8 recipe
    (Megatron Bridge's recipe consistency checks: nemotronh_56b_pretrain_8gpu_h100_bf16_config runs fp8cs)."""
    entry = _indexed_recipe(name)
    if entry is None or entry.megatron_recipe != name:
        return None, None
    return entry.precision, entry.precision_recipe if entry.precision_recipe in FP8_RECIPES else None


@lru_cache(maxsize=None)
def _recipe_tokens(model: Optional[str] = None) -> frozenset[str]:
    """The precision tokens the index's Megatron Bridge recipes (of ``model``, or all) train with: no fp16, fp8ds
    or fp8sc among them."""
    return frozenset(e.precision_recipe for e in list_recipes()
                     if e.kind != "bundled" and e.precision_recipe and model in (None, e.model))


def _another_experiment(name: str, runs: str, asked: str, keep: str, *, trains: str, label: Optional[str],
                        token: Optional[str] = None, also: str = "", key: Optional[str] = None,
                        hw: Optional[HardwareCard] = None) -> Violation:
    """The config trains in ``trains`` (its ``metadata.precision_recipe``: ``label``), Megatron Bridge's recipe
    ``name`` in ``runs``: another experiment, which Bridge's command for that recipe would run as the recipe does.
    ``asked``: the precision or FP8 recipe to point at a recipe of; ``keep``: how to train as the recipe does;
    ``token``: the precision token of the recipe's name, to name its variant; ``also``: what pointing at another
    recipe needs besides."""
    indexed, entry = _recipe_tokens(), _indexed_recipe(name)
    own = _recipe_tokens(entry.model) if entry and entry.model else None  # None: the recipe's model is unknown
    named = name.replace(f"_{token}", f"_{asked}", 1) if token else None
    wanted = [asked] if asked != "fp8" else [t for t in FP8_RECIPES if hw is None or token_runs_on(t, hw)]
    have = [t for t in wanted if t in (indexed if own is None else own)]
    own_recipe = "a recipe function of your own whose mixed precision is " + asked
    if named and named != name and _indexed_recipe(named):
        variant = f"Bridge's {asked} variant, {named}"
    elif have:
        where = "where Bridge has one for this model" if own is None else "the index holds this model's"
        variant = f"Bridge's {' or '.join(f'*_{t}' for t in have)} recipes, {where}"
    elif any(t in indexed for t in wanted):
        variant = f"the index has no {asked} recipe of this model: {own_recipe}"
    else:
        variant = f"Bridge has no {asked} recipes: {own_recipe}"
    labelled = f" (metadata.precision_recipe: {label})" if label else ""
    return Violation(f"metadata.megatron_recipe {name} is Megatron Bridge's {runs} recipe, and this config trains in "
                     f"{trains}{labelled}: another experiment than the recipe, which Bridge's command for it would run "
                     f"in {runs}",
                     f"{keep}point metadata.megatron_recipe at a recipe of this model that trains in {asked} "
                     f"({variant}){also}", key=key)


@config_rule("RA-C005", "warning", "precision", "recipe name's precision matches the config",
             "Bridge naming <model>_<task>_<N>gpu_<hw>_<precision>_config (Megatron Bridge 1)")
def name_precision_matches(view: "ConfigView") -> Optional[Violation]:
    """The name's token and ``metadata.precision_recipe`` are labels; ``precision`` is what trains.
    Each label is judged against ``precision`` on its own, so a matching label cannot hide a name
    that says something else (nor the reverse)."""
    cfg = view.config
    meta = cfg.metadata if cfg else None
    if meta is None:
        return None
    actual, label = cfg.precision, meta.precision_recipe
    name = meta.megatron_recipe or meta.name
    match = PRECISION_TOKEN.search(name or "")
    token = match.group(1) if match else None
    label_precision = precision_of_token(label) if label else None
    bridge, bridge_scaling = _bridge_recipe_trains_in(meta.megatron_recipe)
    if bridge_scaling and label in FP8_RECIPES and label != bridge_scaling and actual == "fp8":  # another scaling
        return _another_experiment(name, bridge_scaling, label, f"set metadata.precision_recipe: {bridge_scaling} to "
                                   "train as the recipe does, or ", trains=actual, label=label,
                                   key="metadata.precision_recipe")
    relabel_as_recipe = (f" (and metadata.precision_recipe: {bridge_scaling})"
                         if label and bridge_scaling and label != bridge_scaling else "")
    if token and precision_of_token(token) == actual and bridge not in (None, actual):
        return Violation(f"metadata.megatron_recipe {name} says {token} in its name, but Megatron Bridge's recipe "
                         f"trains in {bridge} (an upstream naming slip), and this config trains in {actual}: another "
                         f"experiment than the recipe, which Bridge's command for it would run in {bridge}",
                         f"set precision: {bridge}{relabel_as_recipe} to train as Bridge's recipe does; to keep "
                         f"{actual}, Bridge needs a recipe function of your own whose mixed precision is {actual}")
    runs_as = bridge_scaling or bridge
    if token and precision_of_token(token) != actual and bridge == actual and label and label != runs_as:
        return Violation(f"metadata.precision_recipe {label} means precision {label_precision}, but the config "
                         f"trains in precision {actual}, as Megatron Bridge's recipe {name} does ({runs_as}; its "
                         f"name says {token}, an upstream slip)", f"set metadata.precision_recipe: {runs_as}",
                         key="metadata.precision_recipe")
    if token and precision_of_token(token) != actual and bridge == actual:
        return Violation(f"Megatron Bridge's recipe {name} says {token} in its name but trains in {actual} itself "
                         f"(its precision config is {runs_as}): this config trains as the recipe "
                         "does; the name is upstream's",
                         f"none needed; precision: {precision_of_token(token)} would be another experiment than "
                         "Bridge's recipe", severity="info")
    if token and precision_of_token(token) != actual:
        # What Bridge's recipe runs: the index's record where it holds the recipe (a few names say bf16 for fp8cs).
        runs_token = (bridge_scaling or bridge) if bridge else token
        named = precision_of_token(runs_token)
        hw = view.facts.hardware if view.facts else None
        # Only a precision the GPU has tensor cores for (RA-P001/P002 would refuse the other).
        runs = hw is None or token_runs_on(runs_token, hw)
        relabel = " and set metadata.precision_recipe to the same" if label and label_precision != actual else ""
        if meta.megatron_recipe:  # Bridge's function, not the config's own name: another recipe, not a rename
            # A label in the config's precision records a deliberate change (recommend --precision).
            asked = label if label_precision == actual else actual
            keep = (f"set precision: {named}{f' (and metadata.precision_recipe: {runs_token})' if label else ''} to "
                    "train as the recipe does, or ") if runs else ""
            return _another_experiment(name, runs_token, asked, keep, trains=actual, label=label,
                                       token=token if runs_token == token else None, also=relabel, hw=hw)
        labelled = f" (metadata.precision_recipe: {label})" if label else ""
        tokens = label if label_precision == actual else _tokens_for(actual)
        relabel_as_named = f" (and metadata.precision_recipe: {token})" if label else ""
        keep = f"set precision: {named}{relabel_as_named} to train as the name says, or " if runs else ""
        return Violation(f"recipe {name} says {token} in its name{labelled} but the config trains in "
                         f"precision {actual}", f"{keep}rename the recipe to say {tokens}{relabel}")
    if label_precision is not None and label_precision != actual:
        # Under a Bridge recipe whose precision is the config's, only that recipe's own token trains as it does.
        relabel_to = runs_as if bridge == actual and runs_as else (token or _tokens_for(actual))
        change = f", or precision: {label_precision}" if not meta.megatron_recipe else ""
        return Violation(f"metadata.precision_recipe {label} means precision {label_precision}, but the config "
                         f"trains in precision {actual}", f"set metadata.precision_recipe: {relabel_to}{change}",
                         key="metadata.precision_recipe")
    if token and label_precision is not None and token != label:
        if meta.megatron_recipe and token in FP8_RECIPES and label in FP8_RECIPES:  # not indexed: its name says
            return _another_experiment(name, token, label, f"set metadata.precision_recipe: {token} to train as the "
                                       "recipe does, or ", trains=actual, label=label, token=token,
                                       key="metadata.precision_recipe")
        return Violation(f"recipe {name} says {token} in its name but metadata.precision_recipe is {label}",
                         f"set metadata.precision_recipe: {token}, or rename the recipe to say {label}",
                         key="metadata.precision_recipe")
    return None


@config_rule("RA-C006", "warning", "hardware", "the recipe's GPU count matches the hardware block",
             "Bridge benchmark recipes must run on exactly the GPU count in their name")
def metadata_gpu_count(view: "ConfigView") -> Optional[Violation]:
    meta = view.config.metadata if view.config else None
    if meta is None or not meta.num_gpus or view.facts is None:
        return None
    if meta.num_gpus == view.facts.world_size:
        return None
    return Violation(f"recipe {meta.name} is sized for {meta.num_gpus} GPUs but runs on {view.facts.world_size}",
                     "re-plan the layout for this GPU count (recipe-advisor plan), keeping the global batch")


@config_rule("RA-C007", "warning", "dataset.preset", "mock data only for pretraining",
             "first-answer checklist: do not pair mock with SFT or PEFT")
def mock_data_only_for_pretraining(view: "ConfigView") -> Optional[Violation]:
    cfg = view.config
    if cfg is None or cfg.metadata is None or cfg.metadata.mode == "pretrain":
        return None
    if str(cfg.dataset.kwargs().get("preset", "")).lower() != "mock":
        return None
    return Violation(f"mode {cfg.metadata.mode} with the pretraining-only mock dataset",
                     "use a fine-tuning dataset (e.g. preset: squad) for SFT/PEFT")


@config_rule("RA-C008", "warning", "peft", "PEFT mode and peft section agree", "decision tree: PEFT -> *_peft")
def peft_mode_consistent(view: "ConfigView") -> Optional[Violation]:
    cfg = view.config
    if cfg is None or cfg.metadata is None:
        return None
    if cfg.metadata.mode == "peft" and cfg.peft is None:
        return Violation("metadata.mode is peft but there is no peft section: every weight would train",
                         "add `peft: {method: lora, rank: 32, alpha: 32}`", key="metadata.mode")
    if cfg.metadata.mode != "peft" and cfg.peft is not None:
        return Violation(f"a peft section in a {cfg.metadata.mode} recipe", "set metadata.mode: peft or drop `peft`")
    return None


@config_rule("RA-C009", "warning", "model.pretrained_model_name_or_path", "the model resolves",
             "recipe_index resolution: bundled id/alias, local config.json, Hugging Face cache; a config.json that "
             "is found but cannot describe a model is an error (plan, recommend and train refuse it too)")
def model_resolves(view: "ConfigView") -> Optional[Violation]:
    if view.model_error is None:
        return None
    if not view.model_unknown:  # found, but its config.json cannot describe a model (it names the bad field)
        return Violation(f"{view.model_error}; the trainer cannot build this model, and model-dependent rules "
                         "were skipped", "correct the named field of the config.json (the model's Hugging Face "
                         "original has the right value), or name a bundled model id (`recipe-advisor models`)",
                         severity="error")
    return Violation(f"{view.model_error}; model-dependent rules were skipped",
                     "name a bundled model id (`recipe-advisor models`, GET /v1/models); the CLI also takes a "
                     "local config.json or its folder, or a Hugging Face repo id whose config is in the HF cache")


@config_rule("RA-C010", "warning", "hardware.gpu_type", "the hardware resolves", "recipe_index/hardware.yaml")
def hardware_resolves(view: "ConfigView") -> Optional[Violation]:
    if view.hardware_error is None:
        return None
    return Violation(f"{view.hardware_error}; hardware rules were skipped",
                     "use a known gpu_type (recipe-advisor hardware)")


@config_rule("RA-C011", "warning", "dataset.seq_length", "sequence lengths within the model's context",
             "HF config.json max_position_embeddings; a warning for Megatron because RoPE scaling can extend it, "
             "an error for the bundled trainer, which refuses longer sequences (trainer/contract/model_checks.py)")
def seq_length_within_context(view: "ConfigView") -> Iterator[Violation]:
    """The training sequence (``dataset.seq_length``, else ``model.seq_length``) and the validation
    sequence are judged alike: a validation pass at 100000 tokens runs as long as training would."""
    cfg, facts = view.config, view.facts
    model = facts.model if facts else None
    if cfg is None or model is None or not model.max_position_embeddings:
        return
    positions = model.max_position_embeddings
    judged = [("dataset.seq_length" if cfg.dataset.seq_length else "model.seq_length", cfg.seq_length)]
    if cfg.validation_dataset is not None:
        judged.append(("validation_dataset.seq_length", cfg.validation_dataset.seq_length))
    scaling = (model.rope_scaling or {}).get("rope_type") or (model.rope_scaling or {}).get("type")
    for key, seq in judged:
        if not seq or seq <= positions:
            continue
        # The bundled trainer reads the dataset sections' lengths (never model.seq_length) and refuses these.
        if cfg.distributed.strategy != "megatron" and key != "model.seq_length":
            yield Violation(f"{key}={seq} exceeds the model's max_position_embeddings={positions}; the bundled "
                            "trainer refuses sequences longer than the model's positions",
                            f"lower {key} to {positions} or less, or use a model whose config.json declares a "
                            "longer context (a larger max_position_embeddings, e.g. with RoPE scaling)",
                            severity="error", key=key)
            continue
        note = f" (its rope_scaling `{scaling}` may already cover this; check the factor)" if scaling else ""
        yield Violation(f"{key}={seq} exceeds the model's max_position_embeddings={positions}{note}",
                        f"lower {key} to {positions} or less, or use a model (or RoPE scaling, e.g. yarn) that "
                        "supports this context", key=key)


@config_rule("RA-C012", "warning", "hardware.gpus_per_node", "GPUs per node within the hardware's node",
             "recipe_index/hardware.yaml gpus_per_node (plan and recommend refuse more)")
def gpus_per_node_within_node(view: "ConfigView") -> Optional[Violation]:
    facts = view.facts
    hw = facts.hardware if facts else None
    if hw is None or not facts.gpus_per_node or facts.gpus_per_node <= hw.gpus_per_node:
        return None
    given, node, world = facts.gpus_per_node, hw.gpus_per_node, facts.world_size
    whole = world % node == 0
    if view.gpus_flag is not None:
        told = f"--gpus {view.gpus_flag} (read as {given} GPUs per node)"
        fix = (f"pass --gpus {world} (the total: {world // node} nodes of {node}) or --gpus {node} --nodes "
               f"{world // node}" if whole else f"pass a GPU count that fills whole {hw.name} nodes of {node}")
    else:
        told = f"hardware.gpus_per_node={given}"
        fix = (f"set hardware.gpus_per_node: {node} and hardware.num_nodes: {world // node} (the same {world} GPUs)"
               if whole else f"set hardware.gpus_per_node: {node} and re-plan for a GPU count that fills whole "
               f"nodes of {node} (recipe-advisor plan)")
    return Violation(f"{told}, but one {hw.name} node has {node} GPUs; the layout rules (NVLink domain, "
                     "TP within the node) and the launch commands would assume GPUs that are not there", fix)


@config_rule("RA-C013", "warning", "lr_scheduler", "the LR schedule reaches its peak and decays",
             "trainer/components/lr_schedule.py: warmup to optimizer.lr, then decay to min_lr")
def lr_schedule_sensible(view: "ConfigView") -> Iterator[Violation]:
    cfg = view.config
    if cfg is None:
        return
    sched, lr = cfg.lr_scheduler, cfg.optimizer.lr
    if lr is not None and sched.schedule != "constant" and sched.min_lr > lr:
        yield Violation(f"lr_scheduler.min_lr={sched.min_lr:g} is above optimizer.lr={lr:g}: the \"decay\" after "
                        "warmup raises the learning rate", f"set lr_scheduler.min_lr below {lr:g} (often lr/10)",
                        key="lr_scheduler.min_lr")
    # decay_steps count after the warmup (trainer/components/lr_schedule.py), so only the run's length bounds it.
    steps = cfg.step_scheduler.max_steps
    if steps and sched.warmup_steps > steps:
        yield Violation(f"lr_scheduler.warmup_steps={sched.warmup_steps} is above step_scheduler.max_steps={steps}: "
                        "the run never reaches its peak learning rate",
                        f"set lr_scheduler.warmup_steps to at most {steps} (usually a few percent of it)",
                        key="lr_scheduler.warmup_steps")


@config_rule("RA-C014", "info", "hardware", "how --gpus was read",
             "docs/cli.md: --gpus is GPUs per node, unless it fills whole nodes beyond one (then the total)")
def gpus_flag_reading(view: "ConfigView") -> Optional[Violation]:
    """Say which reading of --gpus was judged where the two differ: one count above the node size is
    the total, one within it is per node on the file's nodes (``--gpus 8`` on a 4-node file is 32)."""
    facts, flag = view.facts, view.gpus_flag
    if flag is None or view.nodes_flag is not None or facts is None or view.config is None or not facts.gpus_per_node:
        return None  # with --nodes there is one reading
    gpn = facts.gpus_per_node
    nodes = facts.world_size // gpn
    if view.gpus_read_as_total:
        reading, exact = f"the total: {nodes} nodes of {gpn}", f"--gpus {gpn} --nodes {nodes}"
    elif nodes > 1:
        reading = f"GPUs per node, on the file's {nodes} nodes"
        exact = f"--gpus {flag} --nodes {nodes}, or --gpus {flag} --nodes 1 for {flag} in all"
    else:
        return None
    return Violation(f"judged on {facts.world_size} GPUs: --gpus {flag} (API: gpus) was read as {reading}",
                     f"say it exactly with --nodes (API: nodes): {exact}")


def _targets(node, key: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        target = node.get("_target_")
        if target is not None:
            yield key, target
        for k, v in node.items():
            yield from _targets(v, f"{key}.{k}" if key else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _targets(v, f"{key}[{i}]")


@config_rule("RA-S001", "error", "", "`_target_` only from the registry of its section",
             "configs are data: only trainer/contract/target_registry.py's callables are imported or called")
def target_allowed(view: "ConfigView") -> Iterator[Violation]:
    for key, target in _targets(view.doc.data):
        if is_registered(key, target):
            continue
        where = f"{key}._target_" if key else "_target_"
        shown = clipped(repr(target), 80, 60)  # an aliased huge string would be echoed in every finding
        if not target_registry.REGISTRY.get(key):
            place = f"`{key}`" if key else "the top level"
            yield Violation(f"_target_ {shown} at {place}: no callable may be named there (configs are data); it "
                            "was not imported", "remove the _target_ (the registry: docs/trainer.md)", key=where)
            continue
        why = target_registry.NOT_REGISTERED_BECAUSE.get(str(target))
        yield Violation(f"_target_ {shown} is not a registered {key} callable" + (f" ({why})" if why else "")
                        + f"; it was not imported (at most {MAX_TARGET_CHARS} characters, public names only)",
                        partial(_nearest_registered, key, target), key=where)


def _nearest_registered(section: str, target: object) -> str:
    return f"name one of the registry's: {', '.join(target_registry.nearest_names(section, target))}"


# Keys of a `_target_` section the trainer consumes itself and passes on under its own names (the model
# builder gets name_or_path, dtype, kernels: trainer/recipes/model_io.py), so not the target's keywords.
TRAINER_READS = {"model": ("pretrained_model_name_or_path", "seq_length", "dtype", "kernels")}


@config_rule("RA-S002", "error", "", "`_target_` exists and takes the given keywords",
             "signature read from source with ast, never imported (cf. torchtune `tune validate`)")
def target_signature(view: "ConfigView") -> Iterator[Violation]:
    for section in TARGET_SECTIONS:
        node = view.doc.data.get(section)
        if not isinstance(node, dict) or not is_registered(section, node.get("_target_")):
            continue
        target = node["_target_"]
        kwargs = [k for k in node if k != "_target_" and k not in TRAINER_READS.get(section, ())]
        try:
            bad = unknown_kwargs(target, kwargs)
        except TargetNotFound as exc:
            package = target.split(".")[0]
            if module_file(package) is None:  # torch, the trainer's own dependency, absent from a serving-only
                continue  # install (the Docker image, pre-commit): no typo, and `train` says what to install
            yield Violation(f"_target_ {target} cannot be found ({exc})", "check the spelling of the dotted path",
                            key=f"{section}._target_")
            continue
        except (OSError, SyntaxError, ValueError):
            continue  # source unreadable: nothing to check against
        for kwarg, close in bad:
            hint = f"did you mean `{close[0]}`?" if close else "remove it"
            yield Violation(f"{target} takes no keyword `{kwarg}`", hint, key=f"{section}.{kwarg}")
