"""AutoModel's schema at the recipe's version: sections it reads, keys its checked sections take, `_target_` names.

Each rule judges one version (``check(view, index)``: violations, or None where that version has no say, e.g. a
signature that takes ``**kwargs``); ``across`` judges the versions the recipe is for (``versions.Judged``): a
finding under every one is the rule's error; under some, a warning that names them and ``metadata.automodel_version``.
With no version stated, a recipe is judged under the releases and the newest ``main`` that have every section and
target it uses (it cannot be for a release older than a name it uses), so a name AutoModel later renamed or
removed is a warning, and one it never had an error.
"""

from __future__ import annotations

from difflib import get_close_matches
from functools import lru_cache
from typing import Callable, Iterable, Iterator, Optional

from service.validate.automodel.schema import DEFAULT_STRATEGY, DISTRIBUTED_COMMON
from service.validate.automodel.targets import keywords, walk_targets
from service.validate.automodel.versions import FORMS, VERSION_KEY, AutomodelSchema, Judged, schema
from service.validate.automodel.view import RecipeView
from service.validate.rules.registry import Violation, automodel_rule

PACKAGE = "nemo_automodel."
Check = Callable[[RecipeView, int], Optional[Iterable[Violation]]]
# The LLM recipe's classes (train_ft.py) whose sections the schema lists; other recipes read other sections.
LLM_RECIPES = ("TrainFinetuneRecipeForNextTokenPrediction",)
STRICT_SECTIONS = ("step_scheduler", "distributed.pipeline", "distributed.moe")


def judged_for(data: dict, stated: Optional[str], source: str) -> Judged:
    """The versions a recipe is judged under (ValueError when ``stated`` names none)."""
    known = schema()
    if stated is not None:
        return known.judged(stated, source)
    lower = _newest_first_use(known, data)
    unknown = known.unknown()
    return Judged(tuple(i for i in unknown.indices if i >= lower) or (known.newest,))


def _newest_first_use(known: AutomodelSchema, data: dict) -> int:
    """The first version that has every section, target, keyword and checked key the recipe uses (a name no
    version has says nothing about the version: it is the finding)."""
    lower = 0
    for name in data:
        read = known.ever_read(str(name))
        lower = max(lower, read[0] if read else 0)
    for key, target, node in walk_targets(data):  # once per recipe: the view's targets are not built yet
        if target.startswith(PACKAGE) and key != "recipe":
            lower = max(lower, _first_taking(target, frozenset(keywords(node))))
    for dotted in STRICT_SECTIONS:
        for key in _section(data, dotted) or {}:
            lower = max(lower, _first_accepting(dotted, str(key)))
    dist = _section(data, "distributed") or {}
    strategy = f"distributed@{str(dist.get('strategy', DEFAULT_STRATEGY)).lower()}"
    for key in dist:
        if key not in DISTRIBUTED_COMMON:
            lower = max(lower, _first_accepting(strategy, str(key)))
    return lower


@lru_cache(maxsize=4096)
def _first_taking(target: str, words: frozenset[str]) -> int:
    known = schema()
    return next((i for i in range(len(known.versions)) if _takes(known.lookup(target, i), words)), 0)


@lru_cache(maxsize=4096)
def _first_accepting(section: str, key: str) -> int:
    known = schema()
    return next((i for i in range(len(known.versions)) if key in (known.strict_at(section, i) or ())), 0)


def _takes(found: tuple[str, Optional[frozenset[str]]], words: set[str]) -> bool:
    status, names = found
    return status == "unknown" or (status == "found" and (names is None or words <= names))


def _names(known: AutomodelSchema, indices: Iterable[int]) -> str:
    names = [known.name(i) for i in sorted(indices)]
    return ", ".join(names) if len(names) <= 4 else f"{names[0]} ... {names[-1]} ({len(names)} versions)"


