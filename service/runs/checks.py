"""What a way in checks before a run is stored, beyond its own fields: its model and GPU type are known ones,
named by their canonical ids (so one model is not stored under three aliases)."""

from __future__ import annotations

from recipe_index.errors import UnknownHardwareError
from recipe_index.hardware import get_hardware
from recipe_index.models import find_bundled_model, model_suggestions
from service.runs.errors import RunInputError
from service.runs.schema import RunRecord


def known_model(name: str) -> str:
    card = find_bundled_model(name)
    if card is None:
        close = model_suggestions(name, 3)
        hint = f" (closest: {', '.join(close)})" if close else ""
        raise RunInputError("request.model", f"unknown model {name!r}{hint}",
                            "use a bundled model id (`recipe-advisor models`); runs of other models cannot be "
                            "compared with an estimate")
    return card.id


def known_gpu_type(name: str) -> str:
    try:
        return get_hardware(name).name
    except UnknownHardwareError as exc:
        raise RunInputError("request.gpu_type", f"unknown GPU type {name!r}",
                            f"use one of the hardware cards (`recipe-advisor hardware`): {exc}") from None


def checked(record: RunRecord) -> RunRecord:
    """``record`` with its model and GPU type in their canonical names; RunInputError naming the field if unknown."""
    request = record.request.model_copy(update={"model": known_model(record.request.model),
                                                "gpu_type": known_gpu_type(record.request.gpu_type)})
    return record.model_copy(update={"request": request})
