"""The checks every request passes before the application sees it: ``Host`` (against DNS
rebinding), cross-site browser requests, the bearer token, and a POST body's type.

Why: a page on any site can make a browser send a "simple" request (no preflight) to a
server on localhost, and a DNS-rebinding page can even read the answers. Browsers say
where a request comes from (``Sec-Fetch-Site``, ``Origin``) and what the body is
(``Content-Type``; a simple request can only say ``text/plain``, a form type or nothing
with a blob body, and the latter always with ``Origin``). Non-browser clients send
neither ``Origin`` nor ``Sec-Fetch-Site``, so they are unaffected.
"""

from __future__ import annotations

import hmac

from reprise.serve._http import HTTPError, Scope
from reprise.serve._settings import Settings

__all__ = ["OPEN_PATHS", "Gate"]

# the health probes: no token, no Host check (a kubelet sends the pod's address)
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/v2/health/live", "/v2/health/ready"})
_BODY_TYPES = (b"application/json", b"application/octet-stream")
_SAME = (b"same-origin", b"none")  # Sec-Fetch-Site values of a request not from another site


class Gate:
    """The request checks of one server: :meth:`check` raises :class:`HTTPError`."""

    def __init__(self, settings: Settings, token: str | None) -> None:
        self._token = token.encode() if token else None
        self._hosts = frozenset(settings.allowed_hosts)
        self._origins = frozenset(o.encode() for o in settings.allowed_origins)

    def check(self, scope: Scope) -> None:
        """Host, site and token of any request but a health probe, in that order."""
        if scope["path"] in OPEN_PATHS:
            return
        authorization: list[bytes] = []
        host = origin = site = None
        for key, value in scope["headers"]:
            if key == b"authorization":
                authorization.append(value)
            elif key == b"host":
                host = value
            elif key == b"origin":
                origin = value
            elif key == b"sec-fetch-site":
                site = value
        if self._hosts and _hostname(host) not in self._hosts:
            raise HTTPError(400, "the Host header names a host this server does not answer "
                            "for; add it with --allowed-host", kind="bad_host")
        if _cross_site(site, origin, host) and origin not in self._origins:
            raise HTTPError(403, "cross-site requests are refused (a page of another site "
                            "sent this); allow its origin with --allowed-origin",
                            kind="cross_site")
        self._authorize(authorization)

    def _authorize(self, values: list[bytes]) -> None:
        if len(values) > 1:
            raise HTTPError(400, "the request has more than one Authorization header; send "
                            "one", kind="bad_request")
        if self._token is None:
            return
        scheme, _, credentials = values[0].partition(b" ") if values else (b"", b"", b"")
        # the scheme is case-insensitive (RFC 7235); compare_digest: the time taken does
        # not tell how much of the token was right
        right = hmac.compare_digest(credentials.strip(b" "), self._token)
        if not (right and scheme.lower() == b"bearer"):
            raise HTTPError(401, "missing or wrong bearer token; send the header "
                            "'Authorization: Bearer <token>'", kind="unauthorized",
                            headers=[(b"www-authenticate", b"Bearer")])


def check_body_type(scope: Scope) -> None:
    """415 unless a POST body is JSON or the protocol's binary type. No Content-Type at
    all is accepted: tritonclient sends none, and a browser that sends none (a blob body)
    also sends ``Origin``, which :class:`Gate` checks."""
    for key, value in scope["headers"]:
        if key == b"content-type":
            if value.partition(b";")[0].strip().lower() not in _BODY_TYPES:
                raise HTTPError(415, "the body must be JSON: send 'Content-Type: "
                                "application/json' (or application/octet-stream with "
                                "Inference-Header-Content-Length for binary tensors)",
                                kind="unsupported_type")
            return


def _hostname(host: bytes | None) -> str | None:
    """``Host`` without its port, lower case (``[::1]:8000`` -> ``::1``)."""
    if host is None:
        return None
    text = host.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1:text.find("]")] if "]" in text else text
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text


def _cross_site(site: bytes | None, origin: bytes | None, host: bytes | None) -> bool:
    if site is not None:
        return site.strip().lower() not in _SAME
    if origin is None:
        return False  # not a browser, or a same-origin GET from an old one
    # an older browser: the Origin's host[:port] must be the Host asked for
    return origin.partition(b"://")[2].lower() != (host or b"").lower()
