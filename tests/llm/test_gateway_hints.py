"""With no inference service at all, the gateway's 404 and its empty model list say how to add one (issue 27, item 9);
once any service exists, the 404 is OpenAI's usual one."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.factories import make_tenant

from .gateway_env import external

HELLO = [{"role": "user", "content": "Hi"}]


def _models(gateway, key: str) -> httpx.Response:
    return httpx.get(f"{gateway.url}/models", headers={"authorization": f"Bearer {key}"}, timeout=10)


def test_no_service_at_all_the_404_and_the_empty_list_say_how_to_add_one(llm, gateway, acme_key, upstream):
    with pytest.raises(openai.NotFoundError) as caught:
        llm.chat.completions.create(model="tiny-chat", messages=HELLO)
    body = caught.value.body
    assert body["code"] == "model_not_found" and body["type"] == "invalid_request_error"
    assert "make models" in body["message"] and "/api/v1/inference-services/" in body["message"]
    assert "docs/inference-services.md" in body["message"]
    one = httpx.get(f"{gateway.url}/models/tiny-chat", headers={"authorization": f"Bearer {acme_key}"}, timeout=10)
    assert one.status_code == 404 and "make models" in one.json()["error"]["message"]

    listed = _models(gateway, acme_key)
    assert listed.status_code == 200 and listed.json() == {"object": "list", "data": []}  # OpenAI's shape, unchanged
    assert "make models" in listed.headers["x-gryvia-hint"]
    assert llm.models.list().data == []  # the official client reads it as before

    # Another tenant's service is not this tenant's: the hint stays.
    external(make_tenant("other"), "theirs", upstream.url)
    assert "make models" in _models(gateway, acme_key).headers.get("x-gryvia-hint", "")

    # Once a service this tenant can use exists (here a shared one), a missing model is the usual 404.
    external(None, "shared-chat", upstream.url)
    with pytest.raises(openai.NotFoundError) as caught:
        llm.chat.completions.create(model="tiny-chat", messages=HELLO)
    assert caught.value.body["message"] == "The model `tiny-chat` does not exist or you do not have access to it."
    listed = _models(gateway, acme_key)
    assert [m["id"] for m in listed.json()["data"]] == ["shared-chat"] and "x-gryvia-hint" not in listed.headers
