"""The API door's plumbing (SPEC §8): envelope, authentication, input, idempotent writes, schema, URLs.

Everything an API view needs that is not a business rule lives here; the
rules live in the apps' services. The endpoints themselves live in each
app's `apis/` package, one module per resource, and `api.urls` mounts them.
"""
