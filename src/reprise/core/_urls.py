"""URLs as they may be shown: a store URL's password never reaches a message or a log."""

from __future__ import annotations

import re

__all__ = ["redact_url"]

# query parameters that carry a secret (libpq's password/sslpassword, tokens, keys)
_SECRET_KEY = re.compile(r"(pass|secret|token|key)", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` with the password of its user part and the values of secret-looking
    query parameters replaced by ``***``; everything else (scheme, user, host, port,
    path) kept, so that the message still says which database it is. By hand rather
    than ``urllib.parse``/SQLAlchemy's ``make_url``: it must work on the malformed
    URLs that error messages are about (a bad port, a stray ``@``).

    Example:
        >>> redact_url("postgresql://u:s3cret@db:5432/reprise?password=x&sslmode=on")
        'postgresql://u:***@db:5432/reprise?password=***&sslmode=on'
        >>> redact_url("sqlite:///tmp/reprise.db")
        'sqlite:///tmp/reprise.db'
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0),
              default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:***@{host}" if colon else f"{user}@{host}"
    path, q, query = tail.partition("?")
    if q:
        query, hashmark, fragment = query.partition("#")
        pairs = []
        for pair in query.split("&"):
            key, eq, _ = pair.partition("=")
            pairs.append(f"{key}=***" if eq and _SECRET_KEY.search(key) else pair)
        tail = f"{path}?{'&'.join(pairs)}{hashmark}{fragment}"
    return f"{scheme}://{netloc}{tail}"
