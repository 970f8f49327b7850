"""Signing in through the demo wiki's form, with or without its CSRF token."""

from __future__ import annotations

import re


def login(client, username: str, password: str = "password"):
    response = client.post("/login", data={"username": username, "password": password})
    assert response.status_code == 302, f"could not sign in as {username}"
    return response


def csrf_token(html: str) -> str:
    """The CSRF token a page's form carries."""
    return re.search(r'name="csrf_token"[^>]*value="([^"]+)"', html).group(1)


def login_with_csrf(client, username: str, password: str = "password"):
    """Sign in through the login form, token and all (for apps with CSRF on)."""
    token = csrf_token(client.get("/login").get_data(as_text=True))
    response = client.post(
        "/login", data={"username": username, "password": password, "csrf_token": token}
    )
    assert response.status_code == 302, f"could not sign in as {username}"
    return response


PREFERENCES = "/_notifications/api/preferences"


def full_map(client, **changes):
    """The caller's preferences as ``PUT /api/preferences`` takes them, read from its GET,
    with ``changes`` applied: ``{"mention": {"email": False}}``."""
    body = client.get(PREFERENCES).get_json()
    categories = {c["key"]: {"inApp": c["inApp"], "email": c["email"]} for c in body["categories"]}
    for key, channels in changes.items():
        categories[key].update(channels)
    return {"categories": categories}
