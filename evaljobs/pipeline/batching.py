"""Batch runs: pairs' provider calls collected into provider batches, submitted once, polled by delayed
messages.

How a batch run moves (``evaljobs run --batch``, or ``batch: true|auto`` in the providers file):

1. A pair is evaluated as usual, but its provider calls go to a :class:`StoreLane`
   (:class:`~evaljobs.providers.batched.BatchingClient`): a turn the store has no answer for is
   *parked* — one ``batch_request`` row per pair-turn, keyed by a deterministic custom id — and the
   pair stops (:class:`~evaljobs.pipeline.pairs.Parked`). No thread waits.
2. :func:`collect` (the ``collect_batch`` actor, per run, provider and model) claims up to
   ``Settings.batch_size`` parked requests once that many wait or the oldest has waited
   ``Settings.batch_wait``: the ``provider_batch`` row and the claim are committed, *then* the batch
   is submitted under the row's key, *then* the provider's batch id is committed. A crash between
   the submit and that commit leaves a ``submitting`` row: :func:`resolve` asks the provider for the
   batch under that key (:meth:`BatchClient.find`) and submits only when the provider has none.
3. :func:`poll` (the ``poll_batch`` actor) looks at an open batch and sends itself again, delayed by
   ``Settings.batch_poll``, until it ends; a batch open past ``Settings.batch_deadline`` is
   cancelled once, and abandoned ``Settings.batch_cancel_grace`` later if it ignores the cancel;
   polls failing past the deadline end it too. Then its result file, streamed to a temporary file,
   is read a line at a time (a bad or oversized line is its own request's error), the answers (or
   errors: ``batch_expired``, the provider's own) are committed a few hundred at a time, the batch
   is ended in one transaction, and its pairs are sent again: each replays its conversation, its
   answered turns now come from the store, and it is graded and recorded like any pair (the
   barrier, the report) — or parks its next turn (a tool conversation goes in rounds).

This module sends messages through the sender the actors bind (:func:`bind_sender`): it sits
below them. That binding and the choice of which providers a run batches are
:mod:`evaljobs.pipeline.batch_choice` (named here too): every run makes them, and a run that batches
nothing does not load this module (the provider batch clients, the store's batch tables).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import datetime, timezone
from typing import Any

from evaljobs import config, store
from evaljobs.pipeline.batch_choice import Sender, batch_providers, bind_sender, choose, choose_judge, sender
from evaljobs.pipeline.run_providers import stored_providers
from evaljobs.providers import batches as api
from evaljobs.providers import (BatchRequest, ProviderError, RateLimited, TransientError, base_url_for,
                                current_pair, encode, request_from_json, request_json)
from evaljobs.store import batches as stored

logger = logging.getLogger("evaljobs.batching")

# -- the lane a batched pair's calls go to ------------------------------------------------------------


class StoreLane:
    """The store-backed :class:`~evaljobs.providers.batched.BatchLane` of a batch run."""

    def answer(self, custom_id: str) -> tuple[str, str] | None:
        return stored.answer(custom_id)

    def parked(self, custom_id: str) -> bool:
        return stored.parked(custom_id)

    def park(self, custom_id: str, provider: str, request: BatchRequest) -> None:
        pair = current_pair()
        if pair is None:
            raise RuntimeError("a batched call outside a pair")
        run_id, scenario_key, spec, epoch = pair
        turn = int(custom_id.rsplit("-t", 1)[1])
        count = stored.park(custom_id, run_id=run_id, provider=provider, model=request.model,
                            scenario_key=scenario_key, model_spec=spec, epoch=epoch, turn=turn,
                            body=request_json(request))
        if count is None:
            return  # parked before (a redelivered pair): its collector is on its way
        settings = config.settings()
        if count == 1 or count >= settings.batch_size:
            # The first of a group starts its wait; a full group goes now.
            sender().collect(run_id, provider, request.model, 0.0 if count >= settings.batch_size
                             else settings.batch_wait)


# -- collecting and submitting -------------------------------------------------------------------------


def client_for(run_id: str, provider: str) -> api.BatchClient:
    """A batch client for the provider entry ``provider`` of run ``run_id`` (a short-lived one: a few calls
    a batch), on the providers the run was submitted with: a worker started without its providers file
    submits, polls and cancels its batches as its interactive calls would."""
    providers = stored_providers((store.get_run(run_id).options or {}).get("providers"))
    entry = providers.get(provider)
    return api.BatchClient(base_url_for(providers, provider), api_key=entry.api_key, wire=entry.api,
                           api_version=entry.api_version, headers=entry.headers or None)


def collect(run_id: str, provider: str, model: str) -> None:
    """Submit the group's parked requests as batches: full ones now, the rest once the oldest has waited."""
    settings = config.settings()
    if store.get_run(run_id).status == "cancelled":
        return
    while True:
        count, oldest = stored.unclaimed(run_id, provider, model)
        if not count:
            return
        waited = _age(oldest)
        if count < settings.batch_size and waited < settings.batch_wait:
            sender().collect(run_id, provider, model, settings.batch_wait - waited)
            return
        claimed = stored.claim(run_id, provider, model, settings.batch_size)
        if claimed is None:
            return  # another collector took them
        key, requests = claimed
        submit(run_id, key, provider, requests)


