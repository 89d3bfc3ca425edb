"""The SDK, imported with the garbage collector paused and what it made frozen afterwards.

Importing ``anthropic`` makes some 200 000 objects that live as long as the process (modules, classes, the
SDK's pydantic models). The collector, run again and again on the way, walks them and finds nothing to free,
and every full collection after that walks them again. So the collector is paused during the import, and then
everything alive is frozen (``gc.freeze()``): later collections skip it. Frozen objects are still freed by
reference counting; only a reference cycle among objects that existed at this import stays until
``gc.unfreeze()``. The import takes about a third less CPU, and each full collection of a run walks far less.
A caller that had turned the collector off finds it off. The loop and ``agentlab.lab`` import the SDK from
here, so a program that imports ``agentlab.core.loop`` directly gets the same.

``sdk_client()`` is also here: a client that talks HTTP, made without the 45-60 ms of CPU that building its TLS
settings again (reading the CA bundle) costs each time; ``agentlab grade`` makes one per graded scenario.
"""

from __future__ import annotations

import functools
import gc
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def collector_paused_then_frozen() -> Iterator[None]:
    """The collector off for the block, then everything alive frozen; a collector that was off stays off."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


with collector_paused_then_frozen():
    import anthropic
    import anthropic.types


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The TLS settings the SDK's HTTP client makes for itself (certifi's CA bundle, or SSL_CERT_FILE and
    SSL_CERT_DIR when set), made once per process by the HTTP library the SDK's client is built on (httpx2 in
    this SDK): an SSLContext is safe to share between clients and threads."""
    import importlib

    http = importlib.import_module(anthropic.DefaultHttpxClient.__mro__[1].__module__.partition(".")[0])
    context: ssl.SSLContext = http.create_ssl_context()
    return context


class _HttpClient(anthropic.DefaultHttpxClient):
    """The SDK's default HTTP client, closed when it is garbage, as the one the SDK makes itself is."""

    def __del__(self) -> None:
        if not self.is_closed:
            try:
                self.close()
            except Exception:
                pass


class _AsyncHttpClient(anthropic.DefaultAsyncHttpxClient):
    def __del__(self) -> None:
        if not self.is_closed:
            try:
                import asyncio

                asyncio.get_running_loop().create_task(self.aclose())
            except Exception:
                pass


def sdk_client(*, asynchronous: bool = False, **kwargs: Any) -> anthropic.Anthropic | anthropic.AsyncAnthropic:
    """``anthropic.Anthropic(**kwargs)`` (``AsyncAnthropic`` when ``asynchronous``) on the SDK's default HTTP
    client (its timeout, connection limits, redirects and keep-alive), whose TLS settings are made once per
    process. The requests are the same bytes; only the CA bundle is not read again for every client."""
    if "http_client" not in kwargs:
        kwargs["http_client"] = (_AsyncHttpClient if asynchronous else _HttpClient)(verify=_tls_context())
    return anthropic.AsyncAnthropic(**kwargs) if asynchronous else anthropic.Anthropic(**kwargs)


__all__ = ["anthropic", "collector_paused_then_frozen", "sdk_client"]
