"""Rendering an imported promptfoo template is bounded in time, size and memory (issue 40, item 10).

``catalog check`` of a config whose prompt loops ``range(100000)`` inside ``range(100000)``, or
computes ``'x' * 400000000`` or ``10 ** (10 ** 9)``, grew by 80 MB/s (1.2 GB at 13 s) or accepted a
400 MB prompt as "ok". Now each is refused in one line naming the file and the test's line, in a
real process; the other ways a template can build a huge value are refused before the value exists.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaljobs.catalog.importers.promptfoo_templates import render_template
from helpers import ROOT


def catalog_check(config: Path) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("EVALJOBS_")}
    full["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "evaljobs", "catalog", "check", str(config)], env=full,
                          cwd=config.parent, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("template, reason", [
    ("{% for i in range(100000) %}{% for j in range(100000) %}{{ word * 1000 }}{% endfor %}{% endfor %}",
     "would build a text of 10,005,000 characters (at most 10,000,000)"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
     "took more than 5 s"),
    ("Say {{ 'x' * 400000000 }}",
     "would build a string or list of 400,000,000 characters (at most 10,000,000)"),
    ("{{ 10 ** (10 ** 9) }}",
     "would compute 10 ** 1000000000, an integer of about 4,000,000,000 bits (at most 65,536)"),
])
def test_catalog_check_refuses_a_template_past_the_bounds_in_one_line(template, reason, tmp_path):
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text(f"prompts: [{template!r}]\n"
                      "tests:\n"
                      "  - vars: {word: hello}\n"
                      "    assert: [{type: icontains, value: hello}]\n")
    done = catalog_check(config)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 2, lines
    assert lines == [f"error: {config}:3: test #1: prompt 'prompt-1' is refused: rendering it {reason}; "
                     "simplify it or pass --lenient to skip it"], lines


@pytest.mark.parametrize("template", [
    "{% set s = 'x' * 1000 %}" + "{% set s = s ~ s %}" * 30 + "{{ s|length }}",
    "{% macro f(s) %}{{ f(s ~ s) }}{% endmacro %}{{ f('x') }}",
    "{{ 'x'.ljust(1000000000) }}",
    "{{ '%1000000000d' % 1 }}",
    "{{ 'x'" + "|replace('x', 'xxxxxxxxxx')" * 9 + " }}",
    "{{ range(100000)|join('x' * 1000) }}",
    "{{ [1] * 100000000 }}",
    "{% set n = 10 ** 1000 %}{{ n" + " * n" * 30 + " }}",
])
def test_every_way_to_build_a_huge_value_is_refused_before_it_is_built(template):
    rendered, missing, refusal = render_template(template, {})
    assert refusal is not None and refusal.startswith("is refused: rendering it "), refusal
    assert rendered == template


def test_templates_within_the_bounds_render_as_before():
    rendered, missing, refusal = render_template(
        "{{ name ~ '!' }} {% for c in name %}{{ c }}.{% endfor %} {{ 'ab' * 3 }} {{ 2 ** 10 }} "
        "{{ [1, 2]|join(',') }} {{ 'a-b'|replace('-', '+') }} "
        "{% for i in range(3) %}{{ loop.length }}{% endfor %} {{ [1]|dump(40) }}", {"name": "bob"})
    assert refusal is None and missing == []
    # JSON.stringify indents by 10 at most
    assert rendered == "bob! b.o.b. ababab 1024 1,2 a+b 333 [\n          1\n]"


def test_jinja2_globals_nunjucks_has_not_are_not_offered():
    for template in ("{{ lipsum(100000) }}", "{% set ns = namespace(s='x') %}{{ ns.s }}", "{{ dict(a=1) }}"):
        assert render_template(template, {})[2] is not None, template