def submit(run_id: str, key: str, provider: str, requests: list[tuple[str, str]]) -> None:
    """Send a claimed batch (its row is committed) and commit the provider's id; then start its poller.

    A refusal (a provider with no batch API, a bad key) ends the batch's requests with the reason,
    so their pairs end errored; a transient failure leaves the row ``submitting`` for the poller,
    which asks the provider before submitting again (the failed call may have created the batch) —
    a few times, backing off as an interactive call's retries do (:func:`_not_submitted`).
    """
    try:
        with client_for(run_id, provider) as client:
            status = client.submit([request_from_json(cid, body) for cid, body in requests], key=key)
    except Exception as exc:  # noqa: BLE001 - every failure ends in a decision, never a stuck batch
        _not_submitted(key, run_id, provider, exc, "submit")
        return
    stored.submitted(key, status.id, status.provider_status)
    logger.info("batch %s: %d requests submitted to %s as %s", key, len(requests), provider, status.id)
    sender().poll(key, config.settings().batch_poll)


def _not_submitted(key: str, run_id: str, provider: str, exc: BaseException, what: str) -> None:
    """A submit or lookup that failed: a refusal ends the batch now; a transient failure is tried again
    after a back-off (``EVALJOBS_MIN_BACKOFF`` doubling up to ``EVALJOBS_MAX_BACKOFF``), at most the
    provider's ``max_retries`` times (``EVALJOBS_MAX_RETRIES``), then ends it: a provider that cannot
    be reached (no server, no batch API at that address) errors the run's pairs within seconds instead
    of leaving a batch ``submitting`` for ever."""
    if not _transient(exc):
        verb = "refused" if what == "submit" else "lookup refused"
        fail(key, f"batch {verb} by provider {provider}: {_reason(exc)}")
        return
    settings = config.settings()
    providers = stored_providers((store.get_run(run_id).options or {}).get("providers"))
    retries = providers.get(provider).max_retries
    limit = settings.max_retries if retries is None else retries
    attempts = stored.failed_attempt(key)
    if attempts > limit:
        fail(key, f"batch not submitted: provider {provider} failed {attempts} times, last: {_reason(exc)}")
        return
    delay = min(settings.max_backoff, settings.min_backoff * 2 ** (attempts - 1))
    logger.warning("batch %s: %s failed (%s); the provider is asked again in %g s (%d of %d retries)", key,
                   what, _reason(exc), delay, attempts, limit)
    sender().poll(key, delay)


def resolve(key: str) -> None:
    """A batch committed as ``submitting`` with no provider id: a crash between submit and commit, or
    before the submit. Ask the provider which; submit only if it has no batch under ``key``."""
    info = stored.get(key)
    if info is None or info.state != stored.SUBMITTING:
        return
    requests = stored.requests_of(key)
    since = (info.created_at or datetime.now(timezone.utc)).timestamp()
    try:
        with client_for(info.run_id, info.provider) as client:
            found = client.find(key, [cid for cid, _ in requests], since=since)
    except Exception as exc:  # noqa: BLE001 - a lookup that fails is asked again, or ends the batch
        _not_submitted(key, info.run_id, info.provider, exc, "lookup")
        return
    if found == api.UNDECIDED:
        settings = config.settings()
        if _age(info.created_at) > settings.batch_deadline:
            fail(key, f"{_past_deadline(settings)}: provider {info.provider} still runs a batch that may "
                      "be this one, and no other was submitted")
            return
        sender().poll(key, settings.batch_poll)  # a candidate still runs: look again later
        return
    if found is None:
        submit(info.run_id, key, info.provider, requests)
        return
    stored.submitted(key, found, "found")
    logger.info("batch %s: found at the provider as %s (not submitted again)", key, found)
    sender().poll(key, 0.0)


