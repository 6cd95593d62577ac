"""The web pages' one router, included by the app factory."""

from __future__ import annotations

from fastapi import APIRouter

from app.web import developer, find, pages

router = APIRouter(include_in_schema=False)
for part in (pages.router, find.router, developer.router):
    router.include_router(part)
