"""fast_init: the descriptor-based constructor keeps what the dataclass constructor did."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from uuid import uuid4

import pytest

from escalation.domain.decide import Decision
from escalation.domain.escalation import Escalation
from escalation.domain.materiality import Materiality
from escalation.domain.values import fast_init
from escalation.ports import ApplyOp, ClaimedItem, RecordOutcome, WarningMember

FAST = (Escalation, Materiality, Decision, ClaimedItem, ApplyOp, WarningMember, RecordOutcome)


def _reference(cls: type) -> type:
    """The same fields in a plain frozen slots dataclass (its generated ``__init__``)."""
    specs = []
    for f in dataclasses.fields(cls):
        specs.append((f.name, f.type, field(default=f.default))
                     if f.default is not dataclasses.MISSING else (f.name, f.type))
    return dataclasses.make_dataclass(f"Ref{cls.__name__}", specs, frozen=True, slots=True)


@pytest.mark.parametrize("cls", FAST, ids=lambda c: c.__name__)
def test_signature_is_the_dataclass_one(cls: type) -> None:
    mine = [(p.name, p.kind, p.default) for p in inspect.signature(cls).parameters.values()]
    ref = [(p.name, p.kind, p.default)
           for p in inspect.signature(_reference(cls)).parameters.values()]
    assert mine == ref
    assert vars(cls)["__init__"].__qualname__ == f"{cls.__qualname__}.__init__"


def test_objects_equal_the_dataclass_built_ones() -> None:
    @dataclass(frozen=True, slots=True)
    class Plain:
        a: int
        b: str
        c: tuple[int, ...] = ()
        d: str | None = None

    @fast_init
    @dataclass(frozen=True, slots=True)
    class Fast:
        a: int
        b: str
        c: tuple[int, ...] = ()
        d: str | None = None

    for args, kw in (((1, "x"), {}), ((1,), {"b": "y", "d": "z"}), ((), {"a": 2, "b": "q"}),
                     ((3, "r", (1, 2)), {"d": None})):
        p, f = Plain(*args, **kw), Fast(*args, **kw)
        assert dataclasses.astuple(p) == dataclasses.astuple(f)
        assert repr(f).replace("Fast", "Plain") == repr(p)
        assert hash(f) == hash(Fast(*args, **kw))
    with pytest.raises(TypeError):
        Fast(1)  # type: ignore[call-arg]  # missing b
    with pytest.raises(TypeError):
        Fast(1, "x", (), None, "extra")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Fast(1, "x", a=2)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Fast(1, "x").a = 2  # type: ignore[misc]


def test_product_values_stay_frozen_and_replaceable() -> None:
    now = datetime(2026, 1, 5, 12, tzinfo=UTC)
    esc = Escalation(dispute_id=uuid4(), tier="standard", due_at=now,
                     materiality=Materiality(Decimal("10.00")), source_hash="ab",
                     ladder="default", ladder_version=1, seq=1, entered_tier_at=now,
                     trace_id="t")
    moved = esc.with_changes(tier="senior", seq=2)
    assert (moved.tier, moved.seq, moved.dispute_id) == ("senior", 2, esc.dispute_id)
    assert moved == dataclasses.replace(esc, tier="senior", seq=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        esc.tier = "senior"  # type: ignore[misc]
    assert Materiality(Decimal("1.00")) < Materiality(Decimal("2.00"))  # order=True kept


def test_refuses_what_it_cannot_reproduce() -> None:
    @dataclass(frozen=True, slots=True)
    class WithFactory:
        a: list[int] = field(default_factory=list)

    @dataclass(frozen=True, slots=True)
    class WithPost:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclass(slots=True)
    class NotFrozen:
        a: int

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(frozen=True, slots=True, kw_only=True)
    class KwOnly:
        a: int

    for cls in (WithFactory, WithPost, NotFrozen, NoSlots, KwOnly):
        with pytest.raises(TypeError):
            fast_init(cls)
