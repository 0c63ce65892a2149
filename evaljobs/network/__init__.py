"""What every outbound network exchange shares, below the provider client and the governor alike.

* :mod:`evaljobs.network.deadline`: the per-thread hard wall (the pair's deadline) on every connect,
  read and write, enforced by an httpcore network backend;
* :mod:`evaljobs.network.errors`: the typed failures of a provider call (``RateLimited``,
  ``TransientError``, ``PermanentError``), so retry policy is decided by type;
* :mod:`evaljobs.network.http_client`: httpx without its command-line client (start-up time).

Why a package of its own: the provider client (:mod:`evaljobs.providers`) asks the governor
(:mod:`evaljobs.governor`) for a permit, and the governor waits no longer than the pair's deadline and
reads a provider's ``Retry-After``. Both need the wall and the errors; kept in ``providers`` they made
the import graph's one upward edge (governor → providers → governor). Users keep importing the
names where they always did: :mod:`evaljobs.providers` re-exports ``deadline`` and the errors.
"""
