"""escalation: dispute SLA escalation service.

A dispute that misses its tier's SLA window is moved to the next tier of its ladder exactly
once in effect, on time, with a permanent record in PostgreSQL. See docs/architecture.md.
"""

from __future__ import annotations

__version__ = "0.1.0"
