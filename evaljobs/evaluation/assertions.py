"""External assertions: promptfoo's ``javascript`` and ``python`` assertions, transforms, JSON schemas.

An imported promptfoo test may grade with code. evaljobs runs that code the way
promptfoo does instead of dropping it:

* ``javascript`` assertions and every ``transform`` run in Node: one long-lived
  ``node`` process per worker process, spoken to with one JSON line per call on
  stdin/stdout. Each call runs in a fresh ``vm`` context with a timeout (a loop
  that never ends is stopped); a call that does not answer in time gets the
  process killed and restarted. Without ``node`` on PATH the assertion is refused
  with one line saying how to install it.
* ``python`` assertions (inline, or a ``file://x.py:function`` whose source the
  importer stored in the catalog) run in a ``python`` subprocess with a timeout.
* ``is-json`` with a schema validates with ``jsonschema`` (optional extra
  ``evaljobs[imports]``).
* built-in checks on a transformed output reuse the native graders.

A result follows promptfoo's conventions: a boolean is pass/fail; a number is a
score that passes above 0 (or at ``threshold`` when one is set); an object gives
``pass``, ``score`` and ``reason``.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Any

from evaljobs.catalog.model import SET_ENTRIES
from evaljobs.config import code_environment, settings
from evaljobs import evaluation
from evaljobs.evaluation import grading_deadline
from evaljobs.evaluation.graders import graders
from evaljobs.evaluation.refused import AssertionRefused
from evaljobs.isolation import CODE_HINT, isolated

#: Seconds one JavaScript or Python call may take.
CALL_TIMEOUT = 10.0

NODE_HINT = ("install Node.js (https://nodejs.org, or your package manager: apt-get install nodejs) so that "
             "'node' is on PATH")


def runs_code(item: dict[str, Any]) -> bool:
    """Whether an assertion entry runs the catalog's own code (a python/javascript assertion, a transform)."""
    return item.get("kind") in ("javascript", "python") or bool(item.get("transforms"))


def code_refusal(item: dict[str, Any]) -> str | None:
    """Why ``item`` may not run here (one line), or None: its code runs only where the operator allows."""
    if runs_code(item) and not settings().allow_code:
        what = item.get("kind") if item.get("kind") in ("javascript", "python") else "transform"
        return f"{item.get('label') or item.get('kind')}: a {what} assertion: {CODE_HINT}"
    return None


