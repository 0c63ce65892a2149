"""Files shipped inside the package (``evaljobs/data/``): the demo catalog and the ``init`` templates.

Why a module: an installed wheel has no source tree around it, so ``evaljobs demo``
and ``evaljobs init`` must find their files through the package itself, never
through a path relative to a checkout. ``examples/catalogs/support.yaml`` is a
symlink to the demo catalog here, so the repository and the wheel run the same file.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from evaljobs.errors import ConfigurationError

#: The catalog ``evaljobs demo`` runs (scenarios steered by ``[sim: …]`` directives).
DEMO_CATALOG = "support.yaml"


def data_path(name: str) -> Path:
    """The path of the shipped data file ``name`` (relative to ``evaljobs/data/``).

    Wheels install unzipped, so the file is a real path on disk; a missing one
    (a broken install) is a one-line error naming what is missing.
    """
    path = Path(str(resources.files("evaljobs").joinpath("data", *name.split("/"))))
    if not path.is_file():
        raise ConfigurationError(f"evaljobs is installed without its data file {name!r} ({path}); "
                                 f"reinstall it: pip install --force-reinstall evaljobs")
    return path


def read_text(name: str) -> str:
    """The text of the shipped data file ``name``."""
    return data_path(name).read_text(encoding="utf-8")


def demo_catalog() -> Path:
    """The demo catalog's path."""
    return data_path(DEMO_CATALOG)
