"""Outbound channels: webhooks for machines and chat for people (issue 12).

Both ride the same delivery rows (:class:`wikinotify.models.Delivery`), leases and retry
classes (:mod:`.engine`), behind the same SSRF guard (:mod:`.ssrf`).
"""
