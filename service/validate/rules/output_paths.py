"""Where a run writes: an output path of a config file that climbs out of where it is read (``..``) is a warning.

A config from someone else that writes ``checkpoint_dir: ../../.config/autostart`` puts files (and
``keep_last``'s deletions) beside the user's own; said before anything runs, not refused (a user's own
``../runs/x`` is common and fine).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING, Iterator

from service.validate.rules.registry import Violation, config_rule
from trainer.contract.dotted import get_dotted

if TYPE_CHECKING:  # pragma: no cover
    from service.validate.view import ConfigView

# The keys of the schema (trainer/contract/config.py) that name a place the trainer writes to.
OUTPUT_PATH_KEYS = ("checkpoint.checkpoint_dir",)


@config_rule("RA-S003", "warning", "checkpoint.checkpoint_dir", "an output path without `..` parts",
             "configs are data: a path that climbs out of the working folder writes (and prunes) elsewhere")
def output_path_climbs(view: "ConfigView") -> Iterator[Violation]:
    for key in OUTPUT_PATH_KEYS:
        value = get_dotted(view.doc.data, key)
        if isinstance(value, str) and ".." in PurePath(value).parts:
            yield Violation(f"{key} {value!r} has `..` parts: the run writes checkpoints and metrics outside the "
                            "folder it is started in (and keep_last deletes there)",
                            f"name the folder without `..` (an absolute path if it must be elsewhere), e.g. "
                            f"{PurePath(value).name or 'checkpoints'}", key=key)