# The Node side: one request per line, one answer per line. A transform's code is the body of
# `function (output, context)` (a one-line expression gets a `return`, as promptfoo's transforms do); a
# `javascript` assertion's body is built as promptfoo builds it (src/assertions/javascript.ts
# buildFunctionBody: trailing space and semicolons dropped, `const x = ...; x > 1` returns its last
# expression); a `module` (a file:// assertion's source, stored in the catalog) is imported from a file of
# argv[1] (the runner's own folder) and its function called, as promptfoo's loadFromJavaScriptFile does.
_NODE_SCRIPT = r"""
const vm = require('vm');
const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const {pathToFileURL} = require('url');
const readline = require('readline');
const folder = process.argv[1];
const rl = readline.createInterface({input: process.stdin});
function reply(obj) { process.stdout.write(JSON.stringify(obj) + '\n'); }
function escaped(code, i) {
  let n = 0;
  while (i - 1 - n >= 0 && code[i - 1 - n] === '\\') n++;
  return n % 2 === 1;
}
function lastSemicolon(code) {
  let single = false, double = false, template = false, last = -1;
  for (let i = 0; i < code.length; i++) {
    const c = code[i];
    if (!escaped(code, i)) {
      if (c === "'" && !double && !template) single = !single;
      else if (c === '"' && !single && !template) double = !double;
      else if (c === '`' && !single && !double) template = !template;
    }
    if (c === ';' && !single && !double && !template) last = i;
  }
  return last;
}
function assertionBody(code) {
  code = code.replace(/\s+$/, '');
  if (code.includes('\n')) return code;
  const trimmed = code.trim().replace(/;+\s*$/, '');
  if (/^(const|let|var)\s/.test(trimmed)) {
    const last = lastSemicolon(trimmed);
    if (last !== -1) {
      const expression = trimmed.slice(last + 1).trim();
      if (expression) return trimmed.slice(0, last + 1) + ' return ' + expression;
    }
    return trimmed;
  }
  return 'return ' + trimmed;
}
async function moduleFunction(req) {
  const esm = /^\s*(export|import)\s/m.test(req.module);
  const digest = crypto.createHash('sha256').update(req.module).digest('hex');
  const name = digest.slice(0, 16) + (esm ? '.mjs' : '.cjs');
  const file = path.join(folder, name);
  if (!fs.existsSync(file)) fs.writeFileSync(file, req.module);
  const mod = await import(pathToFileURL(file).href);
  const exported = mod.default;
  const fn = req.function
    ? (typeof mod[req.function] === 'function' ? mod[req.function] : exported && exported[req.function])
    : (typeof exported === 'function' ? exported : exported && exported.default);
  if (typeof fn !== 'function') {
    throw new Error((req.filename || 'the module') + ' must export a function' +
                    (req.function ? ' named ' + req.function : ' (default export)'));
  }
  return fn;
}
rl.on('line', async (line) => {
  let req;
  try { req = JSON.parse(line); } catch (e) { reply({ok: false, error: 'bad request'}); return; }
  try {
    let value;
    if (req.module !== undefined) {
      value = (await moduleFunction(req))(req.output, req.context);
    } else {
      const body = req.assertion ? assertionBody(req.code)
        : (req.code.includes('\n') ? req.code : 'return ' + req.code);
      const sandbox = {output: req.output, context: req.context, JSON, Math, Date, RegExp, Number, String,
                       Array, Object, Boolean, parseInt, parseFloat, isNaN, isFinite};
      value = vm.runInNewContext('(function (output, context) {\n' + body + '\n})(output, context)',
                                 sandbox, {timeout: req.timeout_ms});
    }
    if (value && typeof value.then === 'function') {
      value = await Promise.race([value, new Promise((_, no) =>
        setTimeout(() => no(new Error('timed out after ' + req.timeout_ms + ' ms')), req.timeout_ms))]);
    }
    reply({id: req.id, ok: true, value: value === undefined ? null : JSON.parse(JSON.stringify(value))});
  } catch (e) {
    reply({id: req.id, ok: false, error: String(e && e.message || e).split('\n')[0]});
  }
});
"""


