"""The one place a Redis client is made from a URL: one server, a Cluster, or a Sentinel set.

URL schemes (docs/operations.md):

* ``redis://[:password@]host:port/db``, ``rediss://...``, ``unix:///path?db=N``: one server
  (``redis.Redis.from_url``).
* ``redis+cluster://[:password@]host:port[,host:port...]/`` (``rediss+cluster://`` for TLS):
  a Redis Cluster through redis-py's ``RedisCluster``; the hosts are seed nodes (any subset
  of the cluster), the DB is always 0 (a cluster has no other). Every script call and every
  multi-key command of the scheduler addresses one shard, whose keys share the hash tag
  ``{<namespace>:<shard>}`` and so one cluster slot.
* ``redis+sentinel://[:password@]host:port[,host:port...]/<service>/<db>`` (``rediss+sentinel``
  for TLS to the data nodes): the current primary of ``<service>`` as told by the sentinels
  (redis-py ``Sentinel.master_for``); after a failover the next connection asks the
  sentinels again, so a worker reconnects to the promoted replica after one failed command.

Every client is made with the same options whatever the topology (``decode_responses=True``,
``encoding_errors="replace"``, socket and connect timeouts, ``health_check_interval``), and
callers may pass more options, which are passed through unchanged.

The connection's one check before a worker fires: :class:`NamespaceBinding` (at the end of
this module), which database a namespace belongs to and the namespace's resync mark, set
while Redis may be ahead of the ledger (ADR 0014).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import unquote, urlsplit

import hiredis  # redis[hiredis] is a dependency
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import HiredisRespSerializer
from redis.sentinel import Sentinel

from escalation.domain.errors import ConfigError

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
SERVER_SCHEMES = ("redis", "rediss", "unix")
URL_PREFIXES: tuple[str, ...] = tuple(
    f"{s}://" for s in (*SERVER_SCHEMES, *CLUSTER_SCHEMES, *SENTINEL_SCHEMES)
)

#: Options every client gets (a superset may be passed to :func:`make_redis`).
DEFAULT_OPTIONS: dict[str, Any] = {
    "decode_responses": True,
    "socket_timeout": 30,
    "socket_connect_timeout": 5,
    # a non-UTF-8 byte in one payload must not crash every worker that claims it: it
    # decodes as U+FFFD, fails validation and takes the poison -> dead-letter path
    "encoding_errors": "replace",
    "health_check_interval": 30,
}

#: Errors a worker treats as "Redis is away for a moment" (retry with backoff): a lost
#: connection or timeout, a cluster slot without a reachable primary during a failover,
#: a write sent to a primary just demoted to replica, a slot moving (TRYAGAIN).
OUTAGE_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.ClusterError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.MasterDownError,
)


def _new_packer() -> DirectPacker:
    """A :class:`DirectPacker` (its base class is unannotated in some redis-py versions)."""
    return cast(DirectPacker, cast(Any, DirectPacker)())


class DirectPacker(HiredisRespSerializer):
    """redis-py's hiredis command packer without its per-argument Python pass.

    redis-py (8.x) packs every command by first walking its arguments in a generator
    (converting ``bytearray``/``memoryview``) and then calling ``hiredis.pack_command``; for
    the firing path's script calls (an apply call of 500 escalations carries ~5,000
    arguments) that walk cost as much as the packing itself. This packer hands the
    arguments to ``hiredis.pack_command`` as they are, which takes ``str`` (UTF-8), ``bytes``,
    ``memoryview``, ``int`` and ``float``: the same bytes on the wire. A command name with a
    space (``"CLIENT SETNAME"``), or an argument hiredis refuses (``TypeError``: ``None``, a
    ``bool``, an object), goes through redis-py's own packer, which splits the name and raises
    redis-py's ``DataError`` as before. Used by :func:`make_redis` for one server and for a
    Sentinel primary (``RedisCluster`` does not pass a packer on to its nodes).
    """

    def pack(self, *args: Any) -> list[bytes]:
        """``[RESP bytes of the command]``. Raises ``redis.DataError`` for an argument
        neither hiredis nor redis-py can send."""
        first = args[0]
        spaced = " " in first if isinstance(first, str) else (
            isinstance(first, bytes) and b" " in first)
        if spaced:  # "CLIENT SETNAME": redis-py splits the name
            return cast(list[bytes], super().pack(*args))
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            return cast(list[bytes], super().pack(*args))


@dataclass(frozen=True, slots=True)
class Topology:
    """A parsed Redis URL: ``kind`` is ``server``, ``cluster`` or ``sentinel``."""

    kind: str
    hosts: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    password: str | None = None
    username: str | None = None
    tls: bool = False


def _hosts(netloc: str, url: str) -> tuple[tuple[str, int], ...]:
    hosts: list[tuple[str, int]] = []
    for part in netloc.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"Redis URL {_safe(url)}: expected host:port[,host:port...], "
                              f"got {part!r}")
        hosts.append((host.strip("[]"), int(port)))
    return tuple(hosts)


def ping_checked(client: Any, url: str) -> None:
    """``PING`` through ``client`` (built for ``url``), telling a refusal of the URL's own
    settings from an outage.

    Raises:
        ConfigError: the server answered but refused the login (wrong password or user) or a
            connection setting (a DB index the server does not have: 0-15 by default); not
            worth retrying, the URL must change.
        redis.ConnectionError / redis.TimeoutError: the server could not be reached (the
            caller retries those).
    """
    try:
        client.ping()
    except redis.exceptions.AuthenticationError as exc:
        raise ConfigError(f"Redis at {_safe(url)} refused the login: {exc} (check the user "
                          "and password in ESCALATION_REDIS_URL)") from None
    except redis.exceptions.ResponseError as exc:
        raise ConfigError(f"Redis at {_safe(url)} refused the connection: {exc} (check "
                          "ESCALATION_REDIS_URL, e.g. its DB index: a server has 16 by "
                          "default, 0-15)") from None


def _safe(url: str) -> str:
    """The URL without its password (for error messages)."""
    scheme, _, rest = url.partition("://")
    _creds, at, tail = rest.rpartition("@")
    return f"{scheme}://{'***@' if at else ''}{tail if at else rest}"


def parse_topology(url: str) -> Topology:
    """Parse a Redis URL into a :class:`Topology`.

    Raises:
        ConfigError: an unknown scheme, no hosts, a bad port, a sentinel URL without a
            service name or with a non-integer DB, or a cluster URL naming a DB other than 0.
    """
    scheme = url.partition("://")[0].lower()
    if scheme in SERVER_SCHEMES:
        return Topology("server", tls=scheme == "rediss")
    if scheme not in CLUSTER_SCHEMES + SENTINEL_SCHEMES:
        raise ConfigError(f"Redis URL {_safe(url)}: unknown scheme {scheme!r} (expected one of "
                          + ", ".join(p.rstrip(":/") for p in URL_PREFIXES) + ")")
    rest = url.partition("://")[2]
    auth, at, hostpart = rest.partition("/")[0].rpartition("@")
    netloc = hostpart if at else rest.partition("/")[0]
    user, password = None, None
    if at:
        u, colon, p = auth.partition(":")
        user, password = (unquote(u) or None), (unquote(p) if colon else None)
    if not netloc:
        raise ConfigError(f"Redis URL {_safe(url)}: no host:port given")
    hosts = _hosts(netloc, url)
    path = [p for p in urlsplit("x://h/" + rest.partition("/")[2]).path.split("/") if p]
    tls = scheme.startswith("rediss")
    if scheme in CLUSTER_SCHEMES:
        if path and path != ["0"]:
            raise ConfigError(f"Redis URL {_safe(url)}: a cluster has only DB 0, "
                              f"got /{'/'.join(path)}")
        return Topology("cluster", hosts, db=0, password=password, username=user, tls=tls)
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ConfigError(f"Redis URL {_safe(url)}: expected redis+sentinel://host:port"
                          "[,host:port...]/<service>/<db>")
    db = int(path[1]) if len(path) == 2 else 0
    return Topology("sentinel", hosts, service=path[0], db=db, password=password,
                    username=user, tls=tls)


def make_redis(url: str, **options: Any) -> redis.Redis:
    """A client for ``url`` (see the module docstring for the schemes).

    ``options`` are merged over :data:`DEFAULT_OPTIONS` and passed to the client; for a
    Sentinel set they apply to the connections to the data nodes (the sentinels get the
    socket timeouts only).

    Returns:
        a ``redis.Redis`` (one server, or the Sentinel primary) or a ``RedisCluster``, typed
        as ``redis.Redis``: both expose the same command API, and code that needs a raw
        connection (the wake-up wait) checks :func:`is_cluster`.

    Raises:
        ConfigError: a malformed URL (see :func:`parse_topology`).
    """
    opts = {**DEFAULT_OPTIONS, **options}
    topo = parse_topology(url)
    if topo.kind != "cluster":
        opts.setdefault("command_packer", _new_packer())
    if topo.kind == "server":
        return redis.Redis.from_url(url, **opts)
    auth: dict[str, Any] = {"password": topo.password, "username": topo.username}
    if topo.kind == "cluster":
        nodes = [ClusterNode(host, port)  # type: ignore[no-untyped-call]  # unannotated
                 for host, port in topo.hosts]
        return cast(redis.Redis, RedisCluster(startup_nodes=nodes, ssl=topo.tls, **auth, **opts))
    sentinel_kwargs = {k: opts[k] for k in ("socket_timeout", "socket_connect_timeout")
                       if k in opts}
    # redis-py annotates Sentinel only from 8.x: called through Any, the same on every
    # version the lower bound admits
    sentinel: Any = cast(Any, Sentinel)(
        list(topo.hosts), sentinel_kwargs=sentinel_kwargs, ssl=topo.tls, db=topo.db,
        **auth, **opts)
    primary = sentinel.master_for(topo.service, redis_class=redis.Redis)
    return cast(redis.Redis, primary)


def is_cluster(client: object) -> bool:
    """True for a ``RedisCluster`` client (commands are routed per slot)."""
    return isinstance(client, RedisCluster)


# --------------------------------------------------------------------------- namespace binding
# Which database a Redis namespace belongs to, and the namespace's resync mark (ADR 0014).
#
# Two keys beside the shard-count record (``redis_layout``), under the same hash tag
# ``{<namespace>:layout}`` (one Redis Cluster slot, whatever the shard count):
#
# - ``escalations:{<namespace>:layout}:database``: the identity stamp of the database the
#   namespace was bound with (``adapters.db.database_identity``: the binding's random stamp and
#   the database's OID). ``escalation db upgrade`` writes it at binding and refuses a database
#   whose identity differs (a restore into a new database, a fresh database) unless told the
#   restore is planned (``--restored``).
# - ``escalations:{<namespace>:layout}:resync``: set while Redis may be *ahead* of the ledger
#   (a restore to an earlier point, a failover that lost commits): its value says why and
#   since when. Workers refuse to fire the namespace while it is set; ``doctor`` fails;
#   ``escalation reconcile`` resets Redis to the ledger's state and clears it.
#
# Neither key expires. Implements ``escalation.ports.ResyncMark``.


def identity_key(namespace: str) -> str:
    """Key holding the identity stamp of the namespace's database."""
    return f"escalations:{{{namespace}:layout}}:database"


