"""Admin-API helpers shared by the proxy dialect tests."""

from __future__ import annotations

from typing import Any

import httpx


def new_session(admin: httpx.Client, **spec: Any) -> str:
    """Register a training session (budget 10 unless overridden) and return its key."""
    resp = admin.post("/admin/sessions", json={"adapter": None, "purpose": "train", "max_requests": 10, **spec})
    assert resp.status_code == 201, resp.text
    return resp.json()["key"]


def trace(admin: httpx.Client, key: str) -> dict[str, Any]:
    """The session's rollout graph and training sequences."""
    resp = admin.get(f"/admin/sessions/{key}/trace")
    assert resp.status_code == 200, resp.text
    return resp.json()
