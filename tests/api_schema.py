"""Check API responses against the OpenAPI document the server serves."""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from openapi_schema_validator import OAS30Validator


@lru_cache(maxsize=1)
def document() -> dict[str, Any]:
    return json.loads(resources.files("gpu_widgets.server").joinpath("openapi.json").read_text())


def validate_response(path: str, body: Any) -> None:
    """Raise if ``body`` is not what the document promises for GET ``path`` (or "error")."""
    doc = document()
    if path == "error":
        schema: dict[str, Any] = {"$ref": "#/components/schemas/Error"}
    else:
        schema = doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    OAS30Validator({**schema, "components": doc["components"]}).validate(body)
