"""Where the files shipped with the package live: Alembic scripts and the default ladders.

The repository keeps ``migrations/`` and ``ladders/`` as top-level folders; the wheel build
(hatchling ``force-include`` in pyproject.toml) copies them into the package as
``escalation/_data/migrations`` and ``escalation/_data/ladders``. Code asks this module for
the folders, never for a path relative to a checkout:

- installed from a wheel or an sdist: the copies inside the package;
- an editable install or a plain checkout (no ``_data`` folder in the package): the
  top-level folders next to the package directory.

A deployment's own ladders directory is a setting (``ESCALATION_LADDERS_DIR``), not this.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_PACKAGE_DIR = Path(str(resources.files("escalation")))


def _shipped(name: str) -> Path:
    """The shipped folder ``name`` (``"migrations"`` or ``"ladders"``) as a filesystem path.

    Raises:
        FileNotFoundError: neither the packaged copy nor a checkout folder exists (a broken
            install); the message names both places looked at.
    """
    packaged = _PACKAGE_DIR / "_data" / name
    if packaged.is_dir():
        return packaged
    checkout = _PACKAGE_DIR.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(
        f"the package ships no {name}/ folder (looked in {packaged} and {checkout}): "
        "reinstall escalation from a wheel or sdist"
    )


def migrations_dir() -> Path:
    """The Alembic script directory (holds ``env.py`` and ``versions/``).

    Raises:
        FileNotFoundError: see :func:`_shipped`.
    """
    return _shipped("migrations")


def shipped_ladders_dir() -> Path:
    """The directory of the ladder files shipped with the package (``<name>.v<N>.toml``).

    Raises:
        FileNotFoundError: see :func:`_shipped`.
    """
    return _shipped("ladders")
