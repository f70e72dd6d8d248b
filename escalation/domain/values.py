"""A cheaper constructor for the frozen value objects built on the firing path.

A ``@dataclass(frozen=True, slots=True)`` class gets an ``__init__`` that sets each field
with ``object.__setattr__(self, "name", value)``: a global lookup, an attribute lookup and a
generic attribute set by name per field. The firing path builds about ten such objects per
escalation (the claimed and the recorded :class:`~escalation.domain.escalation.Escalation`,
its decision, its apply op, ...), and those constructors were the largest self cost of the
project's own code in a worker profile (CHANGELOG.md, "Firing path CPU (eighth pass)").

:func:`fast_init` replaces that ``__init__`` by one with the same signature that sets each
slot through its member descriptor (``Cls.field.__set__``), which a frozen class does not
intercept: about half the time for a 16-field class. Everything else the dataclass
generated (equality, hashing, ordering, ``repr``, the frozen ``__setattr__``) is kept.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")

_MISSING = dataclasses.MISSING


def fast_init(cls: type[T]) -> type[T]:
    """Give the frozen slots dataclass ``cls`` a descriptor-based ``__init__``; returns ``cls``.

    The new ``__init__`` takes the same parameters, in the same order, with the same
    defaults, positional or by keyword, as the one ``dataclasses`` generated (the tests
    compare the two signatures and the objects both build).

    Raises:
        TypeError: ``cls`` is not a frozen dataclass with ``__slots__``, or uses what this
            constructor does not reproduce (``__post_init__``, ``InitVar``, a default
            factory, keyword-only fields, a field left out of ``__init__``).
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: fast_init needs a frozen dataclass with slots")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: fast_init does not call __post_init__")
    fields = list(cls.__dict__["__dataclass_fields__"].values())
    args: list[str] = []
    body: list[str] = []
    env: dict[str, Any] = {}
    for i, f in enumerate(fields):
        if f._field_type is not dataclasses._FIELD:  # type: ignore[attr-defined]
            raise TypeError(f"{cls.__name__}.{f.name}: InitVar / ClassVar not supported")
        if not f.init or f.kw_only or f.default_factory is not _MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: only plain init fields are supported")
        if f.default is _MISSING:
            args.append(f.name)
        else:
            env[f"_d{i}"] = f.default
            args.append(f"{f.name}=_d{i}")
        env[f"_s{i}"] = cls.__dict__[f.name].__set__
        body.append(f"    _s{i}(self, {f.name})")
    src = (f"def __init__(self, {', '.join(args)}):\n" + "\n".join(body or ["    pass"])
           + "\n")
    exec(src, env)  # noqa: S102 -- generated from the class's own field names, as dataclasses does
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = dict(cls.__init__.__annotations__)
    type.__setattr__(cls, "__init__", init)
    return cls
