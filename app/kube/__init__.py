"""The only package that imports `kubernetes`: a small typed port with typed errors.

Public surface, by module (imported from where it lives, so importing the port never loads the client):
- `port`: `KubePort` (the Protocol `act` depends on), `EventSpec`, `CALLS` (what RBAC must grant);
- `errors`: `KubeError` and its meanings (`NotFoundError`, `ConflictError`, `TooManyRequestsError`, ...);
- `client`: `connect()` and `KubeClient`, the real port on `kubernetes.aio`, its calls by resource in
  `nodes`, `pods`, `events` and `custom_objects`, all sent through `transport` (pacing, retries; answers
  read by `responses`) after `names` refused what is not a Kubernetes name;
- `retries`: `RetryPolicy`; `ratelimit`: `TokenBucket`;
- `leader`: `LeaderElector`, one active replica through a Lease.
"""