def across(view: RecipeView, check: Check) -> Iterator[Violation]:
    """The rule's violations over the versions the recipe is judged under (see the module's docstring)."""
    known, judged = schema(), view.judged
    seen: dict[Optional[str], tuple[Violation, set[int]]] = {}
    with_say: set[int] = set()
    for index in judged.indices:
        found = check(view, index)
        if found is None:
            continue
        with_say.add(index)
        for violation in found:
            first = seen.get(violation.key, (violation, set()))[1]
            seen[violation.key] = (violation, first | {index})  # the newest version's words
    for violation, where in seen.values():
        if where == with_say:
            yield violation
        elif judged.stated is None:
            others = with_say - where
            yield Violation(f"under AutoModel {_names(known, where)}: {violation.message} (not under "
                            f"{_names(known, others)})",
                            f"write the AutoModel version this runs on as {VERSION_KEY} (or pass "
                            f"--automodel-version); under those versions: {_text(violation.fix)}",
                            severity="warning", key=violation.key)
        # a stated date: a finding under only some of the snapshots around its day is not sure either way


def _text(fix) -> str:
    return fix() if callable(fix) else fix


def _version_words(index: int) -> str:
    return f"AutoModel {schema().name(index)}"


@automodel_rule("RA-A015", "error", VERSION_KEY, "the recipe's AutoModel version is a release, a date or main",
                "this product: service/validate/automodel/versions.py (the releases in automodel_schema.json)")
def version_usable(view: RecipeView) -> Optional[Violation]:
    if view.judged.problem is None:
        return None
    return Violation(f"{view.judged.source}: {view.judged.problem}; judged under every plausible version instead",
                     f"write {FORMS}, or remove it", key=VERSION_KEY if view.judged.source == VERSION_KEY else None)


# -- sections -----------------------------------------------------------------------------------------------------
def _is_llm_recipe(data: dict) -> bool:
    recipe = data.get("recipe")
    target = recipe.get("_target_") if isinstance(recipe, dict) else recipe
    return target is None or (isinstance(target, str) and target.rpartition(".")[2] in LLM_RECIPES)


def _renamed_to(known: AutomodelSchema, name: str, index: int) -> tuple[Optional[str], str, str]:
    """Where a section went by this version: (its name then or None if removed, the commits, how), following
    renames (parallelizer -> moe_config -> distributed.moe)."""
    new, commits, how = name, [], ""
    while new in known.renamed:
        target, commit, how = known.renamed[new]
        commits.append(commit)
        if target is None:
            return None, ", ".join(commits), how
        new = target
        if known.section_read(new.split(".")[0], index):
            break
    return (new if new != name else None), ", ".join(commits), how


def _section_check(view: RecipeView, index: int) -> Iterator[Violation]:
    known = schema()
    read = known.sections_at(index)
    for name in view.data:
        if not isinstance(name, str) or name.startswith("_") or known.section_read(name, index):
            continue  # `_name:` is how recipes park a block AutoModel should not read
        words = _version_words(index)
        if known.ever_read(name) and min(known.ever_read(name)) < index:
            new, commits, how = _renamed_to(known, name, index)
            if new:
                yield Violation(f"`{name}:` is not read by {words}: it became `{new}` (commit {commits}), so its "
                                "settings are silently ignored", f"move it to `{new}`: {how}", key=name)
            else:
                yield Violation(f"`{name}:` is not read by {words}" + (f" (removed in commit {commits})" if commits
                                                                       else "") + ": it is silently ignored",
                                how or "remove it", key=name)
            continue
        close = _near_miss(name, read)
        if close:
            yield Violation(f"unknown section `{name}:`: {words} reads `{close}:` and ignores this one",
                            f"rename it to `{close}`", key=name)


@automodel_rule("RA-A016", "error", "", "top-level sections the LLM recipe reads at the recipe's AutoModel version "
                "(renamed and removed ones, near-miss names)",
                "AutoModel recipes/llm/train_ft.py, base_recipe.py, _typed_config.py, cli/app.py (cfg reads), by "
                "version; renames: commits 8a4f070ce, 194103bfc, 35b5ed9c9")
def sections_known(view: RecipeView) -> Iterator[Violation]:
    if _is_llm_recipe(view.data):
        yield from across(view, _section_check)


@lru_cache(maxsize=4096)
def _near_miss(name: str, read: frozenset[str]) -> Optional[str]:
    """The section read that ``name`` misspells (edit distance <= 2, as the free-form sections' near misses)."""
    scored = sorted((_edit_distance(name, s), s) for s in read
                    if not s.endswith("*") and abs(len(s) - len(name)) <= 2 and len(name) > 3)
    return scored[0][1] if scored and scored[0][0] <= 2 else None


