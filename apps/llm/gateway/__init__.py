"""The OpenAI-compatible gateway under /v1/: async Django views behind their own lean ASGI handler (handler.py).

Per request: the key from the in-process key cache (keys.py), the route from the route cache (routes.py), limits
and the day's token quota reserved in one shared counter (quota.py), the upstream call made and relayed (proxy.py,
upstream.py, relay.py), the reservation settled to the real usage and one usage row queued for the batch writer
(ledger.py, meter.py), durably in Redis before the answer's last byte in the production profile
(shared_counters.py; recovery.py settles what a dead process left). No synchronous ORM call happens on a request:
caches reload in a worker thread when they expire or change.
"""
