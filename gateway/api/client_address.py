"""Who a request is from, for the rate limits: the TCP peer, or -- behind a trusted reverse
proxy -- the client that proxy names in ``X-Forwarded-For``.

``X-Forwarded-For`` is believed only from the addresses of ``--trusted-proxies`` (anyone can
send the header; believed from everyone, it would let every request pick its own bucket). The
header lists each hop's client left to right, each proxy appending the peer it saw; so the
client is the rightmost address that is not itself a trusted proxy.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from aiohttp import web


class TrustedProxies:
    def __init__(self, specs: Sequence[str] = ()) -> None:
        self._nets = [ipaddress.ip_network(s.strip(), strict=False) for s in specs if s.strip()]

    def __bool__(self) -> bool:
        return bool(self._nets)

    def __contains__(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address.strip())
        except ValueError:
            return False
        return any(ip in net for net in self._nets)

    def client_of(self, request: web.Request) -> str:
        peer = request.remote or "?"
        if not self._nets or peer not in self:
            return peer
        hops = [h.strip() for h in ",".join(request.headers.getall("X-Forwarded-For", ()))
                .split(",") if h.strip()]
        for hop in reversed(hops):
            if hop not in self:
                return hop if _is_ip(hop) else peer
        return peer


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
