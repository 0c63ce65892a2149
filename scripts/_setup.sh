# Shared setup for scripts/demo and scripts/test: a virtualenv with the project installed.
# Sourced, not run. Idempotent: a second call costs a second or two.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
EXTRAS="${EVALJOBS_EXTRAS:-}"
VENV="${EVALJOBS_VENV:-.venv}"   # scripts/test --python 3.10 uses .venv-3.10

setup_venv() {
  # The virtualenv with evaljobs (and EVALJOBS_ALSO_INSTALL, editable, in the same pip call: one
  # resolve, one install step) installed; a stamp newer than the metadata skips it.
  if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV with $("$PYTHON" --version 2>&1)" >&2
    "$PYTHON" -m venv "$VENV"
  fi
  STAMP="$VENV/.evaljobs-installed${EXTRAS:+-$EXTRAS}"
  if [ -z "$EXTRAS" ]; then
    # No extras asked for: any install (with extras or not) newer than the metadata will do,
    # so scripts/demo after scripts/test does not reinstall.
    for stamp in "$VENV"/.evaljobs-installed*; do
      if [ -f "$stamp" ] && [ "$stamp" -nt setup.cfg ] && [ "$stamp" -nt pyproject.toml ]; then
        STAMP="$stamp"
        break
      fi
    done
  fi
  if [ ! -f "$STAMP" ] || [ setup.cfg -nt "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
    echo "setup: installing evaljobs${EXTRAS:+[$EXTRAS]}${EVALJOBS_ALSO_INSTALL:+ and $EVALJOBS_ALSO_INSTALL} into $VENV" >&2
    # pip 24 or later first (a fresh virtualenv of Python 3.11 comes with 23.2): the resolver's link
    # evaluation (every file of every release of ~150 packages on the index) costs the older pip about
    # twice the CPU, ~35 s against ~17 s for the test extra; the upgrade is one small wheel, ~2 s, and
    # nothing at all when the virtualenv's pip is new enough (BENCHMARKS.md, "The suite's wall clock,
    # session 13").
    "$VENV/bin/python" -m pip install --quiet 'pip>=24'
    local also=()
    for path in ${EVALJOBS_ALSO_INSTALL:-}; do also+=(-e "$path"); done
    # EVALJOBS_PIP_NO_COMPILE (scripts/test): its processes keep their bytecode under the virtualenv
    # (PYTHONPYCACHEPREFIX) and never read the ~12,500 .pyc pip would compile here (60 s -> 42 s).
    local compile=()
    if [ -n "${EVALJOBS_PIP_NO_COMPILE:-}" ]; then compile=(--no-compile); fi
    "$VENV/bin/python" -m pip install --quiet ${compile[@]+"${compile[@]}"} -e ".${EXTRAS:+[$EXTRAS]}" \
      ${also[@]+"${also[@]}"}
    touch "$STAMP"
  fi
}
_apt_updated=0
apt_install() {
  # apt_install PACKAGE... — install Debian packages when we are allowed to (root or sudo).
  local sudo=""
  if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; else
      echo "setup: need root to apt-get install $*; install them and retry" >&2; return 1; fi
  fi
  if [ "$_apt_updated" = 0 ]; then
    echo "setup: apt-get update" >&2
    $sudo apt-get update -qq >/dev/null
    _apt_updated=1
  fi
  echo "setup: apt-get install $*" >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# scripts/test calls setup_venv itself, beside its other set-up steps (EVALJOBS_SETUP_LATER=1).
if [ -z "${EVALJOBS_SETUP_LATER:-}" ]; then
  setup_venv
fi
