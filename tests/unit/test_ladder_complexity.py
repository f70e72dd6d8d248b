"""The ladder migration code stays reviewable: cyclomatic complexity (radon, which counts
boolean operators and comprehensions as branches) <= 12 for every function of the apply path
and the release step; ``migrate_batch`` used to be 21 and ``apply_migration`` 13."""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_visit

ROOT = Path(__file__).resolve().parents[2]
FILES = [
    "escalation/service_layer/ladder_migration.py",
    "escalation/service_layer/ladder_release.py",
    "escalation/adapters/ladder_history.py",
]
LIMIT = 12


def test_ladder_migration_functions_have_complexity_at_most_12() -> None:
    too_complex: list[str] = []
    seen = 0
    for rel in FILES:
        for block in cc_visit((ROOT / rel).read_text()):
            seen += 1
            for item in [block, *getattr(block, "methods", [])]:
                if item.complexity > LIMIT:
                    too_complex.append(f"{rel}: {item.fullname} = {item.complexity}")
    assert seen > 20  # the files were read
    assert too_complex == []
