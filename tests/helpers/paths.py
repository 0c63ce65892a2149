"""Where a child process finds the test suite's own modules.

Worker processes load adapters and host middleware the tests define (``test_faults:crashing_adapter``,
``helpers.host_middleware_recorder``) by module name, as pytest imports them: each test module by its
own folder (``tests/pipeline/test_faults.py`` is ``test_faults``), the helpers from ``tests/``.
"""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (tests/helpers/paths.py)
TESTS = ROOT / "tests"

#: ``PYTHONPATH`` for a child process: ``tests/``, each folder of test modules, then the repository.
CHILD_PYTHONPATH = os.pathsep.join(
    [str(TESTS), *(str(folder) for folder in sorted(TESTS.iterdir())
                   if folder.is_dir() and any(folder.glob("test_*.py"))), str(ROOT)]
)