def _edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def recipe_missing(view: RecipeView, index: int) -> Optional[list[Violation]]:
    """From the CLI refactor (35b5ed9c9, 2026-04-01) AutoModel's CLI refuses a recipe with no `recipe:`."""
    if not schema().section_read("recipe", index):
        return []
    return [Violation(f"no recipe class: {_version_words(index)}'s CLI needs `recipe:` to know what to run",
                      "add `recipe: TrainFinetuneRecipeForNextTokenPrediction` (LLM fine-tuning and pretraining)",
                      key="recipe")]


# -- strict sections' keys ----------------------------------------------------------------------------------------
def _unknown_key(key: str, options: frozenset[str], index: int) -> Violation:
    name = key.rpartition(".")[2]
    close = get_close_matches(name, sorted(options), n=3)
    hint = f"did you mean {', '.join(close)}?" if close else f"known keys: {', '.join(sorted(options))}"
    return Violation(f"unknown key `{key}`: {_version_words(index)} refuses it", f"{hint} (or remove it)", key=key)


def _section(data: dict, dotted: str) -> Optional[dict]:
    node = data
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def strict_keys_check(view: RecipeView, index: int) -> Optional[list[Violation]]:
    known, out, said = schema(), [], False
    dist = _section(view.data, "distributed") or {}
    strategy = dist.get("strategy", DEFAULT_STRATEGY)
    options = known.strict_at(f"distributed@{str(strategy).lower()}", index) if isinstance(strategy, str) else None
    if options is not None:
        said = True
        options = options | DISTRIBUTED_COMMON
        out += [_unknown_key(f"distributed.{k}", options, index) for k in dist if k not in options]
    for dotted in STRICT_SECTIONS:
        options, node = known.strict_at(dotted, index), _section(view.data, dotted)
        if options is None or node is None:
            continue
        said = True
        out += [_unknown_key(f"{dotted}.{k}", options, index) for k in node if k not in options]
    return out if said else None


# -- targets ------------------------------------------------------------------------------------------------------
def _built(known: AutomodelSchema, key: str, target: str, index: int) -> bool:
    """Whether AutoModel builds this `_target_` at this version: not the recipe class (the CLI's), nor a
    `distributed:` target once parse_distributed_section reads that section (it drops `_target_`)."""
    if not target.startswith(PACKAGE) or key == "recipe":
        return False
    return not (key.split(".")[0] == "distributed" and known.parses_distributed(index))


def _target_check(view: RecipeView, index: int) -> Iterator[Violation]:
    known = schema()
    for key, target, _ in view.targets:
        if not _built(known, key, target, index):
            continue
        status, _ = known.lookup(target, index)
        if status != "missing":
            continue
        nearest = known.nearest_target(target, index)
        yield Violation(f"`{target}` names no callable in {_version_words(index)}",
                        f"use {nearest}" if nearest else "check the name against AutoModel's source at that version",
                        key=f"{key}._target_")


@automodel_rule("RA-A014", "error", "", "a nemo_automodel `_target_` names a callable AutoModel has at the recipe's "
                "version", "AutoModel's source by version, read with ast (recipe_index/data/automodel_schema.json); "
                "its loader's _resolve_target (longest module prefix, then getattr)")
def target_exists(view: RecipeView) -> Iterator[Violation]:
    yield from across(view, _target_check)


def target_keywords_check(view: RecipeView, index: int) -> Optional[list[Violation]]:
    """Keywords a nemo_automodel target's signature at this version does not take (None: no signature read)."""
    known, out, said = schema(), [], False
    for key, target, node in view.targets:
        if not _built(known, key, target, index):
            continue
        status, names = known.lookup(target, index)
        if status != "found" or names is None:
            continue
        said = True
        for kwarg in keywords(node):
            if kwarg not in names:
                close = get_close_matches(kwarg, sorted(names), n=3)
                out.append(Violation(f"{target} takes no keyword `{kwarg}` in {_version_words(index)}",
                                     f"did you mean {', '.join(close)}?" if close else "remove it",
                                     key=f"{key}.{kwarg}"))
    return out if said else None
