"""A write script sent to a replica (a primary demoted in a failover) fails with READONLY,
which is an outage the worker retries, never a ``ScriptRefused`` (an item error that reconcile
would record against one escalation and work around)."""

from __future__ import annotations

import pytest
import redis

from escalation.adapters.redis_client import OUTAGE_ERRORS
from escalation.adapters.redis_scheduler import ScriptRefused, run_script
from tests import topologies


def test_readonly_reply_of_a_replica_propagates_as_an_outage(redis_topology: str) -> None:
    if redis_topology != "sentinel":
        pytest.skip("needs --redis-topology sentinel (a replica to write to)")
    primary = topologies.sentinel_primary_port()
    replica = next(p for p in topologies.SENTINEL_DATA_PORTS if p != primary)
    client = redis.Redis(host=topologies.HOST, port=replica, db=9, decode_responses=True)
    try:
        script = client.register_script("return redis.call('SET', KEYS[1], '1')")
        with pytest.raises(redis.exceptions.ReadOnlyError) as err:
            run_script(script, ["escalations:{readonly-probe:0}:x"], [])
        assert not isinstance(err.value, ScriptRefused)
        assert isinstance(err.value, OUTAGE_ERRORS)
        refused = client.register_script("return redis.error_reply('EINVAL probe: bad')")
        with pytest.raises(ScriptRefused):  # a script's own refusal stays an item error
            run_script(refused, ["escalations:{readonly-probe:0}:x"], [])
    finally:
        client.close()
