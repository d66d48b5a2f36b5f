"""What a supervisor tells each worker process it starts (one environment variable, JSON).

The worker's ordinary flags carry what any gateway can be given (``--port``,
``--session-id-prefix``, ``--advertise-url``, ``--workers 1``); this carries what only a
supervisor knows: the worker's id and node, the supervisor's pid (a worker whose supervisor is
gone drains and exits) and the token with which the supervisor's proxy vouches for the client
address it forwards (``X-Forwarded-For`` is believed only with it).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

ENV = "VOICE_GATEWAY_CLUSTER_WORKER"
#: The supervisor's proxy sends this header (with the token) on every request it forwards.
PROXY_HEADER = "X-Voice-Gateway-Proxy"


@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    worker: str  # cluster-wide worker id, e.g. "3f9a1cw0" (its session ids start "3f9a1cw0-")
    node: str  # the node (machine's supervisor) id
    node_url: str  # the node's public URL
    index: int  # 0..N-1 on its node
    token: str  # vouches for forwarded client addresses
    supervisor_pid: int

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> WorkerIdentity | None:
        raw = (os.environ if environ is None else environ).get(ENV)
        if not raw:
            return None
        try:
            data = json.loads(raw)
            return cls(
                worker=str(data["worker"]), node=str(data["node"]),
                node_url=str(data["node_url"]), index=int(data["index"]),
                token=str(data["token"]), supervisor_pid=int(data["supervisor_pid"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"error: {ENV} is malformed: {exc}") from None


def supervised() -> bool:
    """Whether this process is a worker started by a supervisor."""
    return bool(os.environ.get(ENV))