# -- polling ---------------------------------------------------------------------------------------------


def poll(key: str) -> None:
    """Look at a batch: again later while open, its answers once ended. Every wait has an end: a batch
    open past the deadline is cancelled (once), one that ignores the cancel for the grace period is
    abandoned, and a poll or download failing past the deadline ends it — each with the reason."""
    info = stored.get(key)
    if info is None or info.state == stored.ENDED:
        return
    if info.state == stored.SUBMITTING:
        resolve(key)
        return
    settings = config.settings()
    with ExitStack() as stack:
        try:  # the provider's part: a failure here is the provider's (the store's own failures are retried)
            client = stack.enter_context(client_for(info.run_id, info.provider))
            status = client.status(str(info.provider_batch_id))
            items = (None if status.state == api.OPEN
                     else stack.enter_context(client.download(str(info.provider_batch_id), status)))
        except Exception as exc:  # noqa: BLE001 - every failure ends in a decision, never a lost poller
            _unreadable(key, info, exc, settings)
            return
        if items is None:
            _still_open(client, key, info, status, settings)
        else:
            _ended(key, info, status, items, settings)


def _unreadable(key: str, info: stored.BatchInfo, exc: BaseException, settings: config.Settings) -> None:
    """A poll or download that failed: refused, the batch ends now; transient, it is looked at again —
    until the batch deadline, which transient failures count against like an open batch does (a
    provider answering 500 to every poll was polled for ever)."""
    batch = f"batch {info.provider_batch_id}"
    if not _transient(exc):
        fail(key, f"{batch} unreadable at provider {info.provider}: {_reason(exc)}")
    elif _age(info.submitted_at) > settings.batch_deadline:
        _cancel_once(key, info, "its provider failing past the batch deadline")
        fail(key, f"{_past_deadline(settings)}; the provider's last answer: {_reason(exc)}")
    else:
        logger.warning("batch %s: poll failed (%s); polled again", key, _reason(exc))
        sender().poll(key, settings.batch_poll)


def _still_open(client: api.BatchClient, key: str, info: stored.BatchInfo, status: api.BatchStatus,
                settings: config.Settings) -> None:
    """An open batch: looked at again later; cancelled once past the deadline (or when its run was
    cancelled); abandoned once it ignored a cancel for the grace period (``EVALJOBS_BATCH_CANCEL_GRACE``,
    at most the deadline)."""
    stored.progressed(key, done=status.done, failed=status.failed, provider_status=status.provider_status)
    late = _age(info.submitted_at) > settings.batch_deadline
    asked = info.cancel_asked_at
    if asked is None and status.provider_status in ("cancelling", "canceling"):
        stored.cancel_asked(key)  # cancelled elsewhere (a console, another process): the grace runs now
        asked = datetime.now(timezone.utc)
    if asked is not None:
        grace = min(settings.batch_cancel_grace, settings.batch_deadline)
        if _age(asked) > grace:
            still = f"still {status.provider_status} {grace:g} s after the cancel request: abandoned"
            fail(key, f"{_past_deadline(settings)}; {still}" if late else f"batch_cancelled: {still}")
            return
    elif late:
        _cancel_once(key, info, f"open past the batch deadline ({settings.batch_deadline:g} s)", client)
    elif store.get_run(info.run_id).status == "cancelled":  # submitted while its run was cancelled
        _cancel_once(key, info, "its run was cancelled", client)
    sender().poll(key, settings.batch_poll)


def _cancel_once(key: str, info: stored.BatchInfo, why: str, client: api.BatchClient | None = None) -> None:
    """Ask the provider to cancel the batch, unless it was asked before (by any process); a cancel that
    fails is not sent again: the grace period ends the batch either way."""
    if not info.provider_batch_id or not stored.cancel_asked(key):
        return
    logger.warning("batch %s: %s; cancelled", key, why)
    try:
        if client is not None:
            client.cancel(info.provider_batch_id)
        else:
            with client_for(info.run_id, info.provider) as own:
                own.cancel(info.provider_batch_id)
    except Exception as exc:  # noqa: BLE001 - the grace period ends a batch whose cancel failed
        logger.warning("batch %s: cancel failed: %s", key, _reason(exc))


