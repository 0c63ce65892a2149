"""Where a catalog's code runs: a child process that holds no secret of the worker's (invariant 20).

A ``python`` or ``javascript`` assertion (or a transform), and an MCP server a catalog's tool starts
(``mcp: {command: …}``), is code the catalog's author wrote, run on the worker of whoever evaluates the
catalog (this module sits below both evaluation and live tools, which share it). It runs only where the
operator opted in (``--allow-code``), and then in a child process that

* inherits an environment of basics only (:func:`evaljobs.config.code_environment`): no key under any
  name, whatever the worker's environment holds;
* sees no other process: where the system allows unprivileged user namespaces, the child is started
  by ``unshare`` in a PID namespace of its own with its own ``/proc``, so the environments of the worker
  and of its parents (``/proc/PID/environ``) are out of its reach. Where it does not, the worker says
  so once in its log, and the child is an ordinary process of the worker's user (docs/security.md).
"""
from __future__ import annotations

import functools
import logging
import shutil
import subprocess
import tempfile

from evaljobs.config import code_environment

logger = logging.getLogger(__name__)

#: Why a catalog's code is refused where the operator has not opted in (``--allow-code``).
CODE_HINT = ("it is code the catalog carries, and this process runs a catalog's code only where its "
             "operator opted in: pass --allow-code (evaljobs run, worker, pool, catalog check) or set "
             "EVALJOBS_ALLOW_CODE=1; it then runs in a process that holds no secret (docs/security.md)")

#: A user namespace (no privilege needed) holding a PID namespace and a fresh /proc; the child dies
#: with ``unshare`` (a killed Node runner takes its code with it).
_UNSHARE = ("--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--kill-child")


@functools.lru_cache(maxsize=1)
def _prefix() -> tuple[str, ...]:
    tool = shutil.which("unshare")
    works = False
    if tool is not None:
        try:
            works = subprocess.run([tool, *_UNSHARE, "true"], capture_output=True, timeout=10, check=False,
                                   env=code_environment(tempfile.gettempdir())).returncode == 0
        except (OSError, subprocess.SubprocessError):
            works = False
    if not works:
        logger.warning("catalog code runs as an ordinary process of this user: `unshare` of a user and "
                       "PID namespace is not available here, so the code can read the environment of this "
                       "user's processes under /proc (docs/security.md, 'Code in catalogs')")
        return ()
    return (tool, *_UNSHARE) if tool else ()


def isolated(args: list[str]) -> list[str]:
    """``args`` as the command of a child that runs a catalog's code (in its own PID namespace if it can)."""
    return [*_prefix(), *args]


def is_isolated() -> bool:
    """Whether catalog code here runs in a PID namespace of its own."""
    return bool(_prefix())


__all__ = ["CODE_HINT", "is_isolated", "isolated"]
