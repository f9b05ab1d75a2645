"""Property-based fuzzing of the REST API from its served OpenAPI document (bounded examples):
no server error, no response that breaks the schema, and every refusal is a JSON message.

Generated requests cover valid input (positive) and input the schema forbids (negative: wrong
types, out-of-range numbers), against a server whose simulated GPUs include a lost one and an
unsupported field, so null values and lost devices go through the schema checks too.
"""
from __future__ import annotations

import pytest
import schemathesis
from schemathesis.checks import negative_data_rejection
from hypothesis import HealthCheck, given, settings
from schemathesis.generation.modes import GenerationMode

from .lab_server import LabServer

pytestmark = pytest.mark.integration  # every test here starts a process

EXAMPLES_PER_OPERATION = 25


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    env = {"GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_SIMULATED_FAULTS": "lost:1@0-3600; unsupported:0:power_w"}
    with LabServer(tmp_path_factory.mktemp("fuzz"), env=env, args=("--GpuWidgets.interval_s=0.2",)) as srv:
        yield srv


def operations(server: LabServer):
    doc = server.api("openapi.json")
    schema = schemathesis.openapi.from_dict(doc)
    schema.config.update(base_url=server.base_url + "/gpu-widgets/api/v1")
    return [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_api_answers_every_generated_request_within_its_schema(fuzz_server, mode):
    ops = operations(fuzz_server)
    assert {op.path for op in ops} >= {"/status", "/devices", "/samples/latest", "/samples", "/processes"}
    calls = {"n": 0}
    for op in ops:
        if mode == GenerationMode.NEGATIVE and not op.query:
            continue  # nothing to make invalid on routes without parameters

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case):
            calls["n"] += 1
            response = case.call(headers=fuzz_server.headers)
            assert response.status_code < 500, response.text
            if response.status_code == 200:
                # A case whose mutations include the auth header (which ours replaces) may be
                # valid as sent (a one-element array serialises as a plain value): then a 200 is
                # right, and only the answer's schema is checked.
                own = (case.headers or {}).get("Authorization") == fuzz_server.headers["Authorization"]
                case.validate_response(response, excluded_checks=None if own else [negative_data_rejection])
            else:
                body = response.json()
                sent_token = response.request.headers.get("Authorization")
                if sent_token != fuzz_server.headers["Authorization"]:
                    # negative cases also mutate the declared auth header: that must be refused
                    assert response.status_code == 403 and body["code"] == "forbidden", body
                elif op.path == "/processes/{pid}/kill":
                    # no fuzzed pid is an orphan of this server's kernels: refused, never killed
                    assert response.status_code in (400, 403, 404) and body["message"], body
                elif op.path == "/cells/summary" and response.status_code == 404:
                    # no fuzzed id is a kernel of this server: unknown, never someone else's figures
                    assert body["code"] == "unknown_kernel" and body["message"], body
                else:
                    assert response.status_code == 400, (case.query, body)
                    assert body["code"] == "bad_parameter" and body["message"], body

        check()
    assert calls["n"] >= 5
