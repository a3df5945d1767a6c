"""Model lookup: bundled cards, local config.json files, then the Hugging Face Hub.

Resolution order: a bundled id or alias (case-insensitive, ``-`` and ``_``
alike, so the Megatron ``model`` key ``llama3_8b`` finds ``llama3-8b``), then a local
``config.json`` path or a folder holding one, then ``hf_hub_download(repo, "config.json")``,
which honours the Hugging Face cache and ``HF_HUB_OFFLINE``. huggingface_hub is imported
only on that last step, so bundled lookups stay fast.
"""

from __future__ import annotations

import json
import os
import re
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional, Union

from pydantic import ValidationError

from recipe_index._hf_names import dimension_problem, missing_core_fields, normalise_hf_config
from recipe_index.cards import ModelCard
from recipe_index.errors import ModelConfigError, UnknownModelError, closest_names

MODELS_DIR = Path(__file__).resolve().parent / "models"
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")  # a Hugging Face repo id: org/name
MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a config.json is a few KiB; refuse anything absurd


def _lookup_key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


@lru_cache(maxsize=1)
def _bundled() -> tuple[tuple[ModelCard, ...], dict[str, ModelCard]]:
    cards: list[ModelCard] = []
    index: dict[str, ModelCard] = {}
    for path in sorted(MODELS_DIR.glob("*.json")):
        raw = parse_config_json(path.read_text(encoding="utf-8"), str(path))
        card = card_from_config(raw, raw.get("advisor_id") or path.stem, source=str(path))
        cards.append(card)
        for key in (card.id, card.hf_id, *card.aliases):
            if key:
                # First file wins on a clash; test_index_models asserts there are none.
                index.setdefault(_lookup_key(key), card)
    return tuple(cards), index


def bundled_models() -> list[ModelCard]:
    """Every bundled model card, sorted by id (recipe_index.recipes.list_models filters them by family)."""
    return sorted(_bundled()[0], key=lambda c: c.id)


def find_bundled_model(name: str) -> Optional[ModelCard]:
    """The bundled card for an id, alias, Megatron model key or HF id; None when not bundled."""
    if not name:
        return None
    return _bundled()[1].get(_lookup_key(name))


def model_suggestions(name: str, n: int = 5) -> list[str]:
    """Bundled ids closest to ``name`` (difflib over ids and aliases, reported as ids)."""
    return list(_suggestions(_lookup_key(name), n))


@lru_cache(maxsize=1024)
def _suggestions(key: str, n: int) -> tuple[str, ...]:
    # difflib over every bundled key costs ~18 ms: a folder of recipes naming the same unknown model pays it once
    return tuple(closest_names(key, _bundled()[1], lambda card: card.id, n))