class NodeRunner:
    """One long-lived Node process (started on first use), shared by the threads of this process."""

    def __init__(self, node: str | None = None, timeout: float = CALL_TIMEOUT):
        self.node = node or shutil.which("node")
        self.timeout = timeout
        self._proc: subprocess.Popen | None = None
        self._folder: str | None = None  # where file:// modules are written for Node to import
        self._lock = threading.Lock()
        self._next = 0

    def available(self) -> bool:
        return self.node is not None

    def _start(self, node: str) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self._folder = self._folder or tempfile.mkdtemp(prefix="evaljobs-js-")
            # The catalog's code reaches Node's `process` (a vm context is no sandbox): the process holds
            # no secret of this one's — an environment of basics only, its own folder as home.
            self._proc = subprocess.Popen(
                isolated([node, "-e", _NODE_SCRIPT, self._folder]),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                bufsize=1,
                env=code_environment(self._folder),
                cwd=self._folder,
            )
        return self._proc

    def call(self, code: str, output: Any, context: dict[str, Any], *, assertion: bool = False,
             module: str | None = None, function: str | None = None, filename: str | None = None) -> Any:
        """Run ``code`` as promptfoo would (``output``, ``context`` in scope): a transform, or with
        ``assertion`` a ``javascript`` assertion's body; or ``module``'s function (a file:// assertion). Its
        JSON value, or
        ``RuntimeError``."""
        node = self.node
        if node is None:
            raise AssertionRefused(f"needs Node.js: {NODE_HINT}")
        with self._lock:
            timeout = grading_deadline.remaining(self.timeout)  # never past the pair's deadline
            proc = self._start(node)
            self._next += 1
            request = {"id": self._next, "code": code, "output": output, "context": context,
                       "timeout_ms": max(1, math.ceil(timeout * 1000)), "assertion": assertion}
            if module is not None:
                request.update(module=module, function=function, filename=filename)
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            line = _read_line(proc, timeout + 2.0)
            if line is None:  # stuck (an async loop): kill it, the next call starts a fresh one
                self.close()
                raise RuntimeError(f"JavaScript timed out after {timeout:.3g} s")
        answer = json.loads(line)
        if not answer.get("ok"):
            raise RuntimeError(f"JavaScript error: {answer.get('error')}")
        return answer.get("value")

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        folder, self._folder = self._folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _read_line(proc: subprocess.Popen, timeout: float) -> str | None:
    """One line from the process, or ``None`` when none comes within ``timeout`` seconds."""
    result: list[str] = []
    stdout = proc.stdout
    assert stdout is not None  # started with stdout=PIPE
    reader = threading.Thread(target=lambda: result.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive() or not result or not result[0]:
        return None
    return result[0]


# promptfoo's Python wrapper (src/python/wrapper.ts + wrapper.py) runs the assertion in its own process and
# writes the return value to a result file: the assertion's stdout is its own business (print() is fine),
# and the verdict never has to be picked out of it. The same here: argv[1] is the result file.
_PYTHON_WRAPPER = r"""
import json, sys
request = json.load(sys.stdin)
scope = {"__name__": "__promptfoo_assertion__"}
if request.get("function"):
    exec(compile(request["code"], request.get("filename") or "<assertion>", "exec"), scope)
    fn = scope[request["function"]]
else:  # src/assertions/python.ts buildPythonScript: a one-liner is returned, a block is the body
    code = request["code"]
    if "\n" in code:
        lines = code.split("\n")
        indent = next((l[:len(l) - len(l.lstrip())] for l in lines if l.strip() and l[:1].isspace()), "    ")
        body = "\n".join(indent + l for l in lines)
    else:
        body = "    return " + code
    exec(compile("import json\n\ndef main(output, context):\n" + body + "\n", "<assertion>", "exec"), scope)
    fn = scope["main"]
value = fn(request["output"], request["context"])
with open(sys.argv[1], "w", encoding="utf-8") as out:
    json.dump({"value": value}, out, default=str)
"""


def run_python(code: str, output: Any, context: dict[str, Any], *, function: str | None = None,
               filename: str | None = None, timeout: float = CALL_TIMEOUT) -> Any:
    """Run a promptfoo ``python`` assertion in a subprocess; its return value, or ``RuntimeError``."""
    request = {"code": code, "output": output, "context": context, "function": function, "filename": filename}
    with tempfile.TemporaryDirectory(prefix="evaljobs-py-") as folder:
        result = os.path.join(folder, "result.json")
        try:
            # The assertion's code is the catalog's: its process holds no secret of this one's.
            done = subprocess.run(isolated([sys.executable, "-c", _PYTHON_WRAPPER, result]),
                                  input=json.dumps(request), text=True, capture_output=True,
                                  timeout=timeout, check=False, cwd=folder,
                                  env=code_environment(folder, {"PYTHONIOENCODING": "utf-8"}))
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"Python timed out after {timeout:g} s") from None
        if done.returncode != 0 or not os.path.exists(result):
            last = (done.stderr.strip().splitlines() or ["exit status " + str(done.returncode)])[-1]
            raise RuntimeError(f"Python error: {last}")
        with open(result, encoding="utf-8") as handle:
            return json.load(handle)["value"]


