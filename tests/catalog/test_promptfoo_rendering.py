"""promptfoo's Nunjucks templates render as promptfoo renders them, and --lenient never changes a verdict.

The renderer (``evaljobs.catalog.importers.promptfoo_templates``: a sandboxed Jinja2 for what is more than
``{{ name }}``) is compared with the real Nunjucks that the pinned promptfoo ships (``scripts/test`` installs
it under ``.cache/promptfoo``), configured as promptfoo configures it (autoescape off, its ``load`` filter).
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from evaljobs.catalog.importers.promptfoo_templates import FILTERS, render_template

ROOT = Path(__file__).resolve().parents[2]
NUNJUCKS = ROOT / ".cache" / "promptfoo" / "node_modules" / "nunjucks"

STYLE = '{"tone":"formal","length":"brief","formatting":{"bullets":true}}'
CASES = [
    ("- Tone: {{ (style_config | load).tone }}\n- Length: {{ (style_config | load).length }}",
     {"style_config": STYLE}),
    ("{{ (style_config | load).formatting.bullets }}", {"style_config": STYLE}),
    ("{{ data | dump }}", {"data": {"a": 1, "b": [1, "x", None], "c": "é"}}),
    ("{{ data | dump(2) }}", {"data": {"a": 1, "b": [True]}}),
    ("{% for c in items %}{{ loop.index }}. {{ c | upper }}\n{% endfor %}", {"items": ["a", "b"]}),
    ("{% if flag %}yes{% else %}no{% endif %} {{ flag }}", {"flag": False}),
    ("{{ n }} {{ f }} {{ t }} [{{ nothing }}] {{ whole }}", {"n": 1, "f": 2.5, "t": True, "nothing": None,
                                                           "whole": 3.0}),
    ("{{ items }} / {{ d }}", {"items": ["a", "b"], "d": {"k": "v"}}),
    ("{{ items | join(', ') }} {{ items | length }} {{ items | first }} {{ items | last }}",
     {"items": ["x", "y", "z"]}),
    ("{{ items | reverse | join('-') }} {{ text | trim | lower }}|",
     {"items": ["x", "y"], "text": "  Hello  "}),
    ("{{ s | replace('a', 'o') }} {{ s | int }} {{ s2 | float }} {{ neg | abs }}",
     {"s": "3.7a", "s2": "2", "neg": -3}),
    ("{{ d.k }} {{ d['k'] }} {{ missing | default('anon') }} {{ word | string }}",
     {"d": {"k": "v"}, "missing": None, "word": "w"}),
    ("{{ text | safe }} {{ word.__class__ }}|", {"text": "<b>&</b>", "word": "w"}),
    ("{{ items | reverse }} {{ t | string }} {{ word | list | join('-') }} {{ d | list | length }}",
     {"items": [1, 2], "t": True, "word": "abc", "d": {"a": 1, "b": 2}}),
    ("{{ f | int }} {{ word | float(1.5) }} {{ word | int(7) }} {{ big | float }}",
     {"f": 3.9, "word": "x", "big": "1e3"}),
    ("Hello {{ who | default('you') }}, {{ how | d('fine') }}", {}),  # a var used only through default
]


def _nunjucks(cases: list) -> list[str]:
    """Each template rendered by the real Nunjucks, as promptfoo's getNunjucksEngine sets it up."""
    if not NUNJUCKS.exists():
        pytest.fail("Nunjucks (shipped with promptfoo) is not installed under .cache/promptfoo: run "
                    "scripts/test, which installs the pinned promptfoo there")
    script = """
const nunjucks = require(process.argv[1]);
const env = nunjucks.configure({autoescape: false, throwOnUndefined: false});
env.addFilter('load', (text) => JSON.parse(text));
let data = '';
process.stdin.on('data', (chunk) => { data += chunk; });
process.stdin.on('end', () => {
  process.stdout.write(JSON.stringify(JSON.parse(data).map(([t, v]) => env.renderString(t, v))));
});
"""
    done = subprocess.run([shutil.which("node") or "node", "-e", script, str(NUNJUCKS)],
                          input=json.dumps(cases), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_templates_render_as_nunjucks_renders_them():
    expected = _nunjucks(CASES)
    for (template, variables), theirs in zip(CASES, expected):
        text, missing, refusal = render_template(template, variables)
        assert (refusal, missing) == (None, []), template
        assert text == theirs, template


@pytest.mark.parametrize("name", ["nl2br", "title", "urlencode", "wordcount", "my_custom_filter"])
def test_a_filter_evaljobs_does_not_render_is_refused_by_name(name):
    """Nunjucks has these (or a config adds its own): rather than render them with what Jinja2's namesake
    might do, the template is refused, naming the filter and the ones evaljobs renders."""
    text, missing, refusal = render_template(f"Hi {{{{ who | {name} }}}}", {"who": "x"})
    assert text == f"Hi {{{{ who | {name} }}}}" and missing == []
    assert refusal == (f"uses the Nunjucks filter {name!r}, which evaljobs does not render (known: "
                       f"{', '.join(FILTERS)})")


def test_a_missing_var_is_reported_unless_it_has_a_default():
    assert render_template("{{ who | default('you') }} {{ who }}", {})[1] == ["who"]
    assert render_template("{% if who %}hi {{ who | upper }}{% endif %}", {})[1] == ["who"]
    assert render_template("{{ who | default(other) }}", {"other": "x"})[1] == []


def test_load_of_a_var_that_is_not_json_cannot_be_rendered():
    text, _, refusal = render_template("{{ (cfg | load).tone }}", {"cfg": "formal"})
    assert text == "{{ (cfg | load).tone }}"
    assert refusal.startswith("cannot be rendered with its vars (JSONDecodeError:")


# --------------------------------------------------------------------------- --lenient




@pytest.fixture
def cli(cli, sim):
    """The shared ``cli`` (tests/conftest.py) with the module's simulated provider."""
    return cli


def test_lenient_makes_a_test_that_lost_an_assertion_not_gradable_and_says_so(tmp_path, cli):
    """The answer passes the icontains that is left, but the test lost its perplexity assertion: it is
    not gradable (counted and listed in the report), never graded on what is left; catalog check counts
    the dropped assertion as refused."""
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text("""\
prompts: ["Say {{word}} [sim: say {{word}} please]"]
tests:
  - description: kept
    vars: {word: hello}
    assert: [{type: icontains, value: hello}]
  - description: lost one
    vars: {word: hi}
    assert:
      - {type: icontains, value: hi}
      - {type: perplexity, threshold: 5}
""")
    strict = cli("catalog", "check", str(config))
    assert strict.exit_code == 2
    assert (f"{config}:10: test #2 ('lost one'): assertion type 'perplexity' cannot be graded by evaljobs; "
            f"remove it or pass --lenient to skip it") in strict.output
    lenient = cli("catalog", "check", "--lenient", str(config))
    assert lenient.exit_code == 0, lenient.output
    assert ("assertions: 3 imported, 2 mapped to native checks, 0 executed externally (Node, Python, "
            "jsonschema), 1 refused") in lenient.output
    run = cli("run", "--lenient", str(config), "-m", "sim/a")
    assert run.exit_code == 0, run.output
    lines = run.output.splitlines()
    assert any("passed  prompt-1.kept × sim/a" in line for line in lines), run.output
    row = next(line for line in lines if line.startswith("sim/a "))
    assert row.split()[1:5] == ["2", "1", "0", "1"]  # scenarios, passed, failed, errored
    listed = ("prompt-1.lost-one × sim/a  errored [not_gradable]: not gradable: test #2 ('lost one'): "
              "assertion #2")
    assert any(line.strip().startswith(listed) for line in lines), run.output
