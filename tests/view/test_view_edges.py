"""Viewer edges (issue 29 item 8), over real HTTP against ``evaljobs view``:

* scenario keys with a path part a browser resolves (``..``, ``../etc``, ``z/../victim``) are
  refused when the catalog is checked, so no link can land on another page;
* a token holding a space or ``;`` logs in with ``?token=`` (the cookie carries a digest, which
  needs no quoting);
* after a login the redirect stays on the site (``//evil.example/`` is another host to a browser).
"""
from __future__ import annotations

import socket
from urllib.parse import quote

import httpx
import pytest
from helpers import Viewer

from evaljobs import store
from evaljobs.catalog import CatalogError, loads_catalog
from evaljobs.view import url_of
from evaljobs.view.config import ViewConfig


@pytest.mark.parametrize("key", ["..", "../etc", "z/../victim", "./a", "a//b", "/a", "a/"])
def test_a_scenario_key_a_browser_would_resolve_elsewhere_is_one_catalog_line(cli, key, tmp_path):
    path = tmp_path / "keys.yaml"
    path.write_text(f'name: keys\nscenarios:\n  - key: "{key}"\n    prompt: hi\n', encoding="utf-8")
    result = cli("catalog", "check", str(path))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "keys.yaml:3" in lines[0] and f"key '{key}' has an empty, '.' or '..' part" in lines[0]


def test_keys_with_slashes_and_dots_inside_parts_stay_valid():
    cat = loads_catalog('name: k\nscenarios:\n  - {key: "orders/late.v2", prompt: hi}\n'
                        '  - {key: "a.../b", prompt: hi}\n', source="k.yaml")
    assert sorted(s.key for s in cat.scenarios) == ["a.../b", "orders/late.v2"]
    with pytest.raises(CatalogError):
        loads_catalog('name: k\nscenarios:\n  - {key: "z/../victim", prompt: hi}\n', source="k.yaml")


def test_imported_keys_never_carry_a_dot_segment():
    from evaljobs.catalog.importers.shared import key_part

    assert key_part("../etc") == "etc" and key_part("z/../victim") == "z/victim" and key_part("..") == "-"
    assert key_part("orders/late") == "orders/late"


@pytest.fixture
def viewed(tmp_path):
    db_url = f"sqlite:///{tmp_path}/evaljobs.db"
    store.connect(db_url)
    return db_url


def raw_get(port: int, target: str, headers: str = "") -> str:
    """One HTTP/1.1 request with ``target`` exactly as written (no client normalises it)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}Connection: close\r\n\r\n"
                     .encode("latin-1"))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data.decode("latin-1")


@pytest.mark.parametrize("token", ["has space", "semi;colon", 'quote"and,comma', "caf\u00e9 \u2615"])
def test_a_token_with_any_character_logs_in_with_token_and_the_cookie_it_sets(token, viewed, tmp_path):
    viewer = Viewer(viewed, "memory", tmp_path / "view.log", extra=["--token", token])
    try:
        login = url_of(ViewConfig(token=token, host="127.0.0.1", port=viewer.port), with_token=True)
        with httpx.Client(follow_redirects=False) as client:
            first = client.get(login.replace("/?", "/compare?a=x&"))
            assert first.status_code == 303 and first.headers["location"] == "/compare?a=x"
            cookie = first.headers["set-cookie"].split(";")[0]
            assert token not in first.headers["set-cookie"]  # the cookie carries a digest, not the secret
            page = client.get(f"{viewer.url}/", headers={"cookie": cookie})
            assert page.status_code == 200 and "Runs" in page.text
            assert (
                client.get(f"{viewer.url}/", headers={"cookie": "evaljobs_view=" + quote(token)}).status_code
                == 401
            )
    finally:
        viewer.close()


@pytest.mark.parametrize("target, location", [
    ("//evil.example/?token=T0k", "/evil.example/"),
    ("///evil.example/x?token=T0k&a=1", "/evil.example/x?a=1"),
    ("/\\evil.example/?token=T0k", "/evil.example/"),
    ("/runs?token=T0k", "/runs"),
])
def test_after_a_login_the_redirect_stays_on_the_site(target, location, viewed, tmp_path):
    viewer = Viewer(viewed, "memory", tmp_path / "view.log", extra=["--token", "T0k"])
    try:
        response = raw_get(viewer.port, target)
    finally:
        viewer.close()
    status = response.split("\r\n", 1)[0]
    headers = dict(line.split(": ", 1) for line in response.split("\r\n\r\n")[0].split("\r\n")[1:])
    assert " 303 " in status, response[:500]
    assert headers["location"] == location
