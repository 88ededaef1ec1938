"""Moving a project between servers (SPEC §17): `export.project_export` writes it, `importing.project_import` reads it.

Spans the three rooms' tables, so it lives in `leases`, the room that may import the other two.
"""
