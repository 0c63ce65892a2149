"""The provider governor: one shared, self-tuning concurrency budget per provider deployment.

A fan-out runs every (scenario x model) pair on many worker threads on many
machines, so the real ceiling is the provider's rate limit, not the worker
count: 33 calls at once against one key trip 429s. Before each provider call a
worker asks ``Governor.acquire(budget, lane)`` for a permit and afterwards
reports the outcome with ``Permit.release(...)``. The state lives in Redis and
every change is one Lua script timed by the Redis server clock (``TIME``), so
all workers on all machines share one budget without trusting their own clocks.

Choices, and why:

* **Permits are leases.** Each permit is a member of a sorted set scored by its
  expiry (``lease_seconds``, default 60). A worker killed mid-call never
  releases, and its slot comes back when the lease expires: a slot never leaks.
  Held permits are renewed every ``lease_seconds / 2`` by one background thread
  per ``Governor`` (``keep_alive=True``, the default; ``Permit.renew()`` by
  hand otherwise), so only a dead process loses its lease, never a slow call.
* **At the announced limit before the first 429.** Providers announce their limits in
  every answer (``x-ratelimit-limit-requests``; Anthropic's ``anthropic-ratelimit-*``
  reach the governor in the same names through its wire format). The announced request
  limit caps the budget's width (no more in flight than one window accepts), and a cold
  budget — nothing learned, no ``initial`` — lets one call go first (a *scout*) and
  opens at the limit its answer announces; an answer announcing nothing opens it where it
  would have started, and so does no answer within ``SCOUT_SECONDS``. One call's latency,
  once per budget, instead of a first wave of 429s.
* **Start at the width asked for; halve once per burst.** A budget nothing was
  learned for starts at ``initial`` if set, else (after its scout) at ``ceiling`` (64):
  the run goes as wide as its workers (the width the user asked for is the
  real bound; ``ceiling`` caps it). A 429, or a response saying the quota is spent
  (``x-ratelimit-remaining-requests: 0`` or ``...-tokens: 0``), halves the width
  *in use* (the limit, or the calls in flight when the 429 came back if fewer:
  halving an untested 64 would change nothing) **once per burst**: every
  permit carries the budget's *epoch*, a decrease bumps the epoch, and a 429 from
  a permit granted before the last decrease does not halve again (those calls
  were already in the air when we backed off). Below ``ssthresh`` each success
  adds one slot (slow start); above it, one slot per ``limit`` successes (additive
  increase). A success only counts when the budget is in use (at least half its
  slots in flight), so a lone sequential caller does not inflate a limit it never
  tested. Floor 1, ceiling ``ceiling``. When ``rpm``/``tpm`` are configured, slow
  start may jump straight to Little's law, ``0.85 x min(rpm/60 x latency, tpm/60/
  tokens x latency)``, from moving averages of reported latency and tokens per call.
* **What was learned is kept.** The state lives in Redis with no expiry, and a
  governor given a ``learned`` store (the pipeline binds the run's database, so
  the embedded SQLite default too) also keeps each budget's limit, ``ssthresh``
  and hold there: a decrease at once, growth at most once a second, the rest at
  ``close()``. A budget with no Redis state starts at what was learned (bounded
  by ``ceiling``), so the next run on the machine starts at the provider's limit.
* **Hold at the capacity a 429 showed.** Halving and then crawling back up one
  slot per round only to hit the same wall again (plain AIMD) wastes a third of
  a hard concurrency limit and trips a 429 every few rounds. So the burst's
  first 429 also records how many other calls of the budget were in flight when
  the provider refused (what it was serving; a later 429 of the same burst that
  saw fewer lowers it, and the limit with it: a provider refusing a 5th call
  sends back its twelve refusals of a width-16 start one by one, the last seeing
  only the 4 it serves): slow start climbs back to that level (``ssthresh``) at once, and
  there the increase waits ``HOLD_ROUNDS`` (16) times longer before probing one
  slot above it; a probe that finds the same capacity again doubles that wait
  (up to ``HOLD_ROUNDS_MAX``, 256 rounds), so a steady limit costs a probe
  ever more rarely. A 429 with fewer calls in flight than the halved limit (a
  per-minute quota, someone else's traffic) teaches nothing: plain AIMD.
* **Rate windows.** With ``rpm``/``tpm``, requests and tokens of the last 60 s
  are counted in one-second buckets; a call that would overflow them is not
  admitted until the oldest buckets leave the window. ``acquire(tokens=N)``
  reserves N tokens (else the moving average) and ``release(tokens=...)``
  corrects the count with what was really used.
* **Lanes.** ``interactive`` may use the whole limit and is served before queued
  bulk callers. ``bulk`` (evaluation runs, the default) may hold at most
  ``max(1, floor((1 - bulk_reserve) x limit))`` slots *while the interactive lane
  is in use*: an interactive call in flight or waiting, or one asked for within
  ``INTERACTIVE_RECENT`` (30 s). Otherwise bulk may use the whole limit: a reserve
  kept for a lane nobody uses only slows the run down (one of 4 slots idle). So a
  full bulk lane leaves an interactive caller its reserve from its second call on
  (its first is served as soon as a bulk slot frees, ahead of queued bulk callers).
* **Retry-After.** A 429 with a ``retry_after`` (``Retry-After`` and
  ``retry-after-ms`` arrive parsed as seconds), or a spent quota with a reset
  header, pauses the whole budget until then: no permit is granted before it.
* **Waiting never burns a worker.** A caller waits at most ``max_wait`` seconds
  (short: 2 s by default), in a FIFO queue per lane, sleeping between attempts
  with capped, jittered exponential backoff (or exactly until a pause or window
  ends); a release in the same process wakes the waiter whose turn it is at
  once (each denied waiter learns its place in line and sleeps until that
  many slots were freed here, so a release costs one Redis round trip, not one
  per waiting thread); a release elsewhere is seen at the next attempt: at the
  head of the line within a quarter of the expected wait (at most
  ``POLL_MAX``), further back about twice per expected wait. After
  ``max_wait`` it gets ``Busy(retry_in=...)`` and should re-enqueue its
  message with that delay instead of sleeping on a worker thread; a wait that
  is known to outlast ``max_wait`` (a long Retry-After) raises at once. The
  governor never touches the database. A wait that ends without a permit (Busy, an
  exception, an interrupt) removes its queue entry in ``finally``, and queue
  entries of a killed waiter expire within seconds: a cancelled wait holds no
  slot and no place.
* **Unbounded budgets.** ``unbounded: true`` (a provider with no limit to respect)
  makes ``acquire`` hand out permits that touch no store: no Redis round trip per
  call, nothing learned, nothing paused (the provider-call path skips it entirely).
* **Redis down.** On a connection error or timeout the governor logs ONE warning
  and carries on with a local, in-process, thread-safe governor with the same
  semantics (a per-process budget: the fleet may then exceed the shared limit
  until Redis is back). Redis is retried every ``reconnect_after`` seconds (30);
  an evaluation never fails because the governor's store is down.

Budget names: ``budget_key()`` maps a provider entry and model to a budget —
``provider:model`` by default, ``provider:*`` with ``budget_key: account``, or
any explicit string shared by several provider entries. LLM-judge calls simply
acquire from the judge model's budget.

The package, along those lines: :mod:`~.budgets` (settings, constants, budget names),
:mod:`~.control` (AIMD, Little's law, windows as pure functions), :mod:`~.permits`
(a permit, its outcome, the lease renewer), :mod:`~.redis_store` (the Lua scripts),
:mod:`~.local_store` (the same rules in memory) and :mod:`~.facade` (``Governor``).
"""
from __future__ import annotations

from evaljobs.governor.budgets import (DEFAULT_LATENCY, EWMA_ALPHA, HOLD_ROUNDS, HOLD_ROUNDS_MAX, LANES,
                                                 INTERACTIVE_RECENT, Learned, LearnedStore, start_of,
                                                 LITTLE_FACTOR, MAX_PAUSE, POLL_MAX, POLL_MIN, SLEEP_CAP,
                                                 WAITER_TTL, WINDOW_SECONDS, BudgetConfig, Busy, budget_key)
from evaljobs.governor import budgets
from evaljobs.governor.facade import Governor
from evaljobs.governor.permits import Permit

__all__ = ["Governor", "Permit", "budgets", "BudgetConfig", "Busy", "Learned", "LearnedStore", "start_of",
           "budget_key", "INTERACTIVE_RECENT", "LANES", "WINDOW_SECONDS", "POLL_MIN", "POLL_MAX", "SLEEP_CAP",
           "WAITER_TTL", "MAX_PAUSE", "EWMA_ALPHA", "HOLD_ROUNDS", "HOLD_ROUNDS_MAX", "LITTLE_FACTOR",
           "DEFAULT_LATENCY"]
