"""The market's search: text over names, descriptions, tags and label names; filters on every
card field; sort by newest, most downloaded or most often ranked first; pages.

Tags and label names are JSON lists. They are searched in SQL through each backend's own
table-valued JSON function (SQLite ``json_each``, PostgreSQL ``jsonb_array_elements_text``),
so a page of results never loads the whole table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from sqlalchemy import ColumnElement, Select, func, or_, select
from sqlalchemy.orm import Session

from app.db.models import ApiKey, Learnware, LearnwareStatus
from app.learnwares.repository import visible_to

Sort = Literal["newest", "downloads", "ranked_first", "name"]
SORTS: dict[str, str] = {
    "newest": "newest",
    "downloads": "most downloaded",
    "ranked_first": "most often ranked first",
    "name": "name",
}


@dataclass(frozen=True)
class BrowseQuery:
    """What a visitor asked for; empty fields do not filter."""

    q: str = ""
    task_type: str = ""
    model_format: str = ""
    base_model: str = ""
    space_id: str = ""
    n_classes: int | None = None
    labels: tuple[str, ...] = ()
    """Label names every result must have (case-insensitive)."""
    license: str = ""
    tag: str = ""
    """A tag every result must have (exactly)."""
    owner_id: int | None = None
    status: LearnwareStatus | None = None
    mine: bool = False
    sort: Sort = "newest"
    page: int = 1
    per_page: int = 12
    clamp: bool = True
    """A page past the last shows the last (pages); else it is empty (the API)."""


@dataclass(frozen=True)
class Facets:
    """The values the filters can take among the learnwares a key sees."""

    task_types: list[str] = field(default_factory=list)
    model_formats: list[str] = field(default_factory=list)
    base_models: list[str] = field(default_factory=list)
    space_ids: list[str] = field(default_factory=list)
    licenses: list[str] = field(default_factory=list)
    owners: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class BrowsePage:
    items: Sequence[Learnware]
    total: int
    page: int
    pages: int
    owners: dict[int, str]
    """Owner key id → the key's name, for the cards."""


def _elements(session: Session, column: object) -> object:
    """The JSON list ``column`` as a one-column table ``value`` (correlated to the outer row)."""
    name = "jsonb_array_elements_text" if _dialect(session) == "postgresql" else "json_each"
    return getattr(func, name)(column).table_valued("value")


def _dialect(session: Session) -> str:
    return session.get_bind().dialect.name


def _any_element(session: Session, column: object, predicate: object) -> ColumnElement[bool]:
    elements = _elements(session, column)
    test = predicate(func.lower(elements.c.value))  # type: ignore[attr-defined, operator]
    return select(1).select_from(elements).where(test).exists()  # type: ignore[arg-type]


def _any_element_exact(session: Session, column: object, value: str) -> ColumnElement[bool]:
    elements = _elements(session, column)
    return select(1).select_from(elements).where(elements.c.value == value).exists()  # type: ignore[arg-type, attr-defined]


def _json_length(session: Session, column: object) -> ColumnElement[int]:
    name = "jsonb_array_length" if _dialect(session) == "postgresql" else "json_array_length"
    return getattr(func, name)(column)  # type: ignore[no-any-return, unused-ignore]


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _filtered(session: Session, key: ApiKey, query: BrowseQuery) -> Select[Learnware]:
    stmt = select(Learnware).where(visible_to(key))
    if query.status is not None:
        stmt = stmt.where(Learnware.status == query.status)
    if query.mine:
        stmt = stmt.where(Learnware.owner_id == key.id)
    for column, value in (
        (Learnware.task_type, query.task_type),
        (Learnware.model_format, query.model_format),
        (Learnware.base_model, query.base_model),
        (Learnware.space_id, query.space_id),
        (Learnware.license, query.license),
    ):
        if value:
            stmt = stmt.where(column == value)
    if query.owner_id is not None:
        stmt = stmt.where(Learnware.owner_id == query.owner_id)
    if query.n_classes is not None:
        stmt = stmt.where(_json_length(session, Learnware.label_names) == query.n_classes)
    if query.tag:
        stmt = stmt.where(_any_element_exact(session, Learnware.tags, query.tag))
    for label in query.labels:
        wanted = label.strip().lower()
        stmt = stmt.where(_any_element(session, Learnware.label_names, lambda v, w=wanted: v == w))
    for word in query.q.lower().split():
        pattern = f"%{_escape_like(word)}%"

        def like(value: object, p: str = pattern) -> ColumnElement[bool]:
            return value.like(p, escape="\\")  # type: ignore[attr-defined]

        stmt = stmt.where(
            or_(
                like(func.lower(Learnware.name)),
                like(func.lower(Learnware.description)),
                _any_element(session, Learnware.tags, like),
                _any_element(session, Learnware.label_names, like),
            )
        )
    return stmt


_ORDER = {
    "newest": (Learnware.id.desc(),),
    "downloads": (Learnware.download_count.desc(), Learnware.id.desc()),
    "ranked_first": (Learnware.ranked_first_count.desc(), Learnware.id.desc()),
    "name": (func.lower(Learnware.name), Learnware.id),
}


def browse(session: Session, key: ApiKey, query: BrowseQuery) -> BrowsePage:
    """One page of the learnwares ``key`` may see that match ``query``, in its order."""
    stmt = _filtered(session, key, query)
    total = int(session.scalar(select(func.count()).select_from(stmt.subquery())) or 0)
    pages = max(1, -(-total // query.per_page))
    page = min(max(1, query.page), pages) if query.clamp else max(1, query.page)
    rows = session.scalars(
        stmt.order_by(*_ORDER[query.sort]).offset((page - 1) * query.per_page).limit(query.per_page)
    ).all()
    owner_ids = {r.owner_id for r in rows if r.owner_id is not None}
    owners = (
        dict(session.execute(select(ApiKey.id, ApiKey.name).where(ApiKey.id.in_(owner_ids))).tuples().all())
        if owner_ids
        else {}
    )
    return BrowsePage(items=rows, total=total, page=page, pages=pages, owners=owners)


def facets(session: Session, key: ApiKey) -> Facets:
    """Distinct values of each filter among the learnwares ``key`` sees."""

    def values(column: object) -> list[str]:
        stmt = select(column).distinct().where(visible_to(key), column.is_not(None))  # type: ignore[call-overload, attr-defined]
        return sorted(str(v) for v in session.scalars(stmt).all() if v)

    owners = session.execute(
        select(ApiKey.id, ApiKey.name)
        .where(ApiKey.id.in_(select(Learnware.owner_id).where(visible_to(key))))
        .order_by(ApiKey.name)
    ).tuples()
    return Facets(
        task_types=values(Learnware.task_type),
        model_formats=values(Learnware.model_format),
        base_models=values(Learnware.base_model),
        space_ids=values(Learnware.space_id),
        licenses=values(Learnware.license),
        owners=list(owners),
    )