def card_from_config(cfg: Any, id: str, source: str, hf_id: Optional[str] = None) -> ModelCard:
    """A ModelCard from a parsed config.json; ModelConfigError names what is missing."""
    if not isinstance(cfg, dict):
        raise ModelConfigError(source, f"top level is {type(cfg).__name__}, expected a JSON object")
    fields = normalise_hf_config(cfg, id, hf_id=hf_id)
    missing = missing_core_fields(fields)
    if missing:
        raise ModelConfigError(
            source,
            f"missing {', '.join(missing)}; a causal language model config.json must give them "
            "(for a vision-language model, under text_config)",
        )
    problem = dimension_problem(fields)
    if problem is not None:  # before any estimate multiplies a negative, textual or absurd size
        raise ModelConfigError(source, f"{problem[0]}: {problem[1]}")
    try:
        return ModelCard.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ModelConfigError(source, f"{where}: {first['msg']}") from None


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object that gives a key twice is refused: json keeps the last silently, so the card would
    describe whichever size came last (the YAML side refuses duplicates too, RA-C003)."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def parse_config_json(text: str, source: str) -> Any:
    """A config.json's text parsed strictly; ModelConfigError naming ``source`` for invalid JSON, a key
    given twice in one object, or nesting deeper than Python's recursion limit (a config.json is a few
    levels deep; json's decoder recurses once per level and would raise RecursionError)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise ModelConfigError(source, f"key {exc.key!r} is given twice in one object; keep one") from None
    except RecursionError:
        raise ModelConfigError(source, "not a config.json: nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ModelConfigError(source, f"line {exc.lineno} column {exc.colno}: invalid JSON ({exc.msg})") from None


def _read_config(path: Path) -> Any:
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ModelConfigError(str(path), f"larger than {MAX_CONFIG_BYTES} bytes; not a config.json")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ModelConfigError(str(path), "not UTF-8 text; expected a JSON config.json") from None
    return parse_config_json(text, str(path))


def _local_config_path(name: str) -> Optional[Path]:
    path = Path(name).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        candidate = path / "config.json"
        if candidate.is_file():
            return candidate
        raise ModelConfigError(str(path), "folder has no config.json; point at a Hugging Face model folder")
    return None


def hub_offline() -> bool:
    """HF_HUB_OFFLINE read at call time (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


# repo id -> card or the reason it failed: one hub round trip per id and process, so a
# folder of configs naming the same unknown model does not wait on the network each time.
_HUB_RESULTS: dict[tuple[str, bool], Union[ModelCard, str]] = {}


def _from_hub(repo_id: str, cache_only: bool = False) -> ModelCard:
    offline = cache_only or hub_offline()
    cached = _HUB_RESULTS.get((repo_id, offline))
    if cached is None:
        cached = _HUB_RESULTS[(repo_id, offline)] = _download_card(repo_id, offline)
    if isinstance(cached, str):
        raise UnknownModelError(repo_id, model_suggestions(repo_id), reason=cached)
    return cached


# One HEAD of this many seconds tells whether the Hub answers. Past a failed first request huggingface_hub
# retries with back-off (1, 2, 4, 8, 8 s: 24 s and a warning line each) before it gives up on a file that is
# not cached, so a file not in the cache is only asked for once the Hub has answered.
HUB_TIMEOUT_S = 5.0
# After the Hub was unreachable, later ids in the same process are told so at once for this long.
HUB_DOWN_MEMORY_S = 60.0
_hub_down: dict[str, tuple[float, str]] = {}  # endpoint -> (monotonic time it failed, the reason)


def _download_card(repo_id: str, offline: bool) -> Union[ModelCard, str]:
    # Imported here: serving a bundled model must not pay for huggingface_hub's import.
    from huggingface_hub import hf_hub_download

    try:
        if not offline:
            unreachable = _hub_unreachable(repo_id)
            if unreachable is not None:
                return unreachable
        path = hf_hub_download(repo_id, "config.json", local_files_only=offline, etag_timeout=HUB_TIMEOUT_S)
    except Exception as exc:  # offline, not cached, gated, missing: all mean "not resolvable"
        if offline:  # huggingface_hub's own text names a Python argument (local_files_only) nobody here can set
            return (f"{repo_id}/config.json is not in the Hugging Face cache, and HF_HUB_OFFLINE is set; fetch it "
                    f"once with network: huggingface-cli download {repo_id} config.json")
        return _first_line(exc)
    return card_from_config(_read_config(Path(path)), repo_id, source=f"{repo_id}/config.json", hf_id=repo_id)


def _hub_unreachable(repo_id: str) -> Optional[str]:
    """Why the Hub cannot give ``repo_id``'s config.json when it is not cached and one HEAD request without
    retries fails on the network (None when it is cached or the Hub answered, even with an error)."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.utils import HfHubHTTPError  # in every release (huggingface_hub.errors from 0.24)

    if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
        return None  # cached: hf_hub_download's first request does not retry, and falls back to the cache
    endpoint = constants.ENDPOINT
    failed = _hub_down.get(endpoint)
    if failed is not None and time.monotonic() - failed[0] < HUB_DOWN_MEMORY_S:
        return failed[1]
    try:
        # No retry_on_errors=False: that is its default, and older releases (the project allows >=0.23) refuse the
        # argument, a TypeError read as an unreachable Hub; they retry no network error of this request either.
        get_hf_file_metadata(hf_hub_url(repo_id, "config.json"), timeout=HUB_TIMEOUT_S)
    except HfHubHTTPError:
        return None  # the Hub answered (not found, gated, ...): hf_hub_download says which
    except Exception as exc:  # refused, timed out, no DNS: the network, not the repo
        reason = (f"the Hugging Face Hub ({endpoint}) is unreachable ({_first_line(exc)}) and {repo_id}/config.json "
                  f"is not in the Hugging Face cache; check the network (or HF_ENDPOINT), or fetch it once with "
                  f"network: huggingface-cli download {repo_id} config.json")
        _hub_down[endpoint] = (time.monotonic(), reason)
        return reason
    _hub_down.pop(endpoint, None)
    return None


def _first_line(exc: Exception) -> str:
    detail = str(exc).splitlines()[0] if str(exc) else "no detail"
    return f"{type(exc).__name__}: {detail}"


def resolve_hub_model(repo_id: str) -> ModelCard:
    """A Hub repo's card (cache first; the Hub unless HF_HUB_OFFLINE), never a local path: what the
    service may resolve for a client, whose ``org/name`` could also name a folder on the server."""
    return _from_hub(repo_id)


def resolve_model_from_cache(name_or_path: str) -> ModelCard:
    """``resolve_model`` without the network: a Hub repo id only from the Hugging Face cache (CI's default)."""
    return resolve_model(name_or_path, cache_only=True)


def resolve_model(name_or_path: str, cache_only: bool = False) -> ModelCard:
    """Find a model card: bundled id/alias, local config.json (file or folder), then the Hub.

    Raises UnknownModelError (with the closest bundled ids) when nothing matches, and
    ModelConfigError when a config.json is found but unusable.
    """
    name = (name_or_path or "").strip()
    if not name:
        raise UnknownModelError(name_or_path or "", reason="empty model name")
    card = find_bundled_model(name)
    if card is not None:
        return card
    local = _local_config_path(name)
    if local is not None:
        folder = local.parent
        return card_from_config(_read_config(local), str(local), source=str(local), hf_id=str(folder))
    if REPO_ID.match(name):
        return _from_hub(name, cache_only)
    raise UnknownModelError(name, model_suggestions(name), reason="not a bundled id, a local path or a repo id")
