"""Engines made by ``db.make_engine`` are safe across ``os.fork`` (the CSV import's pass 1
child): a child that queries gets a connection of its own instead of the parent's pooled
one (whose socket the parent keeps using), and the parent's connection still works."""

from __future__ import annotations

import os

import sqlalchemy as sa

from escalation.adapters.db import make_engine

BACKEND = sa.text("SELECT pg_backend_pid()")


def test_a_forked_child_does_not_use_the_parents_pooled_connection(database_url: str) -> None:
    engine = make_engine(database_url, pool_size=1)
    try:
        with engine.connect() as conn:  # back in the pool afterwards, socket open
            parent_backend = conn.execute(BACKEND).scalar_one()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                with engine.connect() as conn:
                    os.write(write, str(conn.execute(BACKEND).scalar_one()).encode())
            except BaseException:  # the parent sees an empty answer
                code = 1
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read) as fh:
            child_backend = fh.read()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert child_backend and int(child_backend) != parent_backend
        with engine.connect() as conn:  # the parent's connection was neither used nor closed
            assert conn.execute(BACKEND).scalar_one() == parent_backend
            assert conn.execute(sa.text("SELECT 41 + 1")).scalar_one() == 42
    finally:
        engine.dispose()
