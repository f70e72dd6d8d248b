"""Ledger scale: the projection's external id index and the clock table (``escalation_clock``).

``escalation_clock`` holds every regulatory clock of every dispute as one indexed row, kept
by triggers on the projection.

``ix_escalation_state_external_id``: ``audit show EXTERNAL_ID`` looks a dispute up by the
id its source gave (``audit_queries.find_by_external_id``). Without it the projection is
read whole (a Parallel Seq Scan: 570 ms on 2,003,000 rows); with it, one Index Scan.

``escalation_clock`` (dispute_id, name, at, ladder, ladder_version, external_id, open,
ended): one row per clock of ``COALESCE(obligations, deadlines)`` with a known instant;
``open`` = the clock is among the projection's binding ``deadlines`` (no action met it or
ended it late), ``ended`` = the dispute is resolved or cancelled. It is derived data: the
statement trigger on INSERT adds the rows of every new projection row in one statement,
the row trigger on UPDATE rewrites a dispute's rows only when one of the columns it copies
changes (a worker's promotion changes none of them: its WHEN clause is false and no
function runs). The deadline lists page through it by keyset on ``(at, dispute_id,
name)``, and the overview counts open clocks by instant on the partial index
(``docs/console.md``, "Limits").

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _array(column: str) -> str:
    """The clocks array of ``column`` (a row written before a fix holds the array's text
    as a JSON string: read as the array, as ``report_queries.clocks_sql`` does)."""
    return (f"(CASE WHEN jsonb_typeof({column}) = 'array' THEN {column} "
            f"WHEN jsonb_typeof({column}) = 'string' THEN CAST({column} #>> '{{}}' AS jsonb) "
            "END)")


_CLOCKS_OF = f"""
CREATE FUNCTION escalation_clocks_of(
    p_id uuid, p_external_id text, p_ladder text, p_version integer, p_status text,
    p_deadlines jsonb, p_obligations jsonb)
RETURNS TABLE (dispute_id uuid, name text, at timestamptz, ladder text,
               ladder_version integer, external_id text, open boolean, ended boolean)
LANGUAGE sql STABLE AS $$
    SELECT p_id, e->>0, CAST(e->>1 AS timestamptz), p_ladder, p_version, p_external_id,
           EXISTS (SELECT 1 FROM jsonb_array_elements({_array('p_deadlines')}) b
                    WHERE b->>0 = e->>0),
           p_status IN ('resolved', 'cancelled')
      FROM jsonb_array_elements(COALESCE({_array('p_obligations')},
                                         {_array('p_deadlines')})) e
     WHERE e->>1 IS NOT NULL
$$
"""
_ON_INSERT = """
CREATE FUNCTION escalation_clock_insert() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO escalation_clock
    SELECT c.* FROM new_rows s,
           LATERAL escalation_clocks_of(s.dispute_id, s.external_id, s.ladder,
                                        s.ladder_version, s.status, s.deadlines,
                                        s.obligations) c
     WHERE s.deadlines IS NOT NULL OR s.obligations IS NOT NULL
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$
"""
_ON_UPDATE = """
CREATE FUNCTION escalation_clock_update() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    DELETE FROM escalation_clock WHERE dispute_id = NEW.dispute_id;
    INSERT INTO escalation_clock
    SELECT * FROM escalation_clocks_of(NEW.dispute_id, NEW.external_id, NEW.ladder,
                                       NEW.ladder_version, NEW.status, NEW.deadlines,
                                       NEW.obligations)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$
"""
_CHANGED = (
    "OLD.deadlines IS DISTINCT FROM NEW.deadlines"
    " OR OLD.obligations IS DISTINCT FROM NEW.obligations"
    " OR OLD.ladder IS DISTINCT FROM NEW.ladder"
    " OR OLD.ladder_version IS DISTINCT FROM NEW.ladder_version"
    " OR OLD.external_id IS DISTINCT FROM NEW.external_id"
    " OR (OLD.status IN ('resolved', 'cancelled'))"
    " IS DISTINCT FROM (NEW.status IN ('resolved', 'cancelled'))"
)


def upgrade() -> None:
    """The external id index; the clock table, its indexes, triggers and rows."""
    op.create_index("ix_escalation_state_external_id", "escalation_state", ["external_id"])
    op.execute("""
        CREATE TABLE escalation_clock (
            dispute_id uuid NOT NULL, name text NOT NULL, at timestamptz NOT NULL,
            ladder text NOT NULL, ladder_version integer NOT NULL, external_id text,
            open boolean NOT NULL, ended boolean NOT NULL,
            CONSTRAINT pk_escalation_clock PRIMARY KEY (dispute_id, name))
    """)
    op.execute(_CLOCKS_OF)
    op.execute("""
        INSERT INTO escalation_clock
        SELECT c.* FROM escalation_state s,
               LATERAL escalation_clocks_of(s.dispute_id, s.external_id, s.ladder,
                                            s.ladder_version, s.status, s.deadlines,
                                            s.obligations) c
         WHERE s.deadlines IS NOT NULL OR s.obligations IS NOT NULL
        ON CONFLICT DO NOTHING
    """)
    op.execute("CREATE INDEX ix_escalation_clock_at ON escalation_clock (at, dispute_id, name)")
    op.execute("CREATE INDEX ix_escalation_clock_open ON escalation_clock (at) "
               "WHERE open AND NOT ended")
    op.execute("CREATE INDEX ix_escalation_clock_settled ON escalation_clock "
               "(at, dispute_id, name) WHERE NOT (open AND NOT ended)")
    op.execute("CREATE INDEX ix_escalation_clock_after_end ON escalation_clock (name, at) "
               "WHERE ended")
    op.execute(_ON_INSERT)
    op.execute(_ON_UPDATE)
    op.execute("CREATE TRIGGER escalation_clock_insert AFTER INSERT ON escalation_state "
               "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
               "EXECUTE FUNCTION escalation_clock_insert()")
    op.execute("CREATE TRIGGER escalation_clock_update AFTER UPDATE OF deadlines, "
               "obligations, ladder, ladder_version, external_id, status ON escalation_state "
               f"FOR EACH ROW WHEN ({_CHANGED}) EXECUTE FUNCTION escalation_clock_update()")
    for trigger in ("escalation_clock_insert", "escalation_clock_update"):
        op.execute(f"ALTER TABLE escalation_state ENABLE ALWAYS TRIGGER {trigger}")
    # The clock table is derived: only the triggers write it, as the migration's owner
    # (SECURITY DEFINER), so the application role that writes the projection needs no write
    # privilege on it; every role that reads the projection may read the clocks.
    op.execute("REVOKE ALL ON escalation_clock FROM PUBLIC")
    op.execute("GRANT SELECT ON escalation_clock TO escalation_app, escalation_auditor")


def downgrade() -> None:
    """Drop the triggers, functions and table; then the index."""
    op.execute("DROP TRIGGER escalation_clock_update ON escalation_state")
    op.execute("DROP TRIGGER escalation_clock_insert ON escalation_state")
    op.execute("DROP FUNCTION escalation_clock_update()")
    op.execute("DROP FUNCTION escalation_clock_insert()")
    op.execute("DROP TABLE escalation_clock")
    op.execute("DROP FUNCTION escalation_clocks_of(uuid, text, text, integer, text, jsonb, "
               "jsonb)")
    op.drop_index("ix_escalation_state_external_id", table_name="escalation_state")
