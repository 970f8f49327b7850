"""Outbound channels: webhooks for machines and chat for people (docs/channels.md#webhooks).

Both ride the same delivery rows (:class:`wikinotify.models.Delivery`), leases and retry
classes (:mod:`.engine`), behind the same SSRF guard (:mod:`.ssrf`).
"""
