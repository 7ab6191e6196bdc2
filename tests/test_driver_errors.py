"""A driver's own errors reach the application as BackendError naming the store, for every backend
(plugins included): on open, on every call, and for real servers that do not answer."""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

import mnemostore
from mnemostore.backends.memory import MemoryBackend
from mnemostore.core.protocol import PARAMS_KEY
from mnemostore.core.registry import registry

SECRET = "hunter2-in-the-driver-message"


class ExplodingOnOpen(MemoryBackend):
    name: ClassVar[str] = "exploding-open"
    schemes: ClassVar[tuple[str, ...]] = ("exploding-open",)

    def open(self) -> None:
        raise ConnectionRefusedError(f"could not connect with password={SECRET}")


class ExplodingOnCount(MemoryBackend):
    name: ClassVar[str] = "exploding-count"
    schemes: ClassVar[tuple[str, ...]] = ("exploding-count",)

    def count(self, kind: str, tenant: str | None, where: Any) -> int:
        raise OSError("the socket went away")


class ExplodingLater(MemoryBackend):
    """Opens fine; then its driver fails writing the first dimension, counting and closing."""

    name: ClassVar[str] = "exploding-later"
    schemes: ClassVar[tuple[str, ...]] = ("exploding-later",)

    def write_meta(self, key: str, value: Any) -> None:
        if key == PARAMS_KEY and value.get("dimension") is not None:
            raise TimeoutError("the server did not answer in time")
        super().write_meta(key, value)

    def count(self, kind: str, tenant: str | None, where: Any) -> int:
        raise KeyboardInterrupt

    def close(self) -> None:
        raise BrokenPipeError("the connection was already gone")


EXPLODING = (ExplodingOnOpen, ExplodingOnCount, ExplodingLater)


@pytest.fixture(autouse=True)
def exploding_backends() -> Iterator[None]:
    for cls in EXPLODING:
        registry.register(cls, replace=True)
    yield
    for cls in EXPLODING:
        registry.unregister(cls.name)


def test_a_plugin_whose_driver_fails_on_open_raises_backend_error_naming_the_store() -> None:
    with pytest.raises(mnemostore.BackendError) as caught:
        mnemostore.open(f"exploding-open://app:{SECRET}@host/x")
    message = str(caught.value)
    assert "exploding-open" in message and "exploding-open://app:***@host/x" in message
    assert SECRET not in message and isinstance(caught.value.__cause__, ConnectionRefusedError)


def test_a_driver_error_in_a_call_is_a_backend_error_and_the_store_stays_usable() -> None:
    with mnemostore.open("exploding-count://calls") as store:
        with pytest.raises(mnemostore.BackendError, match=r"exploding-count backend failed in count .*socket"):
            store.outcomes.count()
        assert store.outcomes.add(task_type="t", success=True).task_type == "t"


def test_driver_errors_after_open_are_backend_errors_and_interrupts_pass_untouched() -> None:
    """Core's own backend calls (settling the dimension, close) are wrapped like the collections';
    KeyboardInterrupt is not an error of the driver and reaches the caller as it was raised."""
    store = mnemostore.open("exploding-later://later")
    with pytest.raises(mnemostore.BackendError, match=r"failed in write_meta on exploding-later://later: Timeout"):
        store.embeddings.add(text="x", embedding=[1.0, 0.0])
    with pytest.raises(KeyboardInterrupt):
        store.outcomes.count()
    with pytest.raises(mnemostore.BackendError, match=r"failed in close .*BrokenPipeError") as caught:
        store.close()
    assert isinstance(caught.value.__cause__, BrokenPipeError) and store.closed
    store.close()  # closed once: a second close does nothing


@pytest.mark.parametrize("url", [
    f"qdrant+http://127.0.0.1:1?api_key={SECRET}",
    f"postgresql://app:{SECRET}@127.0.0.1:1/agents?connect_timeout=2",
    f"chroma+http://127.0.0.1:1?token={SECRET}",
])
def test_a_server_that_does_not_answer_is_a_backend_error_and_one_line_from_the_cli(url: str) -> None:
    scheme = url.split(":", 1)[0]
    pytest.importorskip({"qdrant+http": "qdrant_client", "postgresql": "psycopg", "chroma+http": "chromadb"}[scheme])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(mnemostore.BackendError) as caught:
            mnemostore.open(url)
    assert "127.0.0.1:1" in str(caught.value) and SECRET not in str(caught.value)
    done = subprocess.run([sys.executable, "-W", "ignore", "-m", "mnemostore", "info", url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr and SECRET not in done.stderr + done.stdout
    assert done.stderr.startswith("mnemostore: error: ") and "127.0.0.1:1" in done.stderr


def test_every_protocol_method_that_reaches_the_driver_is_wrapped_or_wrapped_by_its_caller() -> None:
    """A method added to the protocol must join DRIVER_CALLS (or be one whose caller wraps it, as
    the backend guide says), and every backend class, built-in or plugin, has them wrapped."""
    from mnemostore import Backend
    from mnemostore.core.protocol import DRIVER_CALLS

    wrapped_by_caller = {"exists", "open", "run_layout", "layout_sql", "capabilities_for"}
    methods = {name for name, value in vars(Backend).items()
               if not name.startswith("_") and callable(value) and not isinstance(value, type)}
    assert methods - wrapped_by_caller == set(DRIVER_CALLS)
    for cls in [Backend, *(registry.get(name) for name in ("memory", "sqlite", "file")), *EXPLODING]:
        for name in DRIVER_CALLS:
            method = getattr(cls, name)
            marks = ("__raises_backend_errors__", "__isabstractmethod__")
            assert any(getattr(method, mark, False) for mark in marks), (cls.__name__, name)
