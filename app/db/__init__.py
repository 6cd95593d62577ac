"""The dock's database: typed SQLAlchemy models, engine and sessions. Alembic makes the schema."""
