# Shared setup for scripts/demo and scripts/test: a virtualenv with the project installed.
# Sourced, not run. Idempotent: a second call costs a second or two.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
EXTRAS="${EVALJOBS_EXTRAS:-}"
VENV="${EVALJOBS_VENV:-.venv}"   # scripts/test --python 3.10 uses .venv-3.10

# The installer: uv, pinned (a binary shipped in a PyPI wheel), with pip as the fallback. The same
# packages at the same versions go in either way (both resolve the newest releases the requirements
# allow); uv does it in ~3.5 s of CPU where pip 24+ spent ~14 s, most of it parsing and evaluating the
# ~150,000 file links of the index pages (BENCHMARKS.md, "The suite's wall clock, session 14").
# EVALJOBS_INSTALLER=pip skips uv.
UV_VERSION=0.13.9

_python_pip=""
_python_has_pip() {
  if [ -z "$_python_pip" ]; then
    if "$PYTHON" -m pip --version >/dev/null 2>&1; then _python_pip=yes; else _python_pip=no; fi
  fi
  [ "$_python_pip" = yes ]
}

_bootstrap_pip() {
  # A pip to fetch uv with (or to install with, when uv cannot be had): the interpreter's own, or the
  # one ensurepip puts into the virtualenv (made without one, when the interpreter has its own).
  if [ -x "$VENV/bin/pip" ]; then
    echo "$VENV/bin/python"
  elif _python_has_pip; then
    echo "$PYTHON"
  else
    "$VENV/bin/python" -m ensurepip --default-pip >/dev/null 2>&1 && echo "$VENV/bin/python"
  fi
}

_install_with_uv() {
  # uv goes into $VENV/uv-VERSION, beside the packages, not among them: the tests' environment holds
  # what setup.cfg asks for (and pip), nothing more.
  local uv_dir="$VENV/uv-$UV_VERSION" bootstrap
  if [ ! -x "$uv_dir/bin/uv" ]; then
    bootstrap=$(_bootstrap_pip) || return 1
    rm -rf "$uv_dir"
    local log
    if ! log=$("$bootstrap" -m pip install --quiet --no-compile --target "$uv_dir" "uv==$UV_VERSION" \
               2>&1); then
      echo "setup: pip could not fetch uv $UV_VERSION: $(tail -n 1 <<<"$log")" >&2
      return 1
    fi
  fi
  local compile=(--compile-bytecode)
  if [ -n "${EVALJOBS_PIP_NO_COMPILE:-}" ]; then compile=(); fi
  # 'pip>=24': the virtualenv keeps a pip of its own for the user (and for a later reinstall by pip).
  "$uv_dir/bin/uv" pip install --quiet --python "$VENV/bin/python" ${compile[@]+"${compile[@]}"} \
    'pip>=24' "$@"
}

_install_with_pip() {
  if [ ! -x "$VENV/bin/pip" ]; then "$VENV/bin/python" -m ensurepip --default-pip >/dev/null; fi
  # pip 24 or later first (Python 3.11's venv brings 23.2): its link evaluation costs the older pip
  # about twice the CPU, ~35 s against ~17 s for the test extra (BENCHMARKS.md, "The suite's wall
  # clock, session 13").
  "$VENV/bin/python" -m pip install --quiet 'pip>=24'
  local compile=()
  if [ -n "${EVALJOBS_PIP_NO_COMPILE:-}" ]; then compile=(--no-compile); fi
  "$VENV/bin/python" -m pip install --quiet ${compile[@]+"${compile[@]}"} "$@"
}

setup_venv() {
  # The virtualenv with evaljobs (and EVALJOBS_ALSO_INSTALL, editable, in the same install call: one
  # resolve, one install step) installed; a stamp newer than the metadata skips it.
  if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV with $("$PYTHON" --version 2>&1)" >&2
    if [ "${EVALJOBS_INSTALLER:-uv}" != pip ] && _python_has_pip; then
      # No ensurepip (~3 s of CPU compiling a pip that would be replaced): the install below brings pip.
      "$PYTHON" -m venv --without-pip "$VENV"
    else
      "$PYTHON" -m venv "$VENV"
    fi
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
    local packages=(-e ".${EXTRAS:+[$EXTRAS]}")
    for path in ${EVALJOBS_ALSO_INSTALL:-}; do packages+=(-e "$path"); done
    # EVALJOBS_PIP_NO_COMPILE (scripts/test): its processes keep their bytecode under the virtualenv
    # (PYTHONPYCACHEPREFIX) and never read the ~12,500 .pyc an install would compile (60 s -> 42 s).
    if [ "${EVALJOBS_INSTALLER:-uv}" = pip ]; then
      _install_with_pip "${packages[@]}"
    elif ! _install_with_uv "${packages[@]}"; then
      echo "setup: uv $UV_VERSION did not install into $VENV (above); installing with pip" >&2
      _install_with_pip "${packages[@]}"
    fi
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
