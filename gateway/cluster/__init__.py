"""Scale-out: N gateway processes per machine behind one public port, machines joined through
Redis (``--workers``, ``--redis-url``, ``--advertise-url``).

- ``supervisor``: the public port's process, a composition of ``processes`` (starts, restarts,
  polls and drains the workers), ``peers`` (the other nodes, through Redis), ``router`` (places
  new sessions: proxy to a local worker, 307 to another node's; routes session requests to
  their owners) and ``public_app`` (the routes, aggregated ``/healthz`` and ``/metrics``);
- ``worker``: what a gateway process does when supervised (its load in ``/healthz``, its Redis
  heartbeat and session owner entries, trusted forwarded client addresses);
- ``directory``: the Redis keys and their TTLs; ``placement``: the node selector;
  ``proxy``: the streaming reverse proxy; ``metrics``: the supervisor's exposition.
"""
