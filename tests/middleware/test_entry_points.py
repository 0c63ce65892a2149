"""evaljobs.entry_points finds what importlib.metadata finds (issue 42, start-up), and a package installed
after the process started."""
from __future__ import annotations

import sys
from importlib import metadata

from evaljobs import entry_points


def _theirs(group: str) -> list[tuple[str, str]]:
    return [(ep.name, ep.value) for ep in metadata.entry_points(group=group)]


def test_every_group_matches_importlib_metadata_in_order():
    ours = entry_points.installed()
    groups = {ep.group for ep in ours}
    assert "evaljobs.context_providers" in groups  # examples/host_adapter, installed by the set-up
    for group in sorted(groups | {"console_scripts", "evaljobs.middleware", "evaljobs.adapters"}):
        assert [(ep.name, ep.value) for ep in entry_points.installed(group)] == _theirs(group), group


def test_a_distribution_installed_later_is_found_and_loads(tmp_path, monkeypatch):
    info = tmp_path / "late_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: late-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "# a comment\n[evaljobs.middleware]\nlate = late_plugin.hooks:Thing.attr [extra]\n\n[other]\nx = y\n")
    package = tmp_path / "late_plugin"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "hooks.py").write_text("class Thing:\n    attr = 42\n")
    assert "late" not in [ep.name for ep in entry_points.installed("evaljobs.middleware")]
    monkeypatch.syspath_prepend(str(tmp_path))
    found = entry_points.installed("evaljobs.middleware")
    assert [(ep.name, ep.value) for ep in found] == _theirs("evaljobs.middleware")
    late = [ep for ep in found if ep.name == "late"]
    assert len(late) == 1 and late[0].group == "evaljobs.middleware" and late[0].load() == 42
    for name in ("late_plugin.hooks", "late_plugin"):
        sys.modules.pop(name, None)
