"""Hypothesis profiles of the unit tier.

``unit`` (the default) keeps ``pytest tests/unit`` to a few seconds: property tests run
100 generated examples each. ``thorough`` runs 1000 per property test, for CI's nightly job
or a change to a fast path (``HYPOTHESIS_PROFILE=thorough pytest tests/unit``). Property
tests leave ``max_examples`` to the profile; they set only what is theirs (``deadline``).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("unit", max_examples=100)
settings.register_profile("thorough", max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "unit"))
