"""Megatron-LM's arguments as a user writes or a run prints them: ``{argument: (value, line)}``.

Two forms, one answer:
- the arguments block a Megatron-LM run prints at start-up (megatron/training/arguments.py ``_print_args``:
  ``------------------------ arguments ------------------------``, then ``  name ..... value`` per argument,
  sorted, then ``-------------------- end of arguments ---------------------``), with any log prefix
  (``[rank0]:``, a timestamp) before each line;
- a command line or launch script (``torchrun ... pretrain_gpt.py --tensor-model-parallel-size 4 ...``), over
  continuation lines and bash arrays, with ``NAME=value`` assignments earlier in the script substituted for
  ``$NAME`` / ``${NAME}`` / ``${NAME:-default}``.

Names are argparse's destinations (``--tensor-model-parallel-size`` -> ``tensor_model_parallel_size``;
``--no-x`` stays ``no_x``, as its destination differs by argument). Values are read as Python literals where
they are one (``4``, ``3e-4``, ``True``, ``None``, ``[2, 4]``), else kept as the written string; a flag with
no value is ``True``; several values make a list. The last occurrence wins, as with argparse. Lines are
1-based. Pure text processing: nothing is executed or imported.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections import Counter
from typing import Any, Optional

Args = dict[str, tuple[Any, int]]

_BLOCK_START = re.compile(r"-{3,} arguments -{3,}")
_BLOCK_END = re.compile(r"-{3,} end of arguments -{3,}")
_DOTTED = re.compile(r"(?:^|\s)([A-Za-z_]\w*) (\.+)(?: (.*))?$")
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_]\w*)=(.*)$")
_VARIABLE = re.compile(r"\$\{([A-Za-z_]\w*)(?::?-([^}]*))?\}|\$([A-Za-z_]\w*)")
_SCRIPTS = (".py", ".sh")
_SHELL_BREAKS = {"\\", ")", "(", ";", "&&", "||", "|", "&", ">", ">>", "2>&1", "<", "]"}


def parse_megatron_args(text: str) -> Args:
    """The arguments of a Megatron-LM log's arguments block when the text has one, else of its command line."""
    block = arguments_block(text)
    return block if block is not None else command_line_args(text)


def has_arguments_block(text: str) -> bool:
    return _BLOCK_START.search(text) is not None


def literal(raw: str) -> Any:
    """A printed or written value as Python reads it where it is a literal, else the string."""
    raw = raw.strip()
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        lowered = raw.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        return raw


def arguments_block(text: str) -> Optional[Args]:
    """The first arguments block's ``{name: (value, line)}``, or None when the text prints none."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _BLOCK_START.search(line)), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if _BLOCK_END.search(lines[i])), len(lines))
    body = list(range(start + 1, end))
    # Names start in one column (after the log prefix); find it from the dotted lines, then read every line
    # there, so a name of 48+ characters (printed without dots) and a prefix holding words are both right.
    columns = Counter(match.start(1) for i in body if (match := _DOTTED.search(lines[i])))
    column = columns.most_common(1)[0][0] if columns else None
    args: Args = {}
    for i in body:
        line = lines[i].rstrip()
        if column is not None and len(line) > column and line[column - 1:column] in (" ", ""):
            name, _, rest = line[column:].partition(" ")
            value = re.sub(r"^\.*\s?", "", rest)
        else:
            match = _DOTTED.search(line)
            if match is None:
                continue
            name, value = match.group(1), match.group(3) or ""
        if re.fullmatch(r"[A-Za-z_]\w*", name):
            args[name] = (literal(value), i + 1)
    return args


def command_line_args(text: str) -> Args:
    """``--name value`` pairs of a command line or launch script, with the line each is written on."""
    variables: dict[str, str] = {}
    args: Args = {}
    for number, line in enumerate(text.splitlines(), start=1):
        tokens = _tokens(line)
        assignment = _ASSIGNMENT.match(line)
        if assignment and not line.lstrip().startswith("--"):
            value = _tokens(assignment.group(2))
            if value and value[0] not in ("(", "$("):
                variables[assignment.group(1)] = _substitute(value[0], variables)
        for index, token in enumerate(tokens):
            if not token.startswith("--") or len(token) < 3 or not re.match(r"--[A-Za-z]", token):
                continue
            name, eq, inline = token[2:].partition("=")
            values = [inline] if eq else []
            if not eq:
                for following in tokens[index + 1:]:
                    if (following.startswith("--") or following in _SHELL_BREAKS or following.endswith(_SCRIPTS)
                            or _OVERRIDE.match(following.lstrip("+"))):
                        break  # the next argument, the end of the command, the script torchrun starts, an override
                    values.append(following)
            key = name.replace("-", "_")
            if not re.fullmatch(r"[A-Za-z_]\w*", key):
                continue
            read = [literal(_substitute(v, variables)) for v in values]
            args[key] = (True if not read else read[0] if len(read) == 1 else read, number)
    return args


def _tokens(line: str) -> list[str]:
    """Shell words of one line, comments dropped; a line shlex cannot split (an unclosed quote) by spaces."""
    line = line.rstrip()
    line = line[:-1] if line.endswith("\\") else line  # a continuation, not an escape
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=False)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        return [token for token in lexer]
    except ValueError:
        return line.split("#", 1)[0].split()


def _substitute(value: str, variables: dict[str, str]) -> str:
    def replace(match: re.Match) -> str:
        name = match.group(1) or match.group(3)
        if name in variables:
            return variables[name]
        return match.group(2) if match.group(2) is not None else match.group(0)

    return _VARIABLE.sub(replace, value)


_OVERRIDE = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)=(.*)$")


def dotted_overrides(text: str) -> dict[str, tuple[Any, int]]:
    """``section.key=value`` words of a command line (Megatron Bridge's run_recipe.py overrides, Hydra style),
    ``{dotted key: (value, line)}``; a leading ``+``/``++`` (add a key) is dropped. The last one wins."""
    out: dict[str, tuple[Any, int]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        for token in _tokens(line):
            match = _OVERRIDE.match(token.lstrip("+"))
            if match:
                out[match.group(1)] = (literal(match.group(2)), number)
    return out
