"""Telling an endpoint's owner in-app that it was turned off, through the one pipeline:
an ``endpoint:disabled`` event in the outbox, fanned out like any other to the owner only
(:mod:`wikinotify.categories.endpoint_disabled`)."""

from __future__ import annotations

from urllib.parse import urlsplit

from sqlalchemy.orm import Session

from ..categories import endpoint_disabled
from ..emit import emit
from ..models import Endpoint, EndpointKind


def endpoint_disabled_notice(session: Session, endpoint: Endpoint, reason: str) -> None:
    """Emit the notice in ``session``'s transaction, so it exists exactly when the
    endpoint's disabling does. A site-wide endpoint has no owner to tell: Admin →
    Notifications shows it disabled, with the reason."""
    if endpoint.owner_id is None:
        return
    # The owner is shown the host, never the path or a chat target's token; a push
    # subscription, by its browser.
    shown_url = endpoint.url and endpoint.kind != EndpointKind.PUSH
    title = endpoint.description or (
        urlsplit(endpoint.url).hostname if shown_url and endpoint.url else endpoint.target_hint
    ) or ""
    emit(
        endpoint_disabled.KIND,
        site_id=None,
        snapshot={"title": title, "kind": endpoint.kind, "reason": reason},
        owner_id=endpoint.owner_id,
        endpoint_id=str(endpoint.id),
        key=f"endpoint-disabled:{endpoint.id}:{endpoint.updated_at.timestamp():.0f}",
    )
