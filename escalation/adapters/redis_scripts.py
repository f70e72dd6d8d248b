"""Lua scripts of the Redis adapters and the small encoders their arguments need.

One Lua script per atomic operation lives in ``adapters/lua/`` (``claim.lua`` <->
``RedisScheduler.claim``); each opens with a header giving its KEYS, ARGV and returns.
Scripts are read through the installed package (``importlib.resources``) and registered per
client with ``register_script`` (which re-sends a script on NOSCRIPT).

Helpers several scripts share live once in ``adapters/lua/includes/<name>.lua``. A script
names one with a line ``-- @include "<name>"`` (a Lua comment, so the file stays valid Lua
as it is); :func:`script_source` replaces that line with the helper's text when the script
is loaded. A helper included twice in one script (directly or through another helper) is
inserted once, at its first include; an unknown name or an include cycle raises.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import redis
from redis.commands.core import Script

from escalation.adapters.redis_client import OUTAGE_ERRORS
from escalation.domain.errors import EscalationError, InvalidInput

__all__ = [
    "ScriptRefused",
    "as_dict",
    "check_range",
    "packaged_scripts",
    "pairs",
    "run_script",
    "script_source",
]

class ScriptRefused(EscalationError, redis.ResponseError):
    """A Lua script refused its arguments (``EINVAL <script>: <reason>``); nothing written.

    Both an :class:`EscalationError` (what the service layer catches: the refusal concerns
    one item) and a ``redis.ResponseError`` (what callers of the adapters caught before)."""


def run_script(script: Script, keys: Sequence[str], args: Sequence[str | bytes | int]) -> Any:
    """Call a registered script. Raises :class:`ScriptRefused` for a script's error reply;
    connection errors propagate as redis-py raises them."""
    try:
        return script(keys=list(keys), args=list(args))
    except redis.ResponseError as exc:
        if isinstance(exc, redis.exceptions.NoScriptError):  # pragma: no cover - re-sent
            raise
        if isinstance(exc, OUTAGE_ERRORS):
            # READONLY / TRYAGAIN / MASTERDOWN / CLUSTERDOWN: the server cannot take the
            # write right now (a failover): not the script refusing this item
            raise
        if isinstance(exc, redis.exceptions.OutOfMemoryError):
            raise  # the server is full, not a refusal of this item (the CLI says so)
        raise ScriptRefused(str(exc)) from exc


INCLUDE = re.compile(r'^--[ \t]*@include[ \t]+"([a-z_]+)"[ \t]*$', re.MULTILINE)
"""An include line: ``-- @include "<helper>"`` alone on its line."""


def _lua_file(*parts: str) -> str:
    return (resources.files("escalation.adapters").joinpath("lua", *parts)
            .read_text(encoding="utf-8"))


def _expand(text: str, done: set[str], stack: tuple[str, ...]) -> str:
    """``text`` with each include line replaced by its helper's (expanded) text; a helper
    already in ``done`` is replaced by nothing."""
    def one(match: re.Match[str]) -> str:
        helper = match.group(1)
        if helper in stack:
            raise ValueError(f"Lua include cycle: {' -> '.join((*stack, helper))}")
        if helper in done:
            return ""
        done.add(helper)
        body = _lua_file("includes", f"{helper}.lua")
        return _expand(body, done, (*stack, helper)).rstrip("\n")
    return INCLUDE.sub(one, text)


@cache
def script_source(name: str) -> str:
    """Text of ``adapters/lua/<name>.lua`` read through the installed package, its
    ``-- @include "<helper>"`` lines replaced by ``adapters/lua/includes/<helper>.lua``
    (see the module doc): the text Redis runs.

    Raises:
        FileNotFoundError: the script or an included helper is missing (a packaging bug).
        ValueError: the includes form a cycle.
    """
    return _expand(_lua_file(f"{name}.lua"), set(), (name,))


def packaged_scripts() -> list[str]:
    """Names (without ``.lua``) of the Lua files shipped in the installed package, sorted."""
    folder = resources.files("escalation.adapters").joinpath("lua")
    return sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".lua"))


def pairs(mapping: dict[str, str]) -> list[str]:
    """``{k1: v1, ...}`` flattened to ``[k1, v1, ...]`` (script ARGV order)."""
    flat: list[str] = []
    for key, value in mapping.items():
        flat += [str(key), str(value)]
    return flat


def as_dict(flat: Sequence[str]) -> dict[str, str]:
    """Inverse of :func:`pairs` (a script's HGETALL reply); a trailing odd element is
    ignored."""
    even = len(flat) // 2 * 2
    return dict(zip(flat[0:even:2], flat[1:even:2], strict=True))


def check_range(name: str, value: int, low: int, high: int) -> int:
    """``value`` if it is an int (not a bool) in ``low..high``, else InvalidInput naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{name} must be an integer in {low}..{high}, got {value!r}")
    return value
