"""The HTTP API (FastAPI on uvicorn): ``escalation serve``. See docs/api.md and
docs/adr/0003-http-api-fastapi.md. Routes call the service-layer use cases through the
``bootstrap.App``; every domain error maps to an RFC 9457 problem document."""
