"""HTML pages: the recommend form at /, its result page, and the validate page.

Server-rendered with jinja2 (autoescaped: whatever a user types comes back as
text, never markup). No page needs JavaScript; /static/app.js only adds the
copy button. Errors re-render the form with the problem beside it, with the
same status the API would answer (404, 422, 400, 413) and never a traceback.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from importlib import resources
from typing import Any, Optional, get_args
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

import recipe_index as index
from recipe_index.errors import UnknownHardwareError, UnknownModelError
from service.configs.yamlio import YamlError, decode
from service.estimate.memory import gib_text
from service.facts import split_world
from service.http import schemas as m
from service.http.about import version
from service.http.accept import media_ranges, quality
from service.http.limits import MAX_BODY_BYTES, REPEATED_PARAMETER
from service.http.routes.advise import body_request, recommend_answer
from service.http.web_result import result_view
from service.lookups import lookup_model
from service.request import AdviceRequest, least
from service.validate.document import validate_text
from service.validate.rules.precision import FP8_RECIPES

router = APIRouter(include_in_schema=False)

_env = Environment(
    loader=FileSystemLoader(str(resources.files("templates"))),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["gib"] = gib_text  # memory figures rounded as the CLI text rounds them
templates = Jinja2Templates(env=_env)

GOALS = [("pretrain", "Pretrain"), ("sft", "Supervised fine-tuning (SFT)"), ("peft", "LoRA fine-tuning (PEFT)")]
ENGINES = [("megatron", "Megatron Bridge"), ("bundled", "Bundled trainer (torchrun)")]
# The config's format: blank is this product's (kept out of the page's links), automodel a NeMo AutoModel recipe.
EMITS = [("", "Recipe Advisor config"), ("automodel", "NeMo AutoModel recipe")]
PRECISIONS = ["bf16", "fp8", *FP8_RECIPES, "nvfp4", "fp16", "fp32"]  # the common first; a test keeps it complete
GRAD_REDUCE_DTYPES = list(get_args(m.GRAD_REDUCE_DTYPE))


@dataclass
class Problem:
    """One thing the user must fix, shown above the form."""

    message: str
    field: Optional[str] = None
    suggestions: list[str] = dataclass_field(default_factory=list)


def render(request: Request, name: str, context: dict[str, Any], status_code: int = 200) -> HTMLResponse:
    root = request.scope.get("root_path", "").rstrip("/")
    base = {"root_path": root, "static_url": f"{root}/static", "version": version(), "problems": []}
    return templates.TemplateResponse(request, name, {**base, **context}, status_code=status_code)


def _int_or_none(raw: Any, name: str, problems: list[Problem], low: int = 1, high: int = m.MAX_GPUS) -> Optional[int]:
    if raw is None or str(raw).strip() == "":
        return None
    text = str(raw).strip()
    if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:  # isdigit alone: '²' too
        problems.append(Problem(f"must be a whole number from {low} to {high} (got {text[:40]!r})", name))
        return None
    return int(text)


# ------------------------------------------------------------------ validate page


@dataclass
class ListingLine:
    number: int
    text: str
    findings: list[dict]


def listing(text: str, findings: list[dict]) -> tuple[list[ListingLine], list[dict]]:
    """The document's lines, each with its findings; plus the findings that name no line."""
    lines = [ListingLine(i + 1, t, []) for i, t in enumerate(text.splitlines())]
    unplaced = []
    for f in findings:
        line = f.get("line")
        if line and 1 <= line <= len(lines):
            lines[line - 1].findings.append(f)
        else:
            unplaced.append(f)
    return lines, unplaced


def _validate_context(form: dict) -> dict:
    return {"page": "validate", "hardware": index.list_hardware(), "form": form, "report": None}


@router.get("/validate", response_class=HTMLResponse)
def validate_page(request: Request) -> HTMLResponse:
    form = {"yaml": "", "gpu_type": "", "gpus": None, "nodes": None}
    return render(request, "validate.html", _validate_context(form))


