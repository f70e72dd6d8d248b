"""Render the OpenAPI document committed as docs/openapi.json (a test keeps it in sync).

Regenerate with ``python -m escalation.entrypoints.api.openapi > docs/openapi.json``.
"""

from __future__ import annotations

import json
import sys

from escalation.entrypoints.api.app import create_app


def render_openapi() -> str:
    """The OpenAPI 3.1 document of the API as stable, indented JSON text (with a newline)."""
    doc = create_app().openapi()
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_openapi())
