"""Client of the capture proxy's admin API: open a session per rollout, fetch its trace, end it."""

from __future__ import annotations

from typing import Any

import httpx


class ProxyAdminError(RuntimeError):
    """The proxy refused an admin call; the message carries its answer."""


class ProxyAdmin:
    """Talks to ``/admin/sessions`` with the admin bearer token.

    Args:
        url: Base URL of the proxy (``http://127.0.0.1:PORT``).
        token: The admin token the proxy was started with.
    """

    def __init__(self, url: str, token: str, timeout_s: float = 60.0):
        self.url = url.rstrip("/")
        # trust_env=False: the proxy is a loopback service; a user's HTTP(S)_PROXY/ALL_PROXY must never carry the
        # admin token off the machine.
        self._client = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s, trust_env=False
        )

    def create_session(
        self,
        *,
        adapter: str | None,
        purpose: str,
        max_requests: int,
        sampling: dict[str, Any] | None = None,
        client_model: str | None = None,
        safety: dict[str, Any] | None = None,
    ) -> str:
        """Register one rollout; returns the session key the harness uses as its API key.

        ``client_model`` is the model id the harness is configured with; the proxy lists it (beside the served
        adapter) on the model listing endpoints some harnesses probe. ``safety`` registers the session with the
        proxy's safety gate (see ``harness_rl.rollout.session.safety_spec``).
        """
        body: dict[str, Any] = {"adapter": adapter, "purpose": purpose, "max_requests": max_requests}
        if sampling:
            body["sampling"] = sampling
        if client_model:
            body["client_model"] = client_model
        if safety:
            body["safety"] = safety
        return self._call("POST", "/admin/sessions", json=body)["key"]

    def trace(self, key: str) -> dict[str, Any]:
        """The session's rollout graph and training sequences so far."""
        return self._call("GET", f"/admin/sessions/{key}/trace")

    def end_session(self, key: str) -> dict[str, Any]:
        """End the session (the proxy frees it) and return its final trace."""
        return self._call("DELETE", f"/admin/sessions/{key}")

    def close(self) -> None:
        self._client.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self._client.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise ProxyAdminError(f"{method} {path} -> {response.status_code}: {response.text[:500]}")
        return response.json()
