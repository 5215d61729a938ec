"""A small synchronous client for the vLLM server's health, model list and runtime LoRA admin endpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx


class EngineError(RuntimeError):
    """The engine refused an admin request or could not be reached.

    Attributes:
        status_code: HTTP status of the refusal, None when the engine was unreachable.
    """

    def __init__(self, message: str, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code


class EngineClient:
    """Talks to one vLLM OpenAI server.

    Args:
        url: Base URL without `/v1`, e.g. http://127.0.0.1:8000.
        timeout_s: Per-request timeout; loading an adapter on a busy CPU engine can take seconds.
    """

    def __init__(self, url: str, timeout_s: float = 120.0):
        self.url = url.rstrip("/")
        # trust_env=False: the engine is a loopback service; a user's HTTP(S)_PROXY/ALL_PROXY must never route
        # its admin calls (adapter load/unload) off the machine.
        self._http = httpx.Client(base_url=self.url, timeout=timeout_s, trust_env=False)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def health(self) -> bool:
        """True when /health answers 200; never raises."""
        try:
            return self._http.get("/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def models(self) -> list[str]:
        """Names the server currently serves: the base model and every loaded adapter."""
        data = self._request("GET", "/v1/models", what="list models").json()
        return [entry["id"] for entry in data["data"]]

    def load_adapter(self, name: str, path: str | Path) -> None:
        """Load a PEFT LoRA adapter directory under `name` (requests then use model=name).

        Raises:
            EngineError: The engine refused (bad path, rank above --max-lora-rank, duplicate name, ...).
        """
        body = {"lora_name": name, "lora_path": str(path)}
        self._request("POST", "/v1/load_lora_adapter", json=body, what=f"load adapter {name!r} from {path}")

    def unload_adapter(self, name: str) -> None:
        """Unload the adapter `name`.

        Raises:
            EngineError: The engine refused, e.g. the name is not loaded.
        """
        body = {"lora_name": name}
        self._request("POST", "/v1/unload_lora_adapter", json=body, what=f"unload adapter {name!r}")

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a non-streaming /v1/chat/completions body and return the JSON reply."""
        return self._request("POST", "/v1/chat/completions", json=body, what="chat completion").json()

    def _request(self, method: str, path: str, *, what: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as err:
            raise EngineError(f"{what}: engine at {self.url} unreachable: {err}") from err
        if response.status_code >= 400:
            raise EngineError(
                f"{what}: engine answered {response.status_code}: {_error_text(response)}", response.status_code
            )
        return response


def _error_text(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text.strip()[:500]
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return str(data["error"].get("message", data["error"]))
    return str(data)[:500]
