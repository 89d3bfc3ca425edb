"""What the shortcuts of the data path keep: a client made by ``sdk_client`` sends what ``anthropic.Anthropic``
sends and reads the CA bundle once per process; the data files parsed with libyaml's loader give the values
``yaml.safe_load`` gives; a record checked once is still refused when its text changes."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import anthropic
import pytest
import yaml

from agentlab.core import paths, sdk
from agentlab.core.paths import load_yaml
from agentlab.observatory.record_types import RecordError
from agentlab.observatory.records import OBSERVED_DIR, read_record
from wire import MessagesServer, message, ok, text

DATA = Path(paths.data_dir())


def test_a_client_of_sdk_client_sends_what_the_sdks_own_client_sends() -> None:
    """The same body and the same headers, but for the ones that differ between any two requests."""
    server = MessagesServer([ok(message([text("hi")])), ok(message([text("hi")]))])
    try:
        ours = sdk.sdk_client(base_url=server.url, api_key="x", max_retries=0)
        own = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
        assert ours.timeout == own.timeout and ours.max_retries == own.max_retries
        for client in (ours, own):
            client.messages.create(model="claude-sonnet-4-6", max_tokens=64,
                                   messages=[{"role": "user", "content": "hi"}])
    finally:
        server.close()
    a, b = server.seen
    varying = {"x-stainless-retry-count", "x-stainless-read-timeout", "idempotency-key", "x-stainless-timeout"}
    assert a.body == b.body
    assert {k: v for k, v in a.headers.items() if k not in varying} == \
        {k: v for k, v in b.headers.items() if k not in varying}


def test_sdk_client_builds_the_tls_settings_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx2

    assert issubclass(anthropic.DefaultHttpxClient, httpx2.Client)   # the library whose TLS settings are made
    sdk._tls_context.cache_clear()
    made: list[ssl.SSLContext] = []
    original = httpx2.create_ssl_context
    monkeypatch.setattr(httpx2, "create_ssl_context", lambda *a, **k: made.append(original(*a, **k)) or made[-1])
    clients = [sdk.sdk_client(api_key="x"), sdk.sdk_client(api_key="x"), sdk.sdk_client(asynchronous=True, api_key="x")]
    assert len(made) == 1 and isinstance(clients[2], anthropic.AsyncAnthropic)
    assert all(c._client is not clients[0]._client for c in clients[1:])   # a connection pool each
    sdk._tls_context.cache_clear()


@pytest.mark.parametrize("name", ["observed/lesson_claims.yaml", "observed/claims.yaml", "models.yaml",
                                  "prices.yaml"])
def test_the_data_files_read_as_safe_load_reads_them(name: str) -> None:
    text = (DATA / name).read_text(encoding="utf-8")
    assert load_yaml(text) == yaml.safe_load(text)


def test_load_yaml_refuses_what_safe_load_refuses() -> None:
    with pytest.raises(yaml.YAMLError):
        load_yaml("!!python/object:os.system {}")
    with pytest.raises(yaml.YAMLError):
        load_yaml("a: [1, 2\n")


def test_a_record_read_once_is_checked_again_when_its_text_changes(tmp_path: Path) -> None:
    good = next(OBSERVED_DIR.glob("*/*/*.json"))
    copy = tmp_path / "r.json"
    copy.write_bytes(good.read_bytes())
    assert read_record(copy) == read_record(good)
    data = json.loads(good.read_text(encoding="utf-8"))
    data["requests"] = "not a list"
    copy.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(RecordError, match=r"r\.json: requests"):
        read_record(copy)
    first, second = read_record(good), read_record(good)
    assert first == second and first is not second   # new dicts each time: a caller may change its own