@router.post("/validate", response_class=HTMLResponse)
async def validate_submit(request: Request) -> HTMLResponse:
    problems: list[Problem] = []
    try:
        form = await request.form(max_files=1, max_fields=8, max_part_size=MAX_BODY_BYTES)
    except (HTTPException, ClientDisconnect):
        raise  # 413 from the body cap; a client gone is logged by the app's handler
    except Exception:  # malformed multipart: the parser's message is not for users
        form = {}
        problems.append(Problem("the form could not be read; submit it from this page", "body"))
    text = str(form.get("yaml") or "")
    filename = None
    upload = form.get("file")
    if isinstance(upload, UploadFile) and upload.filename:
        raw = await upload.read(MAX_BODY_BYTES + 1)
        filename = upload.filename
        try:
            text = decode(raw, filename, max_bytes=MAX_BODY_BYTES)
        except YamlError as err:
            problems.append(Problem(f"{err.reason}" + (f"; {err.fix}" if err.fix else ""), "file"))
    text = text.replace("\r\n", "\n")
    gpu_type = str(form.get("gpu_type") or "").strip() or None
    values = {
        "yaml": text,
        "gpu_type": gpu_type or "",
        "gpus": _int_or_none(form.get("gpus"), "gpus", problems),
        "nodes": _int_or_none(form.get("nodes"), "nodes", problems, high=m.MAX_NODES),
    }
    context = _validate_context(values)
    if gpu_type:
        try:
            index.get_hardware(gpu_type)
        except UnknownHardwareError as err:
            problems.append(Problem(f"unknown GPU type {gpu_type!r}", "gpu_type", err.suggestions or err.known))
    if not problems and not text.strip():
        problems.append(Problem(f"{filename} is empty: choose a config file with content" if filename else
                                "paste a YAML config or choose a file", "file" if filename else "yaml"))
    if problems:
        return render(request, "validate.html", {**context, "problems": problems}, status_code=422)
    try:
        report = await run_in_threadpool(
            validate_text, text, filename or "<pasted>", values["gpus"], gpu_type, values["nodes"], lookup_model
        )
    except YamlError as err:
        where = f"line {err.line}: " if err.line else ""
        problem = Problem(f"{where}{err.reason}" + (f" (fix: {err.fix})" if err.fix else ""), "yaml")
        return render(request, "validate.html", {**context, "problems": [problem]}, status_code=400)
    findings = [f.to_dict() for f in report.findings]
    lines, unplaced = listing(text, findings)
    context["report"] = {
        "errors": report.errors,
        "warnings": report.warnings,
        "infos": sum(f["severity"] == "info" for f in findings),
        "filename": filename,
        "lines": lines,
        "unplaced": unplaced,
    }
    return render(request, "validate.html", context)


# ------------------------------------------------------------------ recommend form


def form_defaults(query: Any) -> dict:
    return {
        "model": str(query.get("model", "llama3-8b") or ""),
        "gpu_type": str(query.get("gpu_type", "h100") or "h100"),
        "gpus": str(query.get("gpus", "8") or "8"),
        "nodes": str(query.get("nodes", "") or ""),  # blank: --gpus is the total when it fills whole nodes (as the API)
        "goal": str(query.get("goal", "pretrain") or "pretrain"),
        "seq_length": str(query.get("seq_length", "") or ""),
        "engine": str(query.get("engine", "megatron") or "megatron"),
        "precision": str(query.get("precision", "") or ""),
        "grad_reduce_dtype": str(query.get("grad_reduce_dtype", "") or ""),  # blank: the recipe's
        "emit": str(query.get("emit", "") or ""),  # blank: this product's config format
    }


def _form_context(form: dict) -> dict:
    return {
        "page": "recommend",
        "form": form,
        "models": index.list_models(),
        "hardware": index.list_hardware(),
        "goals": GOALS,
        "engines": ENGINES,
        "emits": EMITS,
        "precisions": PRECISIONS,
        "grad_reduce_dtypes": GRAD_REDUCE_DTYPES,
        "limits": {"gpus": m.MAX_GPUS, "nodes": m.MAX_NODES, "seq_length": m.MAX_SEQ_LENGTH,
                   "least_seq_length": least("seq_length")},
    }


@router.get("/", response_class=HTMLResponse)
def index_page(request: Request) -> HTMLResponse:
    return render(request, "index.html", _form_context(form_defaults(request.query_params)))


# ------------------------------------------------------------------ recommend result

FORM_FIELDS = ("model", "gpu_type", "gpus", "nodes", "goal", "seq_length", "engine", "precision",
               "grad_reduce_dtype", "emit")


def query_problems(query: Any, fields: tuple[str, ...] = FORM_FIELDS) -> list[Problem]:
    """A Problem for each query parameter the form does not have, or has once but was given more
    often: a misspelt or unsupported one (`&global_batch=64`) would otherwise be dropped, and a repeated
    one (`&gpus=8&gpus=16`) answered with its last value; either way another request than asked (the
    API refuses both with 422, service.http.limits.StrictRequestRoute)."""
    unknown = sorted({key for key in query.keys() if key not in fields})
    repeated = [key for key in dict.fromkeys(query.keys()) if key in fields and len(query.getlist(key)) > 1]
    names = ", ".join(fields)
    return ([Problem(f"unknown parameter; the form's fields are {names}", key[:40]) for key in unknown[:8]]
            + [Problem(REPEATED_PARAMETER, key) for key in repeated])


