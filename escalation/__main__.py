"""``python -m escalation`` = the ``escalation`` console script."""

from __future__ import annotations

from escalation.entrypoints.cli import main

main()
