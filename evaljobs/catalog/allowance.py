"""What a worker's operator allows a run's stored providers definition to make it do with its secrets.

A run submitted with ``--providers FILE`` carries that file's definition (variable names, never values),
and every worker evaluates the run with it. The submitter is not the worker's operator: without a rule, a
definition ``openai: {base_url: http://anywhere/v1}`` (the preset's ``OPENAI_API_KEY`` kept) or
``api_key_env: AWS_SECRET_ACCESS_KEY`` would make the worker send its own key wherever the submitter
likes. So a stored entry that reads a variable is honoured only when the worker allows it (invariant 20):

* every variable it reads — ``api_key_env`` (its own or the preset's it keeps), ``${NAME}`` in its
  ``base_url`` and ``headers`` — is one the worker's own providers (the presets and its own file) name,
  or one of ``EVALJOBS_ALLOWED_ENV``;
* each goes where the worker's own providers send it (``OPENAI_API_KEY`` to OpenAI's base URL, never to
  another preset's), an allowed variable to any of the worker's own base URLs, and any of them to an
  endpoint under ``EVALJOBS_ALLOWED_BASE_URLS``.

An entry that reads no variable sends nothing of the worker's, and is honoured as it is. The checks are
on base URLs and variable names only (a header's literal value is the submitter's, not a secret of the
worker's), and a variable the operator does not allow is never read. Domain code: no I/O.
"""
from __future__ import annotations

from typing import Any, Iterable, NamedTuple
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _root(url: str) -> tuple[str, str, int | None, str] | None:
    """``(scheme, host, port, path)`` of an http(s) URL, normalised for comparison; None otherwise."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme], parts.path.rstrip("/")


def shown(url: str) -> str:
    """``url`` without its user and password (what an error line may say of it)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()


def _under(url: str | None, roots: Iterable[str]) -> bool:
    """Whether ``url`` is one of ``roots`` or under one (same scheme, host and port; a path below)."""
    root = _root(url) if url else None
    if root is None:
        return False
    for allowed in roots:
        other = _root(allowed)
        if other is not None and other[:3] == root[:3] and (
                not other[3] or root[3] == other[3] or root[3].startswith(other[3] + "/")):
            return True
    return False


class Allowance(NamedTuple):
    """Where a worker sends which of its variables for a run's stored providers.

    ``own``: each variable the worker's own providers read, with the base URLs they send it to (a
    worker's ``OPENAI_API_KEY`` goes to OpenAI's URL, not to another preset's); ``base_urls`` and
    ``variables``: the operator's allow-lists (an allowed variable may go to any of the worker's own base
    URLs; any variable it reads may go to an allowed endpoint).
    """

    own: tuple[tuple[str, tuple[str, ...]], ...] = ()
    base_urls: tuple[str, ...] = ()
    variables: frozenset[str] = frozenset()

    @classmethod
    def of(cls, own: Iterable[tuple[str | None, str | None]], allowed_urls: Iterable[str] = (),
           allowed_variables: Iterable[str] = ()) -> Allowance:
        """From the worker's own ``(variable, base URL)`` pairs and the operator's allow-lists."""
        urls: dict[str, dict[str, None]] = {}
        for name, url in own:
            if name:
                urls.setdefault(name, {})
                if url:
                    urls[name][url] = None
        return cls(tuple(sorted((name, tuple(found)) for name, found in urls.items())),
                   tuple(dict.fromkeys(allowed_urls)), frozenset(allowed_variables))

    @property
    def readable(self) -> frozenset[str]:
        """The variables a stored definition may read here."""
        return frozenset(name for name, _ in self.own) | self.variables

    def sends(self, name: str, url: str | None) -> bool:
        """Whether the worker may send its variable ``name`` to ``url``."""
        if _under(url, self.base_urls):
            return True
        if name in self.variables:
            return _under(url, [u for _, urls in self.own for u in urls])
        return _under(url, next((urls for own, urls in self.own if own == name), ()))

    def refusal(self, where: str, variables: Iterable[str], base_url: str | None) -> str | None:
        """Why an entry reading ``variables`` at ``base_url`` is not honoured here (one line), or None.
        ``base_url`` None: only which variables it may read is checked (before any is read)."""
        names = sorted(set(variables))
        unknown = [name for name in names if name not in self.readable]
        if unknown:
            return (f"{where} reads {', '.join(unknown)}, which this worker's operator does not allow "
                    "(only variables its own providers file and the presets name, or EVALJOBS_ALLOWED_ENV "
                    "/ `evaljobs worker --allow-env NAME`); nothing was sent")
        if base_url is None:
            return None
        sent = [name for name in names if not self.sends(name, base_url)]
        if sent:
            return (f"{where} would send this worker's {', '.join(sent)} to "
                    f"{shown(base_url) if base_url else 'no base URL'}, which its "
                    "operator does not allow (a key goes only where the worker's own providers file and "
                    "the presets send it, or to EVALJOBS_ALLOWED_BASE_URLS / `evaljobs worker "
                    "--allow-endpoint URL`); nothing was sent")
        return None


def entry_variables(entry: Any, inherited_key_env: str | None, references: Any) -> set[str]:
    """The variables a providers-file entry reads: its ``api_key_env`` (else the inherited one) and each
    ``${NAME}`` in its ``base_url`` and ``headers`` (``references``: the ``${NAME}`` pattern)."""
    entry = entry if isinstance(entry, dict) else {}
    names: set[str] = set()
    key_env = entry["api_key_env"] if "api_key_env" in entry else inherited_key_env
    if isinstance(key_env, str) and key_env:
        names.add(key_env)
    texts = [entry.get("base_url")]
    headers = entry.get("headers")
    if isinstance(headers, dict):
        texts += list(headers.values())
    for text in texts:
        if isinstance(text, str):
            names.update(references.findall(text))
    return names


__all__ = ["Allowance", "entry_variables", "shown"]
