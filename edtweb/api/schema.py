"""Schema post-processing: what every operation shares, said once."""

from __future__ import annotations

from typing import Any

UNAUTHORIZED = {
    "description": "no credentials, or wrong ones",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def document_auth_errors(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Every operation that needs credentials answers 401 without them."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if operation.get("security"):
                operation["responses"].setdefault("401", UNAUTHORIZED)
    return result
