"""The Redis sorted-set scheduler: the ``Scheduler`` port on Redis (docs/architecture.md).

The scheduler and the two things it stands on are in this one module, read top to bottom:

* **Lua scripts**: each script of ``adapters/lua/`` read through the installed package, its
  ``-- @include`` lines expanded (:func:`script_source`), and called by :func:`run_script`
  (a script's refusal is :class:`ScriptRefused`); the small encoders of script arguments
  (:func:`pairs`, :func:`as_dict`, :func:`check_range`). ``redis_warnings`` and
  ``redis_reconcile_notify`` load and run their scripts through these too;
* **the payload HASH**: the one mapping between an ``Escalation`` and its payload, both
  directions (:func:`escalation_to_payload`, :func:`payload_pairs`,
  :func:`payload_to_escalation`, :func:`claimed_payload_to_escalation`): one-letter field
  names written, the long names of earlier versions still read;
* **RedisScheduler**, one class read in the order of the firing protocol
  (docs/architecture.md, "The firing protocol"):

  * construction, keys and the clock (Redis ``TIME``, the one clock: ADR 0005);
  * **enqueue** (enqueue.lua): payload + score written atomically, idempotent per dispute;
    the CSV import's pre-rendered rows (:class:`PayloadTemplate`,
    :meth:`RedisScheduler.enqueue_encoded`);
  * **claim** (claim.lua, firing step 1): due members locked with fresh fencing tokens and
    re-scored to now + lease (the visibility timeout), with the idle fast path;
  * **apply** (apply.lua, firing step 4: the ack of a claim): a recorded decision written
    back under the claim's fencing token and the payload's seq;
  * **restore** (apply.lua in create mode: recovery): owner-less repair from PostgreSQL
    state (reconcile, the STUCK_MEMBER repair, ladder apply);
  * **cancel** (cancel.lua);
  * the worker's wake-ups and the reads of ``escalation status`` and reconcile
    (:func:`review_notified`: is a decision's entry in the review stream).

Every key a script touches is passed in KEYS, so every call addresses one shard (one Redis
Cluster slot).

Times: scores and payload times are epoch **milliseconds** UTC; the only clock consulted for
"is it due" is Redis ``TIME`` (inside the scripts, or via ``time()``), never the host clock.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from functools import cache
from importlib import resources
from json.encoder import encode_basestring_ascii as _json_str
from typing import Any, cast
from uuid import UUID

import orjson
import redis
import structlog
from redis.commands.core import Script

from escalation.adapters.redis_client import OUTAGE_ERRORS, is_cluster
from escalation.adapters.redis_keys import Keys, shard_of
from escalation.adapters.redis_wake import cluster_blpop_any
from escalation.domain.errors import ConflictError, EscalationError, InvalidInput
from escalation.domain.escalation import Escalation, Status, parse_dispute_id
from escalation.domain.materiality import Materiality
from escalation.domain.timeutil import EPOCH, from_ms, to_ms
from escalation.ports import (
    MAX_OP_WARNINGS,
    ApplyAction,
    ApplyOp,
    ApplyOutcome,
    ClaimedItem,
    ClaimResult,
)

__all__ = [
    "DEFAULT_AGING_MS",
    "LEGACY_NAMES",
    "NOTIFIED_SLACK_MS",
    "OPTIONAL_FIELDS",
    "PAYLOAD_FIELDS",
    "REQUIRED_FIELDS",
    "SCRIPT_NAMES",
    "EncodedPayload",
    "PayloadTemplate",
    "RedisScheduler",
    "ScriptRefused",
    "as_dict",
    "check_range",
    "claimed_payload_to_escalation",
    "escalation_to_payload",
    "normalize_payload",
    "packaged_scripts",
    "pairs",
    "payload_pairs",
    "payload_to_escalation",
    "review_notified",
    "run_script",
    "script_source",
]

log = structlog.get_logger("escalation.adapters.redis_scheduler")


# --------------------------------------------------------------------------- Lua scripts
# Lua scripts of the Redis adapters and the small encoders their arguments need.
#
# One Lua script per atomic operation lives in ``adapters/lua/`` (``claim.lua`` <->
# ``RedisScheduler.claim``); each opens with a header giving its KEYS, ARGV and returns.
# Scripts are read through the installed package (``importlib.resources``) and registered per
# client with ``register_script`` (which re-sends a script on NOSCRIPT).
#
# Helpers several scripts share live once in ``adapters/lua/includes/<name>.lua``. A script
# names one with a line ``-- @include "<name>"`` (a Lua comment, so the file stays valid Lua
# as it is); :func:`script_source` replaces that line with the helper's text when the script
# is loaded. A helper included twice in one script (directly or through another helper) is
# inserted once, at its first include; an unknown name or an include cycle raises.


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
    (see "Lua scripts" above): the text Redis runs.

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


# --------------------------------------------------------------------------- The payload HASH
# The one mapping between an ``Escalation`` and its Redis payload HASH (both directions).
#
# The payload is kept compact because every pending escalation holds one (memory matters).
# Field names are one letter where the name is read only here: in a small HASH (listpack
# encoding) every field name is stored in every payload, so the long names of earlier
# versions were about a quarter of a payload's bytes (612 -> 549 B per pending escalation
# with one-letter names). ``seq`` and ``due_ms`` keep their names because Lua scripts
# (``apply.lua``, ``cancel.lua``, ``reconcile_remove.lua``) and the reliability sweep read them
# by name.
#
# ====== ============ ================================================ =======================
# field  earlier name value                                            example
# ====== ============ ================================================ =======================
# t      tier         current tier id                                  ``senior``
# l      ladder       ``"<ladder name>@<pinned version>"``             ``default@1``
# seq    seq          sequence number of the last ledger row (integer) ``3``
# due_ms due_ms       breach time, epoch **milliseconds** UTC          ``1767225600000``
# e      entered_ms   time the tier was entered, epoch ms UTC          ``1767139200000``
# m      materiality  Decimal string, two fractional digits            ``1250.00``
# h      source_hash  lower-case hex digest of the source record       ``a1b2c3``
# r      trace_id     correlation id                                   ``7f0c...``
# x      external_id  only when set: the source system's non-UUID id   ``CFPB-123``
# s      (none)       only when set: the source system's name          ``cfpb``
# d      deadline_ms  only when set: regulatory deadline, epoch ms UTC ``1767744000000``
# ds     deadlines    only when set: every deadline, ``name=ms``       ``a=1767744000000,...``
#                     joined by ``,`` (ladders with several deadlines)
# z      tz           only when set: the institution's IANA time zone  ``America/New_York``
# c      cal          only when set: the institution's calendar        ``us_federal``
# ====== ============ ================================================ =======================
#
# Backward compatible reading: :func:`payload_to_escalation` also accepts a payload written by
# an earlier version (the long names, ``LEGACY_NAMES``), so escalations pending in Redis across
# an upgrade still decode, claim and fire; their next write (``apply.lua`` DELs and re-HSETs the
# whole payload; enqueue and restore write through :func:`escalation_to_payload`) stores the
# short names. Every write stores a whole payload (``enqueue.lua`` writes only where no payload
# exists, ``apply.lua`` DELs first), so a payload is in one format or the other: one holding the
# short ``t`` field is read by the short names only, any other by the long names.
#
# The dispute id is not stored in the hash: it is the key suffix and the ZSET member.

REQUIRED_FIELDS: tuple[str, ...] = ("t", "l", "seq", "due_ms", "e", "m", "h", "r")
OPTIONAL_FIELDS: tuple[str, ...] = ("x", "s", "d", "ds", "z", "c")
PAYLOAD_FIELDS: tuple[str, ...] = REQUIRED_FIELDS + OPTIONAL_FIELDS

#: Short (current) field name -> the long name an earlier version wrote. Read-only: nothing
#: writes the long names any more.
LEGACY_NAMES: Mapping[str, str] = {
    "t": "tier",
    "l": "ladder",
    "seq": "seq",
    "due_ms": "due_ms",
    "e": "entered_ms",
    "m": "materiality",
    "h": "source_hash",
    "r": "trace_id",
    "x": "external_id",
    "s": "source",  # no earlier version wrote it: the long name is only read
    "d": "deadline_ms",
    "ds": "deadlines",
    "z": "tz",
    "c": "cal",
}


def escalation_to_payload(esc: Escalation) -> dict[str, str]:
    """The payload HASH fields of ``esc`` (all values strings; times in epoch ms UTC).

    Optional fields (``x``, ``s``, ``d``, ``ds``, ``z``, ``c``) appear only when set.
    ``status`` is not stored: a payload with a ZSET member is pending, one without (after
    ``apply`` PARK) is paused.
    """
    fields = {
        "t": esc.tier,
        "l": esc.ladder_key,
        "seq": str(int(esc.seq)),
        "due_ms": str(to_ms(esc.due_at)),
        "e": str(to_ms(esc.entered_tier_at)),
        "m": str(esc.materiality),
        "h": esc.source_hash,
        "r": esc.trace_id,
    }
    if esc.external_id is not None:
        fields["x"] = esc.external_id
    if esc.source is not None:
        fields["s"] = esc.source
    if esc.regulatory_deadline is not None:
        fields["d"] = str(to_ms(esc.regulatory_deadline))
    if esc.deadlines:
        fields["ds"] = ",".join(f"{n}={to_ms(at)}" for n, at in esc.deadlines)
    if esc.institution_tz is not None:
        fields["z"] = esc.institution_tz
    if esc.institution_calendar is not None:
        fields["c"] = esc.institution_calendar
    return fields


def payload_pairs(esc: Escalation) -> list[str]:
    """:func:`escalation_to_payload` as the flat list ``[f1, v1, f2, v2, ...]``, same fields
    in the same order (apply.lua's argument form, built without the intermediate dict)."""
    flat = ["t", esc.tier, "l", f"{esc.ladder}@{esc.ladder_version}", "seq", str(int(esc.seq)),
            "due_ms", str(to_ms(esc.due_at)), "e", str(to_ms(esc.entered_tier_at)),
            "m", str(esc.materiality), "h", esc.source_hash, "r", esc.trace_id]
    if esc.external_id is not None:
        flat += ("x", esc.external_id)
    if esc.source is not None:
        flat += ("s", esc.source)
    if esc.regulatory_deadline is not None:
        flat += ("d", str(to_ms(esc.regulatory_deadline)))
    if esc.deadlines:
        flat += ("ds", ",".join(f"{n}={to_ms(at)}" for n, at in esc.deadlines))
    if esc.institution_tz is not None:
        flat += ("z", esc.institution_tz)
    if esc.institution_calendar is not None:
        flat += ("c", esc.institution_calendar)
    return flat


def normalize_payload(fields: Mapping[str, str]) -> Mapping[str, str]:
    """``fields`` keyed by the current (short) names, whichever format wrote them.

    A payload holding ``t`` is in the current format and is returned as it is (no copy: the
    claim path decodes every claimed payload); any other is taken for the earlier format and
    its known long names (``LEGACY_NAMES``) are mapped to the short ones, unknown fields
    dropped. Never raises; missing fields stay missing.
    """
    if "t" in fields:
        return fields
    return {
        short: fields[long]
        for short, long in LEGACY_NAMES.items()
        if long in fields
    }


def _int_field(fields: Mapping[str, str], name: str) -> int:
    try:
        return int(fields[name])
    except (KeyError, ValueError):
        raise InvalidInput(
            f"payload field {name!r} ({LEGACY_NAMES[name]}) missing or not an integer"
        ) from None


def payload_to_escalation(
    dispute_id: UUID | str, fields: Mapping[str, str], status: Status = Status.PENDING
) -> Escalation:
    """Rebuild an ``Escalation`` from its payload HASH (inverse of ``escalation_to_payload``).

    Reads the current short field names and, for payloads written by an earlier version, the
    long names (see "The payload HASH" above).

    Args:
        dispute_id: the member / key suffix (UUID or its string).
        fields: the HGETALL result (str -> str).
        status: lifecycle status to attach (the payload does not store it).

    Raises:
        InvalidInput: a required field is missing or malformed.
    """
    f = normalize_payload(fields)
    missing = [LEGACY_NAMES[name] for name in REQUIRED_FIELDS if name not in f]
    if missing:
        raise InvalidInput(f"payload of {dispute_id} lacks fields {missing}")
    name, sep, version = f["l"].rpartition("@")
    if not sep or not name or not version.isdigit():
        raise InvalidInput(f"payload ladder {f['l']!r} is not '<name>@<version>'")
    return Escalation(
        dispute_id=parse_dispute_id(dispute_id),
        tier=f["t"],
        due_at=from_ms(_int_field(f, "due_ms")),
        materiality=Materiality.parse(f["m"]),
        source_hash=f["h"],
        ladder=name,
        ladder_version=int(version),
        seq=_int_field(f, "seq"),
        entered_tier_at=from_ms(_int_field(f, "e")),
        trace_id=f["r"],
        external_id=f.get("x"),
        regulatory_deadline=None if "d" not in f else from_ms(_int_field(f, "d")),
        status=status,
        deadlines=_deadlines(f.get("ds")),
        institution_tz=f.get("z"),
        institution_calendar=f.get("c"),
        source=f.get("s"),
    )


def _deadlines(text: str | None) -> tuple[tuple[str, datetime], ...]:
    """Parse the ``ds`` field (``name=ms,name=ms``). Raises InvalidInput if malformed."""
    if not text:
        return ()
    out: list[tuple[str, datetime]] = []
    for part in text.split(","):
        name, sep, ms = part.partition("=")
        if not sep or not name or not ms.isdigit():
            raise InvalidInput(f"payload deadlines {text!r} is not 'name=ms,...'")
        out.append((name, from_ms(int(ms))))
    return tuple(out)


_CURRENT_NAMES = frozenset(PAYLOAD_FIELDS)
_MS = timedelta(milliseconds=1)


def claimed_payload_to_escalation(member: str, flat: Sequence[str]) -> Escalation:
    """:func:`payload_to_escalation` for a payload claim.lua just returned, as its flat
    ``HGETALL`` reply ``[f1, v1, ...]``: the same ``Escalation`` (status pending), cheaper.

    The payload was written by this code (``escalation_to_payload`` through enqueue.lua /
    apply.lua), so a payload in the current format whose values have exactly the forms that
    function writes (digits for the times and ``seq``, a two-decimal amount, ``name@digits``
    ladder, no unknown field) is taken as it is, without the text checks of
    ``Materiality.parse``. Anything else -- a payload of an earlier version (long names), a
    field of an unexpected form -- goes through :func:`payload_to_escalation`, which
    validates and raises as before.

    Raises:
        InvalidInput: as :func:`payload_to_escalation` (a missing or malformed field).
    """
    n = len(flat)
    f = dict(zip(flat[0:n - 1:2], flat[1:n:2], strict=True)) if n % 2 == 0 else None
    if f is None or not _CURRENT_NAMES.issuperset(f):
        return payload_to_escalation(member, f if f is not None else as_dict(flat))
    try:
        tier, ladder_key, seq, due, entered, amount, source_hash, trace_id = (
            f["t"], f["l"], f["seq"], f["due_ms"], f["e"], f["m"], f["h"], f["r"])
    except KeyError:
        return payload_to_escalation(member, f)  # raises: a required field is missing
    name, _, version = ladder_key.rpartition("@")
    if not (name and _digits(version) and _digits(seq) and _digits(due)
            and _digits(entered) and 3 < len(amount) <= 18 and amount[-3] == "."
            and _digits(amount[:-3]) and _digits(amount[-2:])
            and isinstance(member, str) and len(member) == 36
            and (len(f) == 8 or _optional_plain(f))):
        return payload_to_escalation(member, f)
    deadline = f.get("d")
    return Escalation(
        dispute_id=parse_dispute_id(member),
        tier=tier,
        due_at=EPOCH + int(due) * _MS,
        materiality=Materiality(Decimal(amount)),
        source_hash=source_hash,
        ladder=name,
        ladder_version=int(version),
        seq=int(seq),
        entered_tier_at=EPOCH + int(entered) * _MS,
        trace_id=trace_id,
        external_id=f.get("x"),
        regulatory_deadline=None if deadline is None else EPOCH + int(deadline) * _MS,
        status=Status.PENDING,
        deadlines=_deadlines(f.get("ds")),
        institution_tz=f.get("z"),
        institution_calendar=f.get("c"),
        source=f.get("s"),
    )


def _optional_plain(f: Mapping[str, str]) -> bool:
    """True when the optional ``d`` field, if present, is plain digits (``ds`` is checked by
    ``_deadlines``, which raises)."""
    d = f.get("d")
    return d is None or _digits(d)


def _digits(text: str) -> bool:
    """True when ``text`` is non-empty ASCII digits (``str.isdigit`` alone admits other
    scripts' digits and superscripts)."""
    return text.isascii() and text.isdigit()


# --------------------------------------------------------------------------- RedisScheduler
SCRIPT_NAMES: tuple[str, ...] = (
    "enqueue",
    "claim",
    "apply",
    "cancel",
    "warn_claim",  # pre-breach warnings: used by adapters.redis_warnings.RedisWarnings
)
MAX_BATCH = 500  # batch_size range 1-500 (docs/operations.md, configuration)
MAX_LEASE_MS = 86_400_000  # claim.lua refuses longer leases
MAX_CLAIM_ROUNDS = 4  # candidate windows tried per shard before giving up on contention
REVIEW_MAXLEN = 100_000  # approximate MAXLEN of the review stream
PROMOTE_MAX = 1000  # claim.lua moves at most this many due members pending -> ready per call
DEFAULT_AGING_MS = 300_000  # one materiality weight = 5 minutes of waiting (docs/sla.md)
_WAKE_GRACE_S = 1.0  # socket guard beyond the BLPOP timeout
WAKE_MARGIN_S = 0.15  # last part of a wait slept locally (Redis hz 10 = 100 ms timer steps)
CLOCK_RESYNC_S = 60.0  # an idle claim re-reads Redis TIME at most this often (see claim)
CLOCK_SLACK_MS = 10  # a member due within this of the estimated Redis time gets a script call


WarningPoints = tuple[tuple[str, int], ...]
"""Pre-breach warnings of one escalation as ``(member suffix after the dispute id, due epoch
ms)`` pairs: ``WarningMember(id, seq, fraction, ms)`` is ``f"{id}{suffix}"`` at ``ms``."""


def _warnings_table(entries: Sequence[WarningPoints | None]) -> tuple[bytes | str, bytes | str]:
    """enqueue.lua's ARGV[1] and ARGV[2] for one call's items: each distinct warnings tuple
    once (its suffixes without the leading ``:``, times as decimal strings) and one 1-based
    reference per item (0 = none); ``("", "")`` when no item has warnings.

    Raises:
        InvalidInput: a suffix that does not start with ``:``.
    """
    index: dict[WarningPoints, int] = {}
    refs: list[int] = []
    for entry in entries:
        if not entry:
            refs.append(0)
            continue
        ref = index.get(entry)
        if ref is None:
            if not all(suffix.startswith(":") for suffix, _ in entry):
                raise InvalidInput(f"warning member suffixes must start with ':', got {entry}")
            ref = index[entry] = len(index) + 1
        refs.append(ref)
    if not index:
        return "", ""
    table = [[part for suffix, ms in entry for part in (suffix[1:], str(ms))] for entry in index]
    return orjson.dumps(table), orjson.dumps(refs)


def _json_strings(flat: Sequence[str]) -> bytes | str:
    """The JSON array of the strings ``flat``, for apply.lua's ``cjson.decode``.

    orjson writes UTF-8 (no ``\\u`` escapes) in about a quarter of the time of the
    ASCII-escaping encoder; both decode to the same byte strings in Redis (cjson turns the
    escapes into UTF-8). What orjson refuses (a lone surrogate, a value it cannot serialise)
    takes the ASCII-escaping form of each element's ``str``.
    """
    try:
        return orjson.dumps(flat)
    except (orjson.JSONEncodeError, TypeError):
        return "[" + ", ".join(_json_str(str(x)) for x in flat) + "]"


def _json_lists(lists: Sequence[Sequence[str]]) -> bytes | str:
    """apply.lua's ARGV[2]: the JSON array of the ops' string lists, in one ``cjson.decode``
    per call. Each list is encoded as :func:`_json_strings` encodes it alone (one orjson
    call for the whole array when orjson takes every list)."""
    try:
        return orjson.dumps(lists)
    except (orjson.JSONEncodeError, TypeError):
        parts = [_json_strings(x) for x in lists]
        return "[" + ",".join(p.decode() if isinstance(p, bytes) else p for p in parts) + "]"


EncodedOp = tuple[list[str], list[str], list[str]]
"""One apply.lua op: its 6 ARGV strings (id, action, token, seq, due_ms, create flag), its
payload fields ``[f1, v1, ...]`` and its review-stream entry ``[f1, v1, ...]`` (empty: none)."""

_OUTCOMES: dict[str, ApplyOutcome] = {
    "a": ApplyOutcome.APPLIED,
    "s": ApplyOutcome.STALE_SEQ,
    "o": ApplyOutcome.NOT_OWNER,
    "m": ApplyOutcome.MISSING,
}
"""apply.lua's outcome codes (its reply holds one character per op)."""


EncodedPayload = tuple[int, str, list[str], str | None]
"""One escalation ready for :meth:`RedisScheduler.enqueue_encoded`: (shard, payload key,
its enqueue.lua ARGV group, its priority weight or None)."""


@dataclass
class _ShardClaim:
    """What one claim.lua call (or the idle check) found on one shard."""

    now_ms: int
    items: list[ClaimedItem] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    contended: int = 0
    next_due_ms: int | None = None


class RedisScheduler:
    """Scheduler port on Redis: pending ZSET + payload HASH + lock per escalation, N shards.

    Args:
        client: a ``redis.Redis`` created with ``decode_responses=True``.
        namespace: key namespace (hash tag ``{<namespace>:<shard>}``, see ``Keys``).
        shards: number of shards (>= 1); a dispute lives in ``shard_of(dispute_id, shards)``.
        priority: materiality weight of an escalation, ``(ladder key, materiality text) ->
            weight >= 0``, written at enqueue (bootstrap passes
            ``service_layer.priority.weight_fn(ladders)``); None = plain due order.
        aging_ms: waiting time worth one weight, milliseconds (claim.lua's aging; 1..86 400 000).

    Raises:
        InvalidInput: ``shards`` < 1, an empty namespace, or ``aging_ms`` out of range.
    """

    def __init__(
        self, client: redis.Redis, namespace: str = "esc", shards: int = 1, *,
        priority: Callable[[str, str], int] | None = None, aging_ms: int = DEFAULT_AGING_MS,
    ) -> None:
        if not namespace:
            raise InvalidInput("namespace must not be empty")
        check_range("shards", shards, 1, 1_000_000)
        check_range("aging_ms", aging_ms, 1, 86_400_000)  # claim.lua refuses more
        self._client = client
        self.namespace = namespace
        self.shards = shards
        self.priority = priority
        self.aging_ms = aging_ms
        self._scripts: dict[str, Script] = {
            name: client.register_script(script_source(name)) for name in SCRIPT_NAMES
        }
        # Idle-cost state (docs/performance.md, "Idle worker"): shards whose ``ready`` ZSET may
        # hold members (True until a claim script reports it empty, again after a wake), and the
        # last Redis TIME seen with the host monotonic instant it was seen at (an estimate of
        # Redis time).
        self._ready_maybe: dict[int, bool] = {}
        self._clock: tuple[int, float] | None = None

    # ------------------------------------------------------------------ helpers
    def keys_for(self, dispute_id: UUID | str) -> Keys:
        """The ``Keys`` of the shard holding ``dispute_id``."""
        return Keys(self.namespace, shard_of(str(dispute_id), self.shards))

    def shard_keys(self) -> list[Keys]:
        """``Keys`` of every shard, shard 0 first."""
        return [Keys(self.namespace, s) for s in range(self.shards)]

    def _run(self, name: str, keys: Sequence[str], args: Sequence[str | bytes | int]) -> Any:
        return run_script(self._scripts[name], keys, args)

    def _by_shard(self, ids: Sequence[UUID | str]) -> dict[int, list[int]]:
        """Indexes of ``ids`` grouped by shard (one shard: no id is hashed or formatted)."""
        if self.shards <= 1:
            return {0: list(range(len(ids)))} if ids else {}
        groups: dict[int, list[int]] = defaultdict(list)
        for i, dispute_id in enumerate(ids):
            groups[shard_of(str(dispute_id), self.shards)].append(i)
        return groups

    # ------------------------------------------------------------------ clock
    def time(self) -> datetime:
        """Redis ``TIME`` as an aware UTC datetime (millisecond precision): the one clock."""
        return from_ms(self._now_ms())

    def _now_ms(self) -> int:
        seconds, micros = self._client.time()
        return self._synced(int(seconds) * 1000 + int(micros) // 1000)

    def _synced(self, redis_ms: int) -> int:
        """Remember ``redis_ms`` (a Redis TIME just read) for :meth:`_estimated_now_ms`."""
        self._clock = (redis_ms, time.monotonic())
        return redis_ms

    def estimated_now_ms(self) -> int:
        """Redis time, epoch milliseconds, estimated as in :meth:`_estimated_now_ms` (at most
        one ``TIME`` per ``CLOCK_RESYNC_S``, shared with the idle claim). For clocks that
        only pick an occurrence or a wake-up (maintenance), never for "is it due"."""
        return self._estimated_now_ms()

    def _estimated_now_ms(self) -> int:
        """Redis time estimated from the last TIME seen plus the host *monotonic* time since
        (no wall-clock comparison); re-reads TIME when the last sync is older than
        ``CLOCK_RESYNC_S`` (or none exists). Used only to decide whether a claim script call
        is worth making: the script itself decides what is due, on Redis TIME."""
        clock = self._clock
        mono = time.monotonic()
        if clock is None or mono - clock[1] > CLOCK_RESYNC_S:
            return self._now_ms()
        return clock[0] + int((mono - clock[1]) * 1000)

    # ------------------------------------------------------------------ enqueue
    def enqueue(self, esc: Escalation) -> bool:
        """Write payload + score atomically unless a payload exists (enqueue.lua).

        Returns:
            True if scheduled now; False if the dispute was already scheduled (nothing changed).

        Raises:
            ConflictError: ``esc.status`` is not PENDING (terminal escalations never ZADD).
            InvalidInput: negative ``seq``.
        """
        return self.enqueue_many([esc])[0]

    def enqueue_many(self, escs: Sequence[Escalation]) -> list[bool]:
        """``enqueue`` for many escalations: one enqueue.lua call per shard per 500 items.

        Returns:
            one bool per input, in input order (a repeated dispute id: the later one is False).

        Raises:
            ConflictError / InvalidInput: as ``enqueue``; raised before anything is written.
        """
        for esc in escs:
            if esc.status is not Status.PENDING:
                raise ConflictError(f"cannot enqueue {esc.dispute_id}: status {esc.status}")
            if esc.seq < 0:
                raise InvalidInput(f"seq of {esc.dispute_id} must be >= 0")
        results: list[bool] = [False] * len(escs)
        for shard, idxs in self._by_shard([e.dispute_id for e in escs]).items():
            keys = Keys(self.namespace, shard)
            for start in range(0, len(idxs), MAX_BATCH):
                chunk = idxs[start : start + MAX_BATCH]
                kargs: list[str] = [keys.pending, keys.wake, keys.stats, keys.warnings]
                argv: list[str | int] = ["", ""]  # no warnings (enqueue.lua header)
                for i in chunk:
                    esc = escs[i]
                    fields = escalation_to_payload(esc)
                    kargs.append(keys.payload(esc.dispute_id))
                    argv += [str(esc.dispute_id), fields["due_ms"], len(fields)]
                    for item in fields.items():  # the values are str already
                        argv += item
                self._write_weights(keys, [escs[i] for i in chunk])
                raw = self._run("enqueue", kargs, argv)
                for i, flag in zip(chunk, raw, strict=True):
                    results[i] = int(flag) == 1
        return results

    def payload_template(self, proto: Escalation) -> PayloadTemplate:
        """A :class:`PayloadTemplate` of ``proto`` (pending) for :meth:`enqueue_encoded`.

        Raises:
            ConflictError / InvalidInput: as :meth:`enqueue_many` for ``proto``.
        """
        if proto.status is not Status.PENDING:
            raise ConflictError(f"cannot enqueue {proto.dispute_id}: status {proto.status}")
        if proto.seq < 0:
            raise InvalidInput(f"seq of {proto.dispute_id} must be >= 0")
        weight = None
        if self.priority is not None:
            w = self.priority(proto.ladder_key, str(proto.materiality))
            weight = str(w) if w > 0 else None
        return PayloadTemplate(proto, self.namespace, self.shards, weight)

    def enqueue_encoded(self, items: Sequence[EncodedPayload],
                        warnings: Sequence[WarningPoints | None] | None = None) -> list[bool]:
        """:meth:`enqueue_many` of rows rendered by :meth:`PayloadTemplate.render`: the same
        script calls with the same keys and arguments (one per shard per 500 items, the
        priority weights first), without building an ``Escalation`` per row.

        ``warnings`` (optional, one entry per item): the item's pre-breach warnings as
        ``(member suffix after "<id>", due epoch ms)`` pairs (``":<seq>:<fraction>"``, at most
        16), or None. The enqueue script adds them, for the items it newly schedules only, to
        the warnings ZSET of this scheduler's namespace and shard, in the same call: what
        ``RedisWarnings(client, namespace, shards).schedule`` would add, wake marker included.
        Items of one request shape pass the same tuple: it is sent once per call.

        Returns:
            one bool per input, in input order (False: a payload already existed).

        Raises:
            InvalidInput: ``warnings`` not one entry per item, or an entry with more than 16
                warnings (raised before anything is written).
        """
        if warnings is not None and len(warnings) != len(items):
            raise InvalidInput(f"warnings: {len(warnings)} entries for {len(items)} items")
        if warnings is not None and any(w and len(w) > MAX_OP_WARNINGS for w in warnings):
            raise InvalidInput(f"at most {MAX_OP_WARNINGS} warnings per item")
        results: list[bool] = [False] * len(items)
        by_shard: dict[int, list[int]] = {}
        for i, item in enumerate(items):
            by_shard.setdefault(item[0], []).append(i)
        for shard, idxs in by_shard.items():
            keys = Keys(self.namespace, shard)
            for start in range(0, len(idxs), MAX_BATCH):
                chunk = idxs[start : start + MAX_BATCH]
                kargs: list[str] = [keys.pending, keys.wake, keys.stats, keys.warnings]
                argv: list[str | bytes | int] = ["", ""]
                if warnings is not None:
                    argv[0], argv[1] = _warnings_table([warnings[i] for i in chunk])
                heavy: dict[str | bytes, str | bytes] = {}
                for i in chunk:
                    _, key, args, weight = items[i]
                    kargs.append(key)
                    argv += args
                    if weight is not None:
                        heavy[args[0]] = weight
                if heavy:
                    self._client.hset(keys.prio, mapping=heavy)  # type: ignore[arg-type]
                raw = self._run("enqueue", kargs, argv)
                for i, flag in zip(chunk, raw, strict=True):
                    results[i] = int(flag) == 1
        return results

    def _write_weights(self, keys: Keys, escs: Sequence[Escalation]) -> None:
        """HSET prio member -> materiality weight (ready-set priority, ADR 0006) before
        the members enter pending; weight 0 is not stored (absent = 0). No-op without
        ``self.priority``."""
        if self.priority is None:
            return
        weights = {str(e.dispute_id): self.priority(e.ladder_key, str(e.materiality))
                   for e in escs}
        heavy: dict[str | bytes, str | bytes] = {m: str(w) for m, w in weights.items() if w > 0}
        if heavy:
            self._client.hset(keys.prio, mapping=heavy)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ claim (step 1)
    def claim(self, batch_size: int, lease_ms: int, worker_id: str) -> ClaimResult:
        """Claim up to ``batch_size`` due members (claim.lua; docs/architecture.md, firing step 1).

        Shards are visited round-robin from a random one. Per shard: read a window of the
        earliest members (by rank, no client clock), run claim.lua on it; if the window was all
        contended / taken by other workers, try the next window (at most ``MAX_CLAIM_ROUNDS``).

        Args:
            batch_size: 1..500 members.
            lease_ms: lock TTL and visibility timeout, milliseconds (1..86 400 000).
            worker_id: non-empty, at most 200 characters; stored as ``"<token>:<worker_id>"``.

        Returns:
            ClaimResult (now = the latest Redis TIME seen over the shards visited: a script's
            clock, or when no script ran the estimate described in ``_claim_shard``;
            next_due_ms = minimum over the shards visited).

        Raises:
            InvalidInput: an argument out of range.
        """
        check_range("batch_size", batch_size, 1, MAX_BATCH)
        check_range("lease_ms", lease_ms, 1, MAX_LEASE_MS)
        if not worker_id or len(worker_id) > 200:
            raise InvalidInput("worker_id must be 1..200 characters")
        start = random.randrange(self.shards)
        order = [(start + i) % self.shards for i in range(self.shards)]
        total: _ShardClaim | None = None
        for shard in order:
            need = batch_size - (len(total.items) if total else 0)
            if need <= 0:
                break
            part = self._claim_shard(Keys(self.namespace, shard), need, lease_ms, worker_id)
            if total is None:
                total = part
                continue
            total.now_ms = max(total.now_ms, part.now_ms)  # the latest clock seen
            total.items += part.items
            total.stuck += part.stuck
            total.contended += part.contended
            if part.next_due_ms is not None and (
                total.next_due_ms is None or part.next_due_ms < total.next_due_ms
            ):
                total.next_due_ms = part.next_due_ms
        assert total is not None  # noqa: S101 -- shards >= 1 and batch_size >= 1
        return ClaimResult(
            now=from_ms(total.now_ms),
            items=total.items,
            stuck=total.stuck,
            contended=total.contended,
            next_due_ms=total.next_due_ms,
        )

    def _claim_shard(self, keys: Keys, need: int, lease_ms: int, worker_id: str) -> _ShardClaim:
        """claim.lua on one shard (ADR 0006 ready set: pending -> ready by effective priority, then
        claim the head of ready). Candidates are read from ``ready`` before each call; the
        script only claims those still in the head, so the order is exact.

        Idle cost (docs/performance.md, "Idle worker"): when nothing is claimable this makes
        exactly one Redis command, ``ZRANGE pending 0 0 WITHSCORES``, and no script call:

        * the ``ready`` read is skipped while this scheduler's last claim script on the shard
          reported ``ready`` empty. Only claim.lua puts members into ``ready``, and a claim
          that leaves members there returned a full batch (the worker loops again at once)
          and pushes the wake marker (:meth:`_nudge`) so that other workers, whose flag may
          say "empty", wake up and look at ``ready`` too (a wake sets the flag again).
        * "is the first pending member due" is answered with an *estimate* of Redis time
          (last TIME seen + host monotonic time since, re-read every ``CLOCK_RESYNC_S``).
          The estimate (which lags Redis by up to a millisecond or two: truncation and the
          reply's trip) only decides whether to call the script: a first member due within
          ``CLOCK_SLACK_MS`` of it gets the call, and the script re-checks every member
          against Redis TIME, so nothing is ever claimed early, and a member made due
          "now" by another client a moment ago is not missed.
        """
        shard = keys.shard
        if not self._ready_maybe.get(shard, True):
            cheap = self._idle_check(keys)
            if cheap is not None:
                return cheap
        result: _ShardClaim | None = None
        offset = 0  # locked members seen at the top of ready
        for _ in range(MAX_CLAIM_ROUNDS):
            window = cast(list[str], self._client.zrange(keys.ready, offset, offset + need - 1))
            if not window and result is None:
                cheap = self._idle_check(keys)
                if cheap is not None:
                    self._ready_maybe[shard] = False
                    return cheap
            kargs = [keys.pending, keys.fence, keys.stats, keys.ready, keys.prio]
            for member in window:
                kargs += [keys.payload(member), keys.lock(member)]
            raw = self._run("claim", kargs, [lease_ms, worker_id, need, self.aging_ms,
                                             PROMOTE_MAX, offset, *window])
            now_ms, next_due, contended, more, stuck, items, _promoted = raw
            if result is None:
                result = _ShardClaim(now_ms=int(now_ms))
            result.now_ms = self._synced(int(now_ms))  # the latest script clock
            result.next_due_ms = None if int(float(next_due)) < 0 else int(float(next_due))
            result.contended += int(contended)
            result.stuck += [str(s) for s in stuck]
            self._parse_items(items, result)
            need -= len(items) // 4
            offset += int(contended)
            if need <= 0 or (not int(more) and not int(contended)):
                break
        assert result is not None  # noqa: S101 -- MAX_CLAIM_ROUNDS >= 1
        # claim.lua reports next_due = now while ready still holds members.
        left = result.next_due_ms is not None and result.next_due_ms <= result.now_ms
        if left:
            self._nudge(keys)
        self._ready_maybe[shard] = left
        return result

    def _idle_check(self, keys: Keys) -> _ShardClaim | None:
        """One ``ZRANGE pending 0 0 WITHSCORES``: a ``_ShardClaim`` saying "nothing due"
        (now = estimated Redis time), or None when the first member looks due (call the
        script)."""
        first = cast(list[tuple[str, float]],
                     self._client.zrange(keys.pending, 0, 0, withscores=True))
        now_ms = self._estimated_now_ms()
        if first and int(first[0][1]) <= now_ms + CLOCK_SLACK_MS:
            return None  # due, or nearly: the script decides on Redis TIME
        return _ShardClaim(now_ms=now_ms, next_due_ms=int(first[0][1]) if first else None)

    def _nudge(self, keys: Keys) -> None:
        """Push the shard's wake marker (LPUSH + LTRIM to one element, like enqueue.lua):
        members were left in ``ready``; other workers must look at it."""
        pipe = self._client.pipeline(transaction=False)
        pipe.lpush(keys.wake, "1")
        pipe.ltrim(keys.wake, 0, 0)
        pipe.execute()

    @staticmethod
    def _parse_items(items: Sequence[Any], result: _ShardClaim) -> None:
        """claim.lua's flat items (id, token, due_ms, payload per claimed member) into
        ``result.items``; a payload that does not decode is logged and left out."""
        for at in range(0, len(items) - 3, 4):
            member, token, score, flat = items[at], items[at + 1], items[at + 2], items[at + 3]
            try:
                esc = claimed_payload_to_escalation(member, flat)
            except InvalidInput as exc:
                # Left locked and re-scored: it comes due again after the lease; reconcile
                # (restore from PostgreSQL) is the repair. One bad payload must not cost
                # the batch.
                log.error("escalation.payload_corrupt", dispute_id=member, error=str(exc))
                continue
            result.items.append(ClaimedItem(esc, int(token), int(float(score))))

    # ------------------------------------------------------------------ apply (step 4: the ack)
    def apply(self, ops: Sequence[ApplyOp]) -> list[ApplyOutcome]:
        """Apply recorded decisions (apply.lua): one script call per shard per 500 ops.

        Per op, in order: MISSING (no payload: cancelled, never brought back); STALE_SEQ
        (payload seq >= op seq: nothing changes, a re-sent apply lands here; a lock owned by
        ``op.token`` is released and an equal-seq RESCHEDULE by that owner puts the member back
        at its payload due time); NOT_OWNER (``op.token`` given and the lock holds another
        token, or none: a stale worker is refused); else APPLIED: RESCHEDULE replaces the
        payload and ZADDs at due; REMOVE = ZREM + DEL (never ZADD); PARK = ZREM, payload kept
        with the new seq. ``op.notify`` is XADDed to the review stream (MAXLEN ~100 000) and
        the lock released if ``op.token`` owns it. Ops with ``token=None`` are owner-less
        repairs, guarded by seq only. ``op.warnings`` of an APPLIED op are added to the
        shard's warnings ZSET in the same script call (ZADD NX, wake marker when one becomes
        the earliest: what ``RedisWarnings.schedule`` does), at most 16 per op.

        Returns:
            one outcome per op, in input order.

        Raises:
            InvalidInput: negative seq/token (raised before anything is written).
        """
        return self._apply(ops, create=False)

    # ------------------------------------------------------------------ restore (recovery)
    def restore(self, escalations: Sequence[Escalation],
                notifications: Mapping[UUID, dict[str, str]] | None = None,
                ) -> list[ApplyOutcome]:
        """Owner-less repair from PostgreSQL state (reconcile / stuck repair).

        Status PENDING -> reschedule, PAUSED -> park, TERMINAL / CANCELLED -> remove. Creates a
        missing payload (+ score if pending); updates when the payload's seq < ``esc.seq``;
        re-adds a pending member whose payload is at the same seq but whose score vanished
        (ZSET drift). Never touches a member whose lock is held (NOT_OWNER); never creates
        anything for a terminal / cancelled escalation (MISSING).

        ``notifications`` (by dispute id): the review-stream entry of a decision recorded but
        maybe never applied; sent with the repair, at most once (apply.lua's notify seq guard).

        Returns:
            one outcome per escalation, in input order.
        """
        notes = notifications or {}
        actions = {
            Status.PENDING: ApplyAction.RESCHEDULE,
            Status.PAUSED: ApplyAction.PARK,
            Status.TERMINAL: ApplyAction.REMOVE,
            Status.CANCELLED: ApplyAction.REMOVE,
            Status.RESOLVED: ApplyAction.REMOVE,
        }
        ops = [ApplyOp(escalation=e, action=actions[e.status], notify=notes.get(e.dispute_id))
               for e in escalations]
        return self._apply(ops, create=True)

    def _apply(self, ops: Sequence[ApplyOp], *, create: bool) -> list[ApplyOutcome]:
        encoded = [self._encode_op(op, create) for op in ops]
        results: list[ApplyOutcome] = [ApplyOutcome.MISSING] * len(ops)
        for shard, idxs in self._by_shard([op.escalation.dispute_id for op in ops]).items():
            keys = Keys(self.namespace, shard)
            for start in range(0, len(idxs), MAX_BATCH):
                chunk = idxs[start : start + MAX_BATCH]
                kargs = [keys.pending, keys.review, keys.stats]
                argv: list[str | bytes | int] = [REVIEW_MAXLEN, ""]
                lists: list[list[str]] = []
                for i in chunk:
                    scalars, fields, notify = encoded[i]
                    member = scalars[0]  # the dispute id
                    kargs += [keys.payload(member), keys.lock(member)]
                    argv += scalars
                    lists += (fields, notify)
                argv[1] = _json_lists(lists)  # every op's pair lists, one JSON array
                kargs += [keys.ready, keys.prio]  # ready set and weights (ADR 0006)
                # op position, "<seq>:<fraction>", ms: the script prefixes the op's id
                warns: list[int | str] = []
                for pos, i in enumerate(chunk, 1):
                    for w in ops[i].warnings:
                        warns += (pos, f"{w.seq}:{w.fraction}", w.due_ms)
                if warns:  # scheduled by the script for the applied ops (apply.lua header)
                    kargs += [keys.warnings, keys.wake]
                    argv.append(orjson.dumps(warns))
                codes = self._run("apply", kargs, argv)  # one character per op
                if isinstance(codes, bytes):
                    codes = codes.decode()
                for i, code in zip(chunk, codes, strict=True):
                    results[i] = _OUTCOMES[code]
        return results

    @staticmethod
    def _encode_op(op: ApplyOp, create: bool) -> EncodedOp:
        """One apply.lua op (see the script header): its 6 ARGV strings id, action, token,
        seq, due_ms, create flag, then its payload fields and its review-stream entry as flat
        ``[f1, v1, ...]`` lists. ``_apply`` sends the lists of all ops of a call as one JSON
        array (one ``cjson.decode`` per call in Redis): the scalars travel as plain
        arguments, the pairs as JSON, since every extra argument costs the client more
        (redis-py packs argument by argument) than decoding costs Redis.

        Raises:
            InvalidInput: negative seq or token, more than ``MAX_OP_WARNINGS`` warnings or a
                warning of another dispute.
        """
        esc = op.escalation
        if esc.seq < 0 or (op.token is not None and op.token < 0):
            raise InvalidInput(f"apply for {esc.dispute_id}: seq and token must be >= 0")
        if op.warnings and (len(op.warnings) > MAX_OP_WARNINGS or any(
                w.dispute_id != esc.dispute_id for w in op.warnings)):
            raise InvalidInput(f"apply for {esc.dispute_id}: at most {MAX_OP_WARNINGS} "
                               "warnings, all of this dispute")
        flat = payload_pairs(esc)  # seq and due_ms are its 6th and 8th strings
        notify: list[str] = []
        if op.notify:
            for kv in op.notify.items():
                notify += kv
        return ([str(esc.dispute_id), ApplyAction(op.action).value,
                 "" if op.token is None else str(op.token), flat[5], flat[7],
                 "1" if create else "0"], flat, notify)

    # ------------------------------------------------------------------ cancel
    def cancel(self, dispute_id: UUID | str, notify: dict[str, str] | None = None) -> bool:
        """Remove member, payload and lock atomically (cancel.lua).

        Args:
            notify: review-stream entry (with its ``seq``) of a decision recorded before the
                cancel and maybe never applied; XADDed in the same script only if the
                payload's seq is still below it (see cancel.lua).

        Returns:
            True if something was scheduled. A worker still holding the claim then gets
            MISSING from ``apply``: a cancelled dispute never comes back.
        """
        keys = self.keys_for(dispute_id)
        kargs = [keys.pending, keys.payload(dispute_id), keys.lock(dispute_id), keys.stats,
                 keys.ready, keys.prio]
        args = [str(dispute_id)]
        if notify:
            kargs.append(keys.review)
            flat = [x for kv in notify.items() for x in kv]
            args += [notify["seq"], json.dumps(flat), str(REVIEW_MAXLEN)]
        return int(self._run("cancel", kargs, args)) == 1

    # ------------------------------------------------------------------ wake-ups
    def wait_for_wake(self, timeout_s: float) -> bool:
        """Block until an enqueue pushed a wake marker, or ``timeout_s`` passed.

        Precision: Redis expires blocking timeouts from its event loop, which runs every
        ``1000 / hz`` ms on an idle server (100 ms at the default ``hz 10``), so a BLPOP
        timeout can end up to ~100 ms late. The BLPOP therefore covers only
        ``timeout_s - WAKE_MARGIN_S`` and the rest is slept locally (``time.sleep``, host
        monotonic clock, relative to now: no clock comparison), so a wait for the next due
        time ends within a millisecond or two of it. A marker pushed during the final local
        sleep (at most ``WAKE_MARGIN_S``) is seen on the next wait. Timeouts are sent in
        whole milliseconds and never as ``0`` (which would mean "block forever").

        Args:
            timeout_s: longest wait in seconds (0 or less = just check, no blocking).

        Returns:
            True if a marker was taken, False on timeout. The socket read is bounded by
            the BLPOP timeout + 1 s so a lost server cannot hang the worker.
        """
        wake_keys = [k.wake for k in self.shard_keys()]
        if timeout_s <= 0:
            woken = any(self._client.lpop(key) is not None for key in wake_keys)
            if woken:
                self._ready_maybe.clear()  # a wake: look at every shard's ready set again
            return woken
        deadline = time.monotonic() + timeout_s
        block_s = timeout_s - WAKE_MARGIN_S
        if block_s >= 0.001 and self._blpop(wake_keys, block_s):
            self._ready_maybe.clear()
            return True
        rest = deadline - time.monotonic()
        if rest > 0:
            time.sleep(rest)
        return False

    def _blpop(self, wake_keys: list[str], block_s: float) -> bool:
        # --- Redis Cluster: one BLPOP per shard (one slot each), awaited together
        if is_cluster(self._client):
            return cluster_blpop_any(self._client, wake_keys, block_s, _WAKE_GRACE_S)
        # --- one server or a Sentinel primary: one BLPOP over every shard's wake key
        pool = self._client.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_command("BLPOP", *wake_keys, f"{max(block_s, 0.001):.3f}")  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            reply = conn.read_response(timeout=block_s + _WAKE_GRACE_S)
        except (redis.TimeoutError, redis.ConnectionError):
            conn.disconnect()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            return False
        except BaseException:
            # interrupted (SIGTERM's shutdown exception) with the BLPOP still pending: its
            # late nil reply must not be read back as the next command's reply on this
            # connection (the pool hands the last released connection out first; a
            # Sentinel-managed connection is not dropped on errors by redis-py)
            conn.disconnect()  # type: ignore[no-untyped-call]  # as above
            raise
        finally:
            pool.release(conn)
        return reply is not None

    # ------------------------------------------------------------------ inspection
    def _earliest_due_incl_ready(self) -> int | None:
        """Earliest *due time* over pending and ready (a ready member's due = score + weight *
        aging_ms), looking at the 1000 best-scored ready members of each shard."""
        best: int | None = None
        for keys in self.shard_keys():
            rows = cast(list[tuple[str, float]],
                        self._client.zrange(keys.ready, 0, 999, withscores=True))
            first = cast(list[tuple[str, float]],
                         self._client.zrange(keys.pending, 0, 0, withscores=True))
            dues = [int(first[0][1])] if first else []
            if rows:
                weights = cast(list[str | None],
                               self._client.hmget(keys.prio, [m for m, _ in rows]))
                dues += [int(sc) + int(w or 0) * self.aging_ms
                         for (_, sc), w in zip(rows, weights, strict=True)]
            if dues and (best is None or min(dues) < best):
                best = min(dues)
        return best

    def payload(self, dispute_id: UUID | str) -> dict[str, str] | None:
        """The payload HASH of ``dispute_id`` (str -> str), or None if there is none."""
        fields = cast(
            dict[str, str], self._client.hgetall(self.keys_for(dispute_id).payload(dispute_id))
        )
        return fields or None

    def notified(self, wanted: Mapping[str, tuple[str, int]], count: int = 1000) -> set[str]:
        """The idempotency keys among ``wanted`` (dispute id -> (``<dispute>:<seq>``, decided
        epoch ms)) that already have an entry in their shard's review stream
        (:func:`review_notified`; read by the worker's STUCK_MEMBER repair only)."""
        return review_notified(self._client, self.namespace, self.shards, wanted, count)

    def pending_members(self, shard: int) -> Iterator[tuple[str, int]]:
        """ZSCAN of one shard's pending and ready ZSETs: ``(dispute id, due epoch ms)`` (for
        reconcile). A ready member's due is its ready score + weight * aging_ms."""
        check_range("shard", shard, 0, self.shards - 1)
        keys = Keys(self.namespace, shard)
        for member, score in self._client.zscan_iter(keys.pending):
            yield str(member), int(score)
        for member, score in self._client.zscan_iter(keys.ready):
            weight = int(cast(str, self._client.hget(keys.prio, member) or "0"))
            yield str(member), int(score) + weight * self.aging_ms

    def stats(self) -> dict[str, int | None]:
        """Numbers for ``escalation status`` summed over shards.

        Keys: pending (ZCARD pending + ZCARD ready), due_now (pending score <= Redis TIME, plus
        every ready member), oldest_overdue_ms (now - earliest
        due score, None when nothing is due), locked (lock keys, counted with SCAN), dead
        (ZCARD dead), plus every counter of the stats hashes (claimed, stuck, lock_contended,
        applied, stale_apply, not_owner, restore_held, missing, enqueued, cancelled).
        """
        now = self._now_ms()
        out: dict[str, int | None] = {"pending": 0, "due_now": 0, "locked": 0, "dead": 0}
        counters: dict[str, int] = defaultdict(int)
        for keys in self.shard_keys():
            ready = int(self._client.zcard(keys.ready))  # ready set (ADR 0006): due, waiting
            in_pending = int(self._client.zcard(keys.pending))
            out["pending"] = int(out["pending"] or 0) + in_pending + ready
            out["due_now"] = int(out["due_now"] or 0) + ready + int(
                self._client.zcount(keys.pending, "-inf", now)
            )
            out["dead"] = int(out["dead"] or 0) + int(self._client.zcard(keys.dead))
            locks = self._client.scan_iter(match=f"{keys.lock_prefix}*", count=1000)
            out["locked"] = int(out["locked"] or 0) + sum(1 for _ in locks)
            for name, value in cast(dict[str, str], self._client.hgetall(keys.stats)).items():
                counters[name] += int(value)
        earliest = self._earliest_due_incl_ready()
        out["oldest_overdue_ms"] = (
            now - earliest if earliest is not None and earliest <= now else None
        )
        out.update(counters)
        return out


NOTIFIED_SLACK_MS = 300_000
"""How far before a decision :func:`review_notified` starts reading a review stream
(5 minutes, epoch ms): the clock of a promoted replica may be behind the old primary's."""


def review_notified(client: redis.Redis, namespace: str, shards: int,
                    wanted: Mapping[str, tuple[str, int]], count: int = 1000) -> set[str]:
    """Which of the wanted notifications already have an entry in their review stream.

    The one reader behind ``ReliabilityRedis.notified`` (reconcile) and
    ``RedisScheduler.notified`` (the worker's STUCK_MEMBER repair): both repairs of a missing
    payload send the latest decision's entry only when this finds none
    (docs/reliability.md "Failover and notifications").

    Args:
        client: ``redis.Redis`` with ``decode_responses=True``.
        namespace / shards: the scheduler's.
        wanted: dispute id -> (idempotency key ``<dispute>:<seq>``, decided epoch ms).
        count: XRANGE page size.

    Returns:
        the idempotency keys found. Each shard's stream is read (XRANGE, pages of ``count``)
        from its earliest wanted decision minus :data:`NOTIFIED_SLACK_MS`: an entry is XADDed
        after its decision (the apply follows the record; its id is the Redis TIME of that
        apply), so an entry older than that cannot be one of them; the slack covers a
        promoted replica whose clock is behind the old primary's.
    """
    by_shard: dict[int, tuple[set[str], int]] = {}
    for did, (key, decided_ms) in wanted.items():
        shard = shard_of(did, shards)
        keys, since = by_shard.get(shard, (set(), decided_ms))
        keys.add(key)
        by_shard[shard] = (keys, min(since, decided_ms))
    found: set[str] = set()
    for shard, (keys, since) in by_shard.items():
        stream = Keys(namespace, shard).review
        start = str(max(since - NOTIFIED_SLACK_MS, 0))
        while True:
            page = cast(list[tuple[str, dict[str, str] | None]],
                        client.xrange(stream, start, "+", count=count))
            for _entry_id, fields in page:
                got = (fields or {}).get("idempotency_key")
                if got is not None and got in keys:
                    found.add(got)
            if len(page) < count:
                break
            start = "(" + str(page[-1][0])
    return found


class PayloadTemplate:
    """The enqueue.lua arguments (``escalation_to_payload``) of every escalation that
    differs from a prototype only in its dispute id, external id, source hash and trace id
    (the CSV import renders each row from the template of its shape).

    The fields around the per-row ones are rendered once from the prototype; :meth:`render`
    yields the same ARGV group, key and shard ``enqueue_many`` would send for the escalation
    (checked against :func:`escalation_to_payload` when the template is made: ``ok``).
    """

    def __init__(self, proto: Escalation, namespace: str, shards: int,
                 weight: str | None) -> None:
        """``proto``: a pending escalation (its state as recorded: seq 1 for an import);
        ``weight``: its stored priority weight (None = not stored). Until :meth:`prepare`
        has run, rows are rendered through ``escalation_to_payload`` itself."""
        self._shards = shards
        self._prefix = [Keys(namespace, n).payload_prefix for n in range(max(shards, 1))]
        self._weight = weight
        self._proto = proto
        self._before: list[str] = []
        self._after: list[str] = []
        self._count = 0
        self._due = ""
        self.ok = False

    def prepare(self) -> None:
        """Render the template's fixed parts once and check them; sets ``ok``."""
        proto = self._proto
        fields = escalation_to_payload(proto)
        names = list(fields)
        h = names.index("h")
        self._before = [v for item in list(fields.items())[:h] for v in item]
        after = [k for k in names[h:] if k not in ("h", "r", "x")]
        self._after = [v for k in after for v in (k, fields[k])]
        self._count = len(names) - (1 if "x" in fields else 0)
        self._due = fields["due_ms"]
        did = str(proto.dispute_id)
        self.ok = True  # render() fills the template itself while it is checked
        self.ok = all(
            self.render(did, ext, proto.source_hash, proto.trace_id)
            == self._reference(did, ext, proto.source_hash, proto.trace_id)
            for ext in (proto.external_id, None, "x\t\\y\"z\u00e9"))

    def _reference(self, dispute_id: str, external_id: str | None, source_hash: str,
                   trace_id: str) -> EncodedPayload:
        """What ``enqueue_many`` sends for the prototype with these per-row values."""
        esc = replace(self._proto, dispute_id=UUID(dispute_id), external_id=external_id,
                      source_hash=source_hash, trace_id=trace_id)
        fields = escalation_to_payload(esc)
        args = [dispute_id, fields["due_ms"], str(len(fields))]
        for item in fields.items():
            args += item
        shard = shard_of(dispute_id, self._shards)
        return (shard, self._prefix[shard] + dispute_id, args, self._weight)

    def render(self, dispute_id: str, external_id: str | None, source_hash: str,
               trace_id: str) -> EncodedPayload:
        """(shard, payload key, ARGV group, weight) of the prototype with these values;
        ``dispute_id`` is the canonical UUID string."""
        if not self.ok:
            return self._reference(dispute_id, external_id, source_hash, trace_id)
        shard = shard_of(dispute_id, self._shards) if self._shards > 1 else 0
        args = [dispute_id, self._due]
        if external_id is None:
            args.append(str(self._count))
            args += self._before
            args += ("h", source_hash, "r", trace_id)
        else:
            args.append(str(self._count + 1))
            args += self._before
            args += ("h", source_hash, "r", trace_id, "x", external_id)
        args += self._after
        return (shard, self._prefix[shard] + dispute_id, args, self._weight)
