"""The suite's own schedule (tests/helpers/schedule.py): the modules it names exist, and go first."""
from __future__ import annotations

from pathlib import Path

from helpers.schedule import SLOWEST, slowest_first

TESTS = Path(__file__).resolve().parents[1]


def test_every_module_the_schedule_names_exists_under_tests():
    found = {path.stem for path in TESTS.rglob("test_*.py")}
    assert [name for name in SLOWEST if name not in found] == []


def test_named_modules_go_first_in_their_order_and_the_rest_keep_theirs():
    paths = ["tests/a/test_zeta.py::t1", f"tests/{SLOWEST[1]}.py::t1", "tests/test_alpha.py::t1",
             f"tests/b/{SLOWEST[0]}.py::t1", f"tests/{SLOWEST[1]}.py::t2", "tests/a/test_zeta.py::t2"]
    ordered = slowest_first(paths, path_of=lambda item: item.split("::")[0])
    assert ordered == [f"tests/b/{SLOWEST[0]}.py::t1", f"tests/{SLOWEST[1]}.py::t1",
                       f"tests/{SLOWEST[1]}.py::t2", "tests/a/test_zeta.py::t1", "tests/test_alpha.py::t1",
                       "tests/a/test_zeta.py::t2"]