def _snake_to_camel(value: Any) -> Any:
    """src/util/caseMapping.ts ``mapSnakeCaseToCamelCase`` (a Python dataclass's ``named_scores``...)."""
    if isinstance(value, dict):
        return {
            re.sub(r"_([a-z])", lambda m: m.group(1).upper(), k): _snake_to_camel(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_snake_to_camel(v) for v in value]
    return value


def _verdict(value: Any, threshold: float | None, negate: bool = False,
             python: bool = False) -> tuple[bool, float, str]:
    """promptfoo's reading of a custom assertion's result, ``not-`` included: src/assertions/javascript.ts
    ``normalizeJavascriptAssertionResult`` and src/assertions/python.ts ``normalizePythonScriptResult``.
    A boolean is pass/fail (score 1/0 after the negation); a number is a score that passes above 0, or at
    ``threshold`` (the score stays the number, negated or not); an object gives ``pass``, ``score`` and
    ``reason`` (for Python, a score under the threshold fails)."""
    if python and isinstance(value, str):
        lowered = value.lower()
        if lowered in ("true", "false"):
            value = lowered == "true"
        elif value.startswith("{"):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise RuntimeError(f"Invalid JSON: {exc} when parsing result: {value[:80]}") from None
        else:
            try:
                value = float(value.strip())
            except ValueError:
                raise RuntimeError(f"returned {value[:80]!r}, not a boolean, a number or "
                                   f"{{pass, score, reason}}") from None
    if isinstance(value, bool):
        passed = value != negate
        return (
            passed,
            1.0 if passed else 0.0,
            "Assertion passed" if passed else f"returned {str(value).lower()}",
        )
    if isinstance(value, (int, float)):
        raw = value > 0 if threshold is None else value >= threshold
        passed = raw != negate
        return passed, float(value), "Assertion passed" if passed else f"returned {value}"
    if isinstance(value, dict) and python:
        value = _snake_to_camel(value)
        if not (isinstance(value.get("pass"), bool) and isinstance(value.get("score"), (int, float))
                and not isinstance(value.get("score"), bool) and isinstance(value.get("reason"), str)):
            raise RuntimeError(f"returned {json.dumps(value)[:80]}, not a boolean, a number or "
                               f"{{pass, score, reason}}")
        raw, score, reason = value["pass"], float(value["score"]), value["reason"]
        if threshold is not None and score < threshold:
            raw, reason = False, f"Python score {score:g} is less than threshold {threshold:g}: {reason}"
        return raw != negate, score, reason
    if isinstance(value, dict) and "pass" in value:
        raw = bool(value.get("pass"))
        given = value.get("score")
        score = (float(given) if isinstance(given, (int, float)) and not isinstance(given, bool)
                 else float(raw))
        return raw != negate, score, str(value.get("reason") or "")
    raise RuntimeError(
        f"returned {json.dumps(value)[:80]}, not a boolean, a number or {{pass, score, reason}}"
    )


def _as_text(output: Any) -> str:
    return output if isinstance(output, str) else json.dumps(output)


class ProcessRunner:
    """The assertion runner of this process (``evaljobs.evaluation.grading.AssertionRunner``)."""

    def __init__(self, node: NodeRunner | None = None):
        self.node = node or NodeRunner()

    def __call__(self, assertion: dict[str, Any], answer: str, scenario: Any) -> tuple[bool, float, str]:
        label = assertion.get("label") or assertion.get("kind")
        # promptfoo's assertion context (src/assertions/index.ts assertionValueContext): the prompt, the
        # test's vars, and the assertion's own ``config``.
        context = {"vars": assertion.get("vars") or {}, "prompt": getattr(scenario, "prompt", ""),
                   "config": assertion.get("config") or {}}
        negate = bool(assertion.get("negate"))
        refused = code_refusal(assertion)
        if refused:
            raise AssertionRefused(refused)
        try:
            output: Any = answer
            for transform in assertion.get("transforms") or ():
                output = self.node.call(transform, output, context)
            kind = assertion["kind"]
            if kind == "javascript":
                value = self.node.call(assertion.get("code") or "", output, context, assertion=True,
                                       module=assertion.get("module"), function=assertion.get("function"),
                                       filename=assertion.get("filename"))
                return _verdict(value, assertion.get("threshold"), negate)
            if kind == "python":
                return _verdict(
                    run_python(
                        assertion["code"],
                        output,
                        context,
                        function=assertion.get("function"),
                        filename=assertion.get("filename"),
                        timeout=grading_deadline.remaining(CALL_TIMEOUT),
                    ),
                    assertion.get("threshold"),
                    negate,
                    python=True,
                )
            if kind == "promptfoo":  # its own not- handling (promptfoo's inverse) is in the check
                return evaluation.promptfoo_checks.check(assertion, _as_text(output))
            if kind == "json_schema":
                passed, score, reason = _json_schema(output, assertion.get("schema"))
            elif kind == "builtin":
                passed, score, reason = builtin_checks(_as_text(output), assertion.get("expect") or {})
            else:
                raise AssertionRefused(f"assertion kind {kind!r} cannot run")
        except AssertionRefused as exc:
            raise AssertionRefused(f"{label}: {exc}") from None
        except RuntimeError as exc:
            # stopped by the pair's deadline: the pair's time limit, not the assertion's verdict
            grading_deadline.checkpoint(f"{label} ({exc})", slack=0.01)  # evaluate's own slack
            # promptfoo: "Custom function threw error" / "Python code execution failed"
            return False, 0.0, f"{label}: {exc}"
        if negate:
            passed, score = not passed, 1.0 - score
        return passed, score, reason


def _json_schema(output: Any, schema: Any) -> tuple[bool, float, str]:
    try:  # the optional 'imports' extra: needed only by an is-json assertion with a schema
        import jsonschema
    except ImportError:
        raise AssertionRefused(
            "is-json with a schema needs jsonschema: pip install 'evaljobs[imports]'"
        ) from None
    if isinstance(output, str):
        try:
            output = json.loads(output)
        except ValueError as exc:
            return False, 0.0, f"not JSON: {exc}"
    errors = sorted(
        jsonschema.Draft202012Validator(schema or {}).iter_errors(output), key=lambda e: list(e.path)
    )
    if errors:
        where = "/".join(str(p) for p in errors[0].path) or "(root)"
        return False, 0.0, f"JSON does not match the schema at {where}: {errors[0].message}"
    return True, 1.0, "JSON matches the schema"


def builtin_checks(text: str, expect: dict[str, Any]) -> tuple[bool, float, str]:
    """A promptfoo built-in assertion (already mapped to native checks) on a transformed output."""
    failures = [failure for g in graders() if g.text_check is not None and expect.get(g.name)
                for failure in g.text_check(text, expect[g.name])]
    return (not failures, 0.0 if failures else 1.0, "; ".join(failures) or "ok")


_RUNNER: ProcessRunner | None = None
_RUNNER_LOCK = threading.Lock()


def process_runner() -> ProcessRunner:
    """The runner shared by this process (its Node process is started on first use)."""
    global _RUNNER
    with _RUNNER_LOCK:
        if _RUNNER is None:
            _RUNNER = ProcessRunner()
        return _RUNNER


def _every(assertions):
    """Every entry, the entries of nested ``set`` entries included (weighted lists)."""
    for item in assertions:
        yield item
        if item.get("kind") == "set":
            yield from _every(item.get(SET_ENTRIES) or [])


def code_refused(assertions) -> str | None:
    """Why a catalog with these assertions may not run its code here (``catalog check``), or None."""
    return next((found for found in map(code_refusal, _every(assertions)) if found), None)


def refusal(assertions) -> str | None:
    """Why this catalog's external assertions cannot run in this process (``None``: they can)."""
    for item in _every(assertions):
        kind = item.get("kind")
        transforms = item.get("transforms") or ()
        refused = code_refusal(item)
        if refused:
            return refused
        if (kind == "javascript" or transforms) and shutil.which("node") is None:
            return f"{item.get('label') or kind}: needs Node.js: {NODE_HINT}"
        if kind == "json_schema":
            try:
                import jsonschema  # noqa: F401
            except ImportError:
                return (
                    f"{item.get('label')}: is-json with a schema needs jsonschema: pip install "
                    "'evaljobs[imports]'"
                )
    return None


__all__ = [
    "CALL_TIMEOUT",
    "CODE_HINT",
    "AssertionRefused",
    "NodeRunner",
    "ProcessRunner",
    "builtin_checks",
    "code_refusal",
    "code_refused",
    "process_runner",
    "refusal",
    "run_python",
    "runs_code",
]
