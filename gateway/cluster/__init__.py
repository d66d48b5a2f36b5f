"""Scale-out: N gateway processes per machine behind one public port, machines joined through
Redis (``--workers``, ``--redis-url``, ``--advertise-url``).

- ``supervisor``: starts and restarts the workers, places new sessions (proxy to a local
  worker, 307 to another node's), routes session requests to their owners, aggregates
  ``/healthz`` and ``/metrics``, drains on SIGTERM;
- ``worker``: what a gateway process does when supervised (its load in ``/healthz``, its Redis
  heartbeat and session owner entries, trusted forwarded client addresses);
- ``directory``: the Redis keys and their TTLs; ``placement``: the node selector;
  ``proxy``: the streaming reverse proxy; ``metrics``: the supervisor's exposition.
"""
