"""Django's PostgreSQL backend with the pool's lean check (`core.pool_check`); settings: ENGINE `core.postgresql`."""
