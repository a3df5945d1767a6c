"""An unknown Hub id while the Hub cannot be reached is answered in a few seconds, with one message that says
the Hub is unreachable, instead of huggingface_hub's retries with back-off (24 s and a warning line each)."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _online_env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="0", HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", HF_HOME=str(tmp_path / "hf"))
    env.pop("HF_HUB_CACHE", None)
    env.pop("HUGGINGFACE_HUB_CACHE", None)
    return env


def _run(code: str, env: dict) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    return done, time.monotonic() - start


RESOLVE_TWO_IDS = """
from recipe_index import resolve_model
from recipe_index.errors import UnknownModelError
for repo in ("acme/NoSuchModel-7B", "acme/Another-1B"):
    try:
        resolve_model(repo)
    except UnknownModelError as err:
        print("ERROR", err)
"""


def test_unknown_hub_id_with_the_hub_unreachable_answers_at_once_and_says_so_once(tmp_path):
    done, seconds = _run(RESOLVE_TWO_IDS, _online_env(tmp_path))
    assert seconds < 10, (seconds, done.stderr[-2000:])  # was 24 s per id: five retries with back-off
    errors = [line for line in done.stdout.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 2, done.stdout + done.stderr
    for error in errors:
        assert error.count("is unreachable") == 1 and "Hugging Face Hub (http://127.0.0.1:" in error
    assert "Retrying" not in done.stderr and "Retry" not in done.stdout


def test_a_cached_config_resolves_while_the_hub_is_unreachable(tmp_path):
    env = _online_env(tmp_path)
    snapshot = tmp_path / "hf" / "hub" / "models--acme--Cached-1B" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("0" * 40)
    (snapshot / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000}))
    done, seconds = _run("from recipe_index import resolve_model; print(resolve_model('acme/Cached-1B').hidden_size)",
                         env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "256"
    assert seconds < 10 and "Retrying" not in done.stderr


def test_a_huggingface_hub_without_retry_on_errors_is_not_taken_for_an_unreachable_hub(monkeypatch):
    """Older huggingface_hub releases take no ``retry_on_errors``: the probe still asks the Hub."""
    import huggingface_hub
    from huggingface_hub.utils import HfHubHTTPError

    from recipe_index import models

    def metadata_of_an_older_release(url, token=None, proxies=None, timeout=10, library_name=None,
                                     library_version=None, user_agent=None, headers=None):
        raise HfHubHTTPError.__new__(HfHubHTTPError)  # the Hub answered (404, gated, ...)

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", metadata_of_an_older_release)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda *args, **kwargs: None)
    monkeypatch.setattr(models, "_hub_down", {})
    assert models._hub_unreachable("acme/NoSuchModel-7B") is None
