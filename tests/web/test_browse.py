"""Browsing the market: text search over names, descriptions, tags and label names; filters;
sorts by the counters; pages; only what the key may see."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.db.models import ApiKey, Learnware, LearnwareStatus
from app.learnwares.browse import BrowseQuery, browse
from app.runtime import Runtime
from tests.web.conftest import Keys, sign_in


def add(runtime: Runtime, space_id: str, owner: str, name: str, **fields: Any) -> int:
    values: dict[str, Any] = {
        "status": LearnwareStatus.ready,
        "description": "",
        "tags": [],
        "task_type": "text-classification",
        "label_names": ["negative", "positive"],
        "model_format": "onnx",
        "license": "MIT",
        "manifest": {},
        "package_sha256": "0" * 64,
        "package_size": 1000,
        "validation_log": [],
        **fields,
    }
    with runtime.db.session() as session:
        key = session.scalars(select(ApiKey).where(ApiKey.name == owner)).one()
        row = Learnware(owner_id=key.id, name=name, space_id=space_id, **values)
        session.add(row)
        session.flush()
        return row.id


@pytest.fixture
def market(runtime: Runtime, keys: Keys, space: tuple[str, int]) -> dict[str, int]:
    sid = space[0]
    return {
        "sentiment": add(
            runtime,
            sid,
            "developer",
            "Movie sentiment",
            description="Reviews, good or bad.",
            tags=["reviews"],
            download_count=5,
            ranked_first_count=1,
        ),
        "spam": add(
            runtime,
            sid,
            "developer",
            "SMS filter",
            label_names=["ham", "spam"],
            model_format="peft-lora",
            base_model="all-MiniLM-L6-v2",
            license="Apache-2.0",
            download_count=1,
            ranked_first_count=7,
        ),
        "topics": add(
            runtime,
            sid,
            "developer2",
            "Question types",
            description="TREC 100%_coarse classes",
            label_names=["abbreviation", "entity", "description", "human", "location", "number"],
            tags=["questions", "trec"],
        ),
        "pending": add(runtime, sid, "developer2", "Not ready yet", status=LearnwareStatus.validating),
        "private": add(runtime, sid, "user2", "User2's fine-tune", private=True, label_names=["spam", "ham"]),
    }


def ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<article class="card" data-learnware="(\d+)"', html)]


def test_search_covers_names_descriptions_tags_and_label_names(
    client: TestClient, keys: Keys, market: dict[str, int]
) -> None:
    sign_in(client, keys.user)
    assert ids(client.get("/", params={"q": "sms"}).text) == [market["spam"]]  # name
    assert ids(client.get("/", params={"q": "bad"}).text) == [market["sentiment"]]  # description
    assert ids(client.get("/", params={"q": "trec"}).text) == [market["topics"]]  # tag
    assert ids(client.get("/", params={"q": "HAM"}).text) == [market["spam"]]  # label, any case
    assert ids(client.get("/", params={"q": "reviews good"}).text) == [market["sentiment"]]  # every word
    assert ids(client.get("/", params={"q": "100%_"}).text) == [
        market["topics"]
    ]  # LIKE's wildcards are literal
    assert ids(client.get("/", params={"q": "0%"}).text) == [market["topics"]]
    assert ids(client.get("/", params={"q": "xyz"}).text) == []
    everything = ids(client.get("/").text)
    assert market["pending"] not in everything and market["private"] not in everything  # not this key's


def test_filters(client: TestClient, keys: Keys, market: dict[str, int]) -> None:
    sign_in(client, keys.user)

    def found(**params: str) -> set[int]:
        response = client.get("/", params=params)
        assert response.status_code == 200, response.text
        return set(ids(response.text))

    assert found(model_format="peft-lora") == {market["spam"]}
    assert found(base_model="all-MiniLM-L6-v2") == {market["spam"]}
    assert found(license="MIT") == {market["sentiment"], market["topics"]}
    assert found(n_classes="6") == {market["topics"]}
    assert found(n_classes="2") == {market["sentiment"], market["spam"]}
    assert found(labels="Spam, ham") == {market["spam"]}
    assert found(labels="spam, positive") == set()
    with client.app.state.runtime.db.session() as session:  # type: ignore[attr-defined]
        developer2 = session.scalars(select(ApiKey).where(ApiKey.name == "developer2")).one().id
    assert found(owner=str(developer2)) == {market["topics"]}
    assert found(task_type="text-classification", sort="name") == {
        market["sentiment"],
        market["spam"],
        market["topics"],
    }


def test_bad_filters_are_named(client: TestClient, keys: Keys, market: dict[str, int]) -> None:
    sign_in(client, keys.user)
    response = client.get("/", params={"n_classes": "two", "sort": "best"})
    assert response.status_code == 422
    assert (
        'id="n_classes-error"' in response.text
        and "must be a whole number, not &#39;two&#39;" in response.text
    )
    assert "sort by one of newest, downloads, ranked_first, name" in response.text


def test_sorts_and_pages(
    runtime: Runtime, client: TestClient, keys: Keys, market: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    sign_in(client, keys.user)
    assert ids(client.get("/", params={"sort": "downloads"}).text)[:2] == [
        market["sentiment"],
        market["spam"],
    ]
    assert ids(client.get("/", params={"sort": "ranked_first"}).text)[:2] == [
        market["spam"],
        market["sentiment"],
    ]
    assert ids(client.get("/").text) == [market["topics"], market["spam"], market["sentiment"]]  # newest
    monkeypatch.setattr(runtime, "settings", runtime.settings.model_copy(update={"web_page_size": 2}))
    first = client.get("/", params={"sort": "name"})
    assert ids(first.text) == [market["sentiment"], market["topics"]]
    assert "Page 1 of 2" in first.text and 'href="/?sort=name&amp;page=2"' in first.text
    assert ids(client.get("/", params={"sort": "name", "page": "2"}).text) == [market["spam"]]
    assert ids(client.get("/", params={"sort": "name", "page": "9"}).text) == [market["spam"]]  # the last


def test_htmx_gets_the_results_alone(client: TestClient, keys: Keys, market: dict[str, int]) -> None:
    sign_in(client, keys.user)
    part = client.get("/", params={"q": "sms"}, headers={"HX-Request": "true", "HX-Target": "results"})
    assert "<html" not in part.text and ids(part.text) == [market["spam"]]


def test_owners_see_their_own_in_any_state(runtime: Runtime, keys: Keys, market: dict[str, int]) -> None:
    with runtime.db.session() as session:
        developer2 = session.scalars(select(ApiKey).where(ApiKey.name == "developer2")).one()
        mine = browse(session, developer2, BrowseQuery(mine=True))
        assert {r.id for r in mine.items} == {market["topics"], market["pending"]}
        admin = session.scalars(select(ApiKey).where(ApiKey.name == "admin")).one()
        assert browse(session, admin, BrowseQuery(q="fine-tune")).total == 1


def test_the_api_lists_with_the_same_search(client: TestClient, keys: Keys, market: dict[str, int]) -> None:
    def listed(**params: object) -> list[int]:
        response = client.get("/v1/learnwares", params=params, headers=keys.auth("user"))
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()["items"]]

    assert listed(q="ham") == [market["spam"]]  # label names, as on the page
    assert listed(label=["spam", "HAM"]) == [market["spam"]]
    assert listed(n_classes=6) == [market["topics"]]
    assert listed(tag="trec") == [market["topics"]] and listed(tag="tre") == []
    assert listed(sort="ranked_first")[:2] == [market["spam"], market["sentiment"]]
    assert listed(license="Apache-2.0", base_model="all-MiniLM-L6-v2") == [market["spam"]]
    page = client.get("/v1/learnwares", params={"limit": 2, "page": 5}, headers=keys.auth("user")).json()
    assert page["items"] == [] and page["pagination"] == {
        "total_count": 3,
        "page": 5,
        "limit": 2,
        "max_page": 2,
    }
    item = client.get(f"/v1/learnwares/{market['spam']}", headers=keys.auth("user")).json()
    assert (item["download_count"], item["ranked_first_count"], item["lineage"]) == (1, 7, None)
    bad = client.get("/v1/learnwares", params={"sort": "best"}, headers=keys.auth("user"))
    assert bad.status_code == 422 and "sort" in bad.json()["error"]["message"]


def test_the_spec_space_filter(
    client: TestClient, keys: Keys, runtime: Runtime, market: dict[str, int]
) -> None:
    from app.db.models import SpecSpaceRecord

    with runtime.db.session() as session:
        session.add(SpecSpaceRecord(id="pave-other-base", dim=8, config={}, description={}))
    other = add(runtime, "pave-other-base", "developer", "On another base")
    sign_in(client, keys.user)
    page = client.get("/").text
    assert '<option value="pave-other-base">' in page  # offered among the spaces in use
    assert ids(client.get("/", params={"space_id": "pave-other-base"}).text) == [other]
    default = set(ids(client.get("/", params={"space_id": runtime.default_space_id}).text))
    assert default == {market["sentiment"], market["spam"], market["topics"]}


def test_a_card_says_what_it_does_its_labels_format_size_and_status(
    client: TestClient, keys: Keys, market: dict[str, int]
) -> None:
    sign_in(client, keys.user)
    page = client.get("/", params={"q": "Movie"}).text
    card = page.split(f'<article class="card" data-learnware="{market["sentiment"]}">')[1].split(
        "</article>"
    )[0]
    assert f'href="/learnwares/{market["sentiment"]}">Movie sentiment</a>' in card
    assert "Reviews, good or bad." in card
    assert "<li>negative</li><li>positive</li>" in card
    assert "<dd>onnx</dd>" in card and "<dd>1000 B</dd>" in card
    assert 'class="badge status-ready">ready</span>' in card
    assert "<dt>Downloads</dt><dd>5</dd>" in card and "<dt>Ranked #1</dt><dd>1</dd>" in card
    assert "#reviews" in card
