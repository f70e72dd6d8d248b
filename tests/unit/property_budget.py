"""How many examples a costly property test draws in the unit tier.

The ``unit`` Hypothesis profile (tests/unit/conftest.py) draws 100 examples per property
test. A few equivalence tests build a whole generated escalation per example and compare two
renderings of it: at 100 examples they took most of the unit tier's CPU while a failure they
exist for (a field the fast path renders differently) shows in the first few examples, since
every example exercises every field. Those tests draw :func:`examples` instead: the count
given here under the ``unit`` profile, the profile's own count under any other one (so
``HYPOTHESIS_PROFILE=thorough`` still runs 1,000 of each).
"""

from __future__ import annotations

import os

from hypothesis import settings

#: the Hypothesis profile this run loads (the unit tier's conftest loads the same one)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "unit")


def examples(unit: int) -> int:
    """``unit`` under the ``unit`` profile, else the loaded profile's ``max_examples``."""
    return unit if PROFILE == "unit" else settings().max_examples
