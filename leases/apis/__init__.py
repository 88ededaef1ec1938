"""The lease-aware API endpoints (SPEC §8), one module per resource; `urls` lists them for `api.urls`."""