def resync_key(namespace: str) -> str:
    """Key holding the namespace's resync mark (JSON: reason, since_ms, detail)."""
    return f"escalations:{{{namespace}:layout}}:resync"


class NamespaceBinding:
    """The identity stamp and resync mark of one namespace.

    Args:
        client: ``redis.Redis`` (or a cluster / Sentinel client) with
            ``decode_responses=True``.
        namespace: the deployment's ``ESCALATION_NAMESPACE``.
    """

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self._client = client
        self.namespace = namespace

    def database_identity(self) -> str | None:
        """The identity stamp written at binding, or None (never bound by this version)."""
        raw = self._client.get(identity_key(self.namespace))
        return None if raw is None else str(raw)

    def stamp(self, identity: str) -> None:
        """Write ``identity`` as the namespace's database (overwrites)."""
        self._client.set(identity_key(self.namespace), identity)

    def resync(self) -> dict[str, Any] | None:
        """The resync mark (``{"reason", "since_ms", "detail"}``), or None when not set."""
        raw = self._client.get(resync_key(self.namespace))
        if raw is None:
            return None
        try:
            value = json.loads(str(raw))
        except ValueError:
            return {"reason": "unreadable mark", "since_ms": 0, "detail": str(raw)[:200]}
        return cast(dict[str, Any], value) if isinstance(value, dict) else {
            "reason": str(value), "since_ms": 0, "detail": ""}

    def mark_resync(self, reason: str, detail: str = "") -> None:
        """Set the resync mark unless it is set already (the first cause is kept).

        Args:
            reason: a code (``restored``, ``ahead_on_claim``, ``ahead_in_reconcile``).
            detail: free text for the operator (e.g. the dispute ids found ahead).
        """
        seconds, micros = self._client.time()
        body = json.dumps({"reason": reason, "detail": detail[:500],
                           "since_ms": int(seconds) * 1000 + int(micros) // 1000})
        self._client.set(resync_key(self.namespace), body, nx=True)

    def clear_resync(self) -> bool:
        """Delete the resync mark; True when one was set."""
        return bool(self._client.delete(resync_key(self.namespace)))
