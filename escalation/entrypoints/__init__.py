"""Entry points: the ``escalation`` CLI and the worker loop."""
