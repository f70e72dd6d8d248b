"""Helpers for the ladder migration tests: a private copy of the fixture ladders under a
unique ladder name (the session database is shared, so each test migrates only its own
escalations), v1 released as baseline, enqueue on v1, then add (and by default release) a
v2 variant from tests/fixtures/ladders/<variant>/."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from escalation.adapters.ladder_files import LadderCatalog, ReleasedLadders
from escalation.adapters.ladder_history import LadderHistoryStore
from escalation.adapters.pipeline import Overlapped
from escalation.adapters.tables import escalation_audit
from escalation.domain.ladder_plan import MigrationPlan
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueMany, EnqueueRequest, enqueue_many
from escalation.service_layer.ladder_migration import (
    ApplyHooks,
    ApplyMigration,
    ApplyReport,
    LadderPorts,
    PlanMigration,
    apply_migration,
    plan_migration,
)
from escalation.service_layer.ladder_release import (
    ReleaseResult,
    ReleaseVersion,
    baseline_releases,
    release_version,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ladders"


@dataclass
class MigEnv:
    """One test's ladder directory (unique ladder name) on the test's App."""

    app: Any
    dir: Path
    name: str

    @classmethod
    def make(cls, app: Any, tmp_path: Path) -> MigEnv:
        """Copy base/migdemo.v1.toml as ``<unique>.v1.toml`` into ``tmp_path/ladders`` and
        release it (first-use baseline)."""
        env = cls(app, tmp_path / "ladders", "m" + uuid.uuid4().hex[:12])
        env.dir.mkdir()
        env.add("base", 1, release=False)
        baseline_releases(env.history, env.files, app.scheduler.time())
        return env

    def add(self, variant: str, version: int = 2, *, release: bool = True) -> Path:
        """Copy ``<variant>/migdemo.v<version>.toml`` under this test's ladder name and
        (by default) release it."""
        text = (FIXTURES / variant / f"migdemo.v{version}.toml").read_text()
        path = self.dir / f"{self.name}.v{version}.toml"
        path.write_text(text.replace('ladder = "migdemo"', f'ladder = "{self.name}"'))
        if release:
            self.release(version)
        return path

    def release(self, version: int = 2, *, actor: str = "test-admin",
                reason: str = "CHG-1") -> ReleaseResult:
        """``ladder release --version``."""
        return release_version(
            ReleaseVersion(self.name, version, actor, reason, self.app.scheduler.time()),
            history=self.history, files=self.files)

    @property
    def catalog(self) -> ReleasedLadders:
        """The released ladders (what enqueue and workers use), read now."""
        return ReleasedLadders(self.dir, self.history.released_checksums)

    @property
    def files(self) -> LadderCatalog:
        """Every valid file on disk, released or not."""
        return LadderCatalog.from_dir(self.dir, strict=False)

    @property
    def history(self) -> LadderHistoryStore:
        """The ladder history store on the test database."""
        return LadderHistoryStore(self.app.engine)

    def enqueue(
        self, tier: str = "standard", *, due_at: datetime | None = None,
        opened_at: datetime | None = None, n: int = 1,
    ) -> list[uuid.UUID]:
        """Enqueue ``n`` escalations on the latest version present."""
        reqs = []
        for _ in range(n):
            did = uuid.uuid4()
            reqs.append(EnqueueRequest(
                dispute_id=did, materiality=Decimal("125.00"),
                source_hash=hashlib.sha256(str(did).encode()).hexdigest(), tier=tier,
                due_at=due_at, opened_at=opened_at, ladder=self.name,
            ))
        res = enqueue_many(
            EnqueueMany(requests=reqs, actor="test", default_ladder=self.name),
            CorePorts(scheduler=self.app.scheduler, store=self.app.store, ladders=self.catalog,
                      calendars=self.app.calendars),
        )
        return [r.escalation.dispute_id for r in res]

    def plan(self, to: int = 2) -> MigrationPlan:
        """``ladder plan --to``."""
        return plan_migration(PlanMigration(self.name, to), self.ports())

    def apply(self, plan_hash: str, to: int = 2, **kw: Any) -> ApplyReport:
        """``ladder apply --to --plan-hash``."""
        kw.setdefault("actor", "test-admin")
        kw.setdefault("reason", "CHG-1")
        hooks = ApplyHooks(**{k: kw.pop(k) for k in ("progress", "hook", "on_scheduled")
                              if k in kw})
        return apply_migration(ApplyMigration(self.name, to, plan_hash, **kw), self.ports(),
                               hooks)

    def ports(self) -> LadderPorts:
        """The ports of ``ladder plan`` / ``ladder apply`` over this environment, with the
        pipeline the CLI runs them with (next page read ahead, restores overlapped)."""
        return LadderPorts(self.history, self.app.scheduler, self.catalog, self.app.calendars,
                           Overlapped("ladder-apply", read_ahead=True))

    def state(self, did: uuid.UUID) -> Any:
        """The projection state (Escalation) of ``did``."""
        got = self.app.store.get(did)
        assert got is not None
        return got[0]

    def migrated_rows(self, did: uuid.UUID) -> list[dict[str, Any]]:
        """The LADDER_MIGRATED ledger rows of ``did``."""
        stmt = sa.select(escalation_audit).where(
            escalation_audit.c.dispute_id == did, escalation_audit.c.event == "LADDER_MIGRATED"
        )
        with self.app.engine.connect() as conn:
            return [dict(r) for r in conn.execute(stmt).mappings()]

    def pinned_in_redis(self, did: uuid.UUID) -> str | None:
        """The ladder field (``l``) of the Redis payload (``name@version``)."""
        payload = self.app.scheduler.payload(did)
        return None if payload is None else payload["l"]


def hours(n: float) -> timedelta:
    """``n`` hours."""
    return timedelta(hours=n)
