"""Whether a host name or address is this machine's loopback (servers, launchers and
clusters stay there unless told otherwise)."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback_host"]


def is_loopback_host(host: str) -> bool:
    """``localhost``, or an IP address of the loopback range (``127.0.0.0/8``, ``::1``;
    brackets allowed).

    Example:
        >>> [is_loopback_host(h) for h in ("localhost", "127.0.0.2", "[::1]", "10.0.0.1")]
        [True, True, True, False]
    """
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
