# Shared setup for scripts/demo and scripts/test: a virtualenv with the project installed.
# Sourced, not run. Idempotent: a second call costs a second or two.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
EXTRAS="${EVALJOBS_EXTRAS:-}"

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv" >&2
  "$PYTHON" -m venv .venv
fi
STAMP=".venv/.evaljobs-installed${EXTRAS:+-$EXTRAS}"
if [ ! -f "$STAMP" ] || [ setup.cfg -nt "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
  echo "setup: installing evaljobs${EXTRAS:+[$EXTRAS]} into .venv" >&2
  .venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install --quiet -e ".${EXTRAS:+[$EXTRAS]}"
  touch "$STAMP"
fi

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
