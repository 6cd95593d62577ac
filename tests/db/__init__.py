"""Tests of the database layer: the schema is the migrations'."""