def _ended(key: str, info: stored.BatchInfo, status: api.BatchStatus, items: Iterator[api.BatchItem],
           settings: config.Settings) -> None:
    """Commit an ended batch's answers as its result file is read, and send its pairs on."""
    deadline = _age(info.submitted_at) > settings.batch_deadline
    expired = (_past_deadline(settings) if deadline
               else "batch_expired: the provider did not answer it within the completion window")
    unread: list[str] = []

    def answers() -> Iterator[tuple[str, bool, str]]:
        for item in items:
            if not item.custom_id:  # a line that could not be read and names no request
                unread.append(item.reason)
            elif item.outcome == api.SUCCEEDED and item.completion is not None:
                yield item.custom_id, True, encode(item.completion)
            elif item.outcome == api.EXPIRED or (item.outcome == api.CANCELLED and deadline):
                yield item.custom_id, False, expired
            else:
                yield item.custom_id, False, item.reason or item.outcome

    answered = stored.answer_requests(key, answers())
    missing = f"batch_error: the batch ended ({status.provider_status}) without a result for it"
    if unread:
        missing += f"; {len(unread)} result line(s) could not be read, the first: {unread[0]}"
    pairs = stored.end_batch(key, provider_status=status.provider_status, missing_reason=missing)
    logger.info("batch %s ended (%s): %d answers, %d pairs go on", key, status.provider_status, answered,
                len(pairs))
    sender().evaluate(info.run_id, pairs)


def fail(key: str, reason: str) -> None:
    """End a batch that cannot be submitted or read: its requests fail with ``reason``, its pairs go on
    (and end errored with it), so no pair waits for ever on a batch that will never answer."""
    info = stored.get(key)
    if info is None or info.state == stored.ENDED:
        return
    logger.warning("batch %s: %s", key, reason)
    pairs = stored.record_answers(key, {}, provider_status="failed", missing_reason=reason)
    sender().evaluate(info.run_id, pairs)


def _past_deadline(settings: config.Settings) -> str:
    return f"batch_expired: not answered within the batch deadline ({settings.batch_deadline:g} s)"


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, (TransientError, RateLimited))


def _reason(exc: BaseException) -> str:
    return exc.reason if isinstance(exc, ProviderError) else f"{type(exc).__name__}: {exc}"


def cancel_run(run_id: str) -> tuple[store.RunInfo, int]:
    """Cancel a pending or running run and its open batches at their providers (their pollers record
    what the providers still answer; the cancelled run's pairs are not evaluated). Returns the run
    and how many of its open batches have been asked to cancel (by this call, or by a batch's poller that
    saw the run cancelled first: which of them asks is a race, and the user's answer is the same)."""
    store.cancel(run_id)
    if not (store.get_run(run_id).options or {}).get("batch"):
        return store.get_run(run_id), 0
    asked = 0
    for info in stored.open_batches(run_id):
        if info.state != stored.OPEN or not info.provider_batch_id:
            continue
        if not stored.cancel_asked(info.key):
            asked += 1  # asked already (its poller, or an earlier cancel): its grace period runs
            continue
        try:
            with client_for(info.run_id, info.provider) as client:
                client.cancel(info.provider_batch_id)
            asked += 1
        except Exception as exc:  # noqa: BLE001 - one batch's refusal does not stop the others
            logger.warning("batch %s: cancel refused: %s", info.key, exc)
    return store.get_run(run_id), asked


def recover(run_id: str) -> dict[str, int]:
    """Restart a batch run's batch work after a crash: resolve or poll its open batches, collect its
    unclaimed requests. Idempotent; the pairs its batches carry are left to their pollers."""
    done = {"batches": 0, "groups": 0}
    for info in stored.open_batches(run_id):
        sender().poll(info.key, 0.0)
        done["batches"] += 1
    for provider, model in stored.unclaimed_groups(run_id):
        sender().collect(run_id, provider, model, 0.0)
        done["groups"] += 1
    return done


def _age(stamp: datetime | None) -> float:
    if stamp is None:
        return 0.0
    return max(0.0, time.time() - stamp.timestamp())


def describe(run_id: str) -> list[dict[str, Any]]:
    """The run's open batches for ``status``/``watch``: provider, model, size, counts, age."""
    return [{"key": b.key, "provider": b.provider, "model": b.model, "state": b.state, "size": b.size,
             "done": b.done, "failed": b.failed, "provider_status": b.provider_status,
             "age_s": round(_age(b.created_at), 1)} for b in stored.open_batches(run_id)]


__all__ = [
    "Sender",
    "StoreLane",
    "batch_providers",
    "bind_sender",
    "cancel_run",
    "choose",
    "choose_judge",
    "client_for",
    "collect",
    "describe",
    "fail",
    "poll",
    "recover",
    "resolve",
    "sender",
    "submit",
]
