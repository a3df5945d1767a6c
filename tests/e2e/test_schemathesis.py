"""Property-based fuzzing of the API against its own OpenAPI schema (schemathesis).

Every operation gets generated requests, valid and invalid; every response must
be a non-5xx that the schema documents, with a body matching its schema, and
invalid requests must be rejected. Bounded: a few hundred cases, well under a minute.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from service.http.app import create_app

schema = schemathesis.openapi.from_asgi("/openapi.json", create_app())

# Where a schema-valid request can still be unusable, the documented answer is a 400 that the
# positive-data check would count as "valid data rejected": JSON Schema can say "a string", not
# "a string that parses as a YAML mapping" (validate, diff), nor "a model that fits on some GPU
# count" (recommend answers 400 with the count that would work), nor "GPUs per node within the node
# size of this GPU type" (plan and recommend answer 400 naming gpus), nor "a completed run has a step
# time, p10 <= median <= p90, a model the index knows" (runs answer 422 naming the field). Every other
# check (no 5xx, documented status, response schema, content type, invalid data rejected) still runs on them.
MAY_REJECT_VALID_SHAPES = {"/v1/validate", "/v1/diff", "/v1/recommend", "/v1/plan", "/v1/tune", "/v1/runs"}
# A YAML or plain-text body is text on the wire: a "negative" case that swaps the schema's string for a
# mapping is serialised to YAML text, which is a valid body (a config), so it cannot be rejected for type.
TEXT_MEDIA_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain")


@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_conforms_to_its_schema(case):
    excluded = [positive_data_acceptance] if case.path in MAY_REJECT_VALID_SHAPES else []
    if case.media_type in TEXT_MEDIA_TYPES:
        excluded.append(negative_data_rejection)
    case.call_and_validate(excluded_checks=excluded)
