"""What the service says about itself: its version (in /healthz and the pages' footer) and the OpenAPI
description and tags."""

from __future__ import annotations

from importlib import metadata

DESCRIPTION = """\
Pick, size and validate LLM training recipes before you spend GPU hours.

* **POST /v1/recommend**: a ready config for a model, hardware and goal, with layout, estimates and launch commands.
* **POST /v1/plan**: the ranked parallel layouts with memory and step-time estimates.
* **POST /v1/validate**: check a config (YAML as `text/plain`, or JSON `{"yaml": ...}`); findings carry line and column.
* **POST /v1/diff**: every key that differs between two configs, as convergence, execution or benchmark-only.
* **GET /v1/recipes**, **/v1/models**, **/v1/hardware**: browse the bundled index.

Errors: 422 names the field (a wrong type too: `"gpus": "8"` is refused); 404 lists the closest
known names; 400 is a YAML document or a JSON body that cannot be read; 413 is a body over 1 MiB.
Every error body except 422 is `ErrorResponse`.
"""

TAGS = [
    {"name": "advise", "description": "Plan, recommend, validate and diff configs."},
    {"name": "index", "description": "The bundled recipes, model cards and hardware cards."},
    {"name": "service", "description": "Liveness."},
]


def version() -> str:
    try:
        return metadata.version("recipe-advisor")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0+source"
