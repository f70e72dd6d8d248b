"""The schema check's head revision, read from the scripts' lines, is Alembic's head."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from escalation.adapters import db
from escalation.resources import migrations_dir


def test_head_revision_is_alembics_head() -> None:
    """``db.head_revision`` (no Alembic import) names the head ``ScriptDirectory`` finds."""
    db._head_cache.clear()
    assert db.head_revision() == ScriptDirectory(str(migrations_dir())).get_current_head()


def test_every_script_declares_its_revision_on_one_line() -> None:
    """Each script has exactly one ``revision`` and one ``down_revision`` line the reader
    parses, with the values Alembic loads (a script written another way would be missed)."""
    scripts = ScriptDirectory(str(migrations_dir()))
    for rev in scripts.walk_revisions():
        with open(rev.path, encoding="utf-8") as fh:
            text = fh.read()
        found = dict(db._REVISION_LINE.findall(text))
        assert found["revision"] == rev.revision, rev.path
        assert found.get("down_revision") == rev.down_revision, rev.path
