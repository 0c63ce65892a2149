"""acme_host — an example evaljobs host.

A host keeps a publishing domain in a thread-local (``with
publishing_domain("acme"): …``) and plugs an adapter into evaljobs that
needs it. Two entry points wire it in, with no change to evaljobs:

* ``evaljobs.context_providers``: ``publishing_domain`` (:mod:`acme_host.context`)
  carries the domain from the thread that starts a run to every worker thread;
* ``evaljobs.adapters``: ``acme`` (:class:`acme_host.adapter.DomainAdapter`).
"""
from .domain import (
    DOMAIN,
    NoPublishingDomain,
    PublishingDomain,
    current_domain,
    publishing_domain,
    require_domain,
)

__all__ = ["DOMAIN", "NoPublishingDomain", "PublishingDomain", "current_domain", "publishing_domain",
           "require_domain"]