def form_body(form: dict, body: type[m.PlanBody] = m.RecommendBody,
               fields: tuple[str, ...] = FORM_FIELDS) -> tuple[Optional[m.PlanBody], list[Problem]]:
    """The API body from the form's strings; each pydantic error becomes a Problem naming its field.
    Lax mode: a form's values are all text, so "8" is read as the integer the API body holds."""
    values = {k: v.strip() for k, v in form.items() if k in fields and str(v).strip()}
    try:
        return body.model_validate(values, strict=False), []
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            name = ".".join(str(part) for part in error["loc"]) or "form"
            problems.append(Problem(error["msg"], name))
        return None, problems


def lookup_problem(err: UnknownModelError | UnknownHardwareError) -> Problem:
    """The form's problem for a model or GPU type the index does not know (the API answers 404)."""
    if isinstance(err, UnknownModelError):
        return Problem(f"unknown model {err.name!r}: not a bundled model", "model", err.suggestions)
    return Problem(f"unknown GPU type {err.name!r}", "gpu_type", err.suggestions or err.known)


def download_name(request: AdviceRequest) -> str:
    """The config's file name, also used in the launch commands (names are index ids: safe in a path)."""
    hardware = index.get_hardware(request.gpu_type)
    gpus_per_node, nodes = split_world(request.gpus, request.nodes, hardware.gpus_per_node)
    return f"{request.model.id}-{request.goal}-{gpus_per_node * nodes}x{hardware.name}.yaml"


# The service's fixes name CLI flags and API fields ("--precision bf16 (API: precision bf16)"); the
# page names its own fields.
_OPTION_WORDING = re.compile(r"--(precision|engine|gpus|gpu-type|seq-length|nodes|goal|grad-reduce-dtype) "
                             r"([^\s;,)]+)"
                             r"(?: \(API: [a-z_]+ [^\s)]+\))?")
_FORM_LABELS = {"precision": "Precision", "engine": "Engine", "gpus": "GPUs", "gpu-type": "GPU type",
                "seq-length": "Sequence length", "nodes": "Nodes", "goal": "Goal",
                "grad-reduce-dtype": "Gradient reduce dtype"}


def _form_wording(text: str) -> str:
    def field(match: re.Match) -> str:
        flag, value = match.group(1), match.group(2)
        return f"{_FORM_LABELS.get(flag, flag)} {value}"

    return _OPTION_WORDING.sub(field, text)


async def _recommendation(request: Request, download: bool = False) -> tuple[Optional[dict], Optional[Response], str,
                                                                          str]:
    """(answer, error page, query string, file name) for the form's query parameters. A download by a client
    that does not take HTML (``curl -o config.yaml``) gets the problems as text, not a page to save as its config."""
    form = form_defaults(request.query_params)
    query = urlencode({k: v for k, v in form.items() if v})
    problems = query_problems(request.query_params)
    body, problems = (None, problems) if problems else form_body(form)
    status = 422  # as the API answers a body with an unknown key
    if body is not None:
        try:
            advice = body_request(body)
            filename = download_name(advice)
            status, content = await recommend_answer(body, advice, filename)
        except (UnknownModelError, UnknownHardwareError) as err:
            problems, status = [lookup_problem(err)], 404
        else:
            data = json.loads(content)
            if status == 200:
                return data, None, query, filename
            problems = [Problem(_form_wording(data["detail"]), data.get("field"), data.get("suggestions") or [])]
    html_q, named = quality(media_ranges(request.headers.get("accept", "")), "text/html")
    if download and not (html_q > 0 and named == 2):  # a browser names text/html; curl's */* does not
        lines = [f"error: {p.field + ': ' if p.field else ''}{p.message}" for p in problems]
        return None, PlainTextResponse("\n".join(lines) + "\n", status_code=status), query, ""
    page = render(request, "index.html", {**_form_context(form), "problems": problems}, status_code=status)
    return None, page, query, ""


@router.get("/recommend", response_class=HTMLResponse)
async def recommend_page(request: Request) -> HTMLResponse:
    data, error_page, query, filename = await _recommendation(request)
    if error_page is not None:
        return error_page
    return render(request, "result.html", {"page": "recommend", "r": result_view(data, query, filename)})


@router.get("/recommend.yaml")
async def recommend_download(request: Request) -> Response:
    data, error_page, _, filename = await _recommendation(request, download=True)
    if error_page is not None:
        return error_page
    return Response(
        data["config_yaml"],
        media_type="application/yaml",
        headers={"content-disposition": f'attachment; filename="{filename}"'},
    )
