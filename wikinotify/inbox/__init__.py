"""The inbox, the in-app channel's read side: its entries as their reader lists, counts,
reads and dismisses them (``entries``, re-exported here), as the pages, the API and the
mails show them (``presentation``), read when their page is viewed (``viewing``), kept as
long as retention says (``retention``), and pushed to open pages (``live``, with
``stream_places`` bounding each account's streams)."""

from __future__ import annotations

from .entries import (
    BADGE_CAP,
    MAX_CURSOR,
    MAX_ID,
    PAGE_SIZE,
    SUMMARIES_PER_STATEMENT,
    BadCursor,
    Filters,
    Page,
    Summary,
    TwinUnread,
    decode_cursor,
    dismiss,
    encode_cursor,
    has_unread_on_page,
    list_entries,
    list_with_pinned,
    mark_all_read,
    mark_page_read,
    mark_read,
    mark_seen,
    mark_unread,
    parse_id,
    summaries,
    summary,
    unseen_count,
)
from .read_marks import read_values

__all__ = [
    "BADGE_CAP",
    "MAX_CURSOR",
    "MAX_ID",
    "PAGE_SIZE",
    "SUMMARIES_PER_STATEMENT",
    "BadCursor",
    "Filters",
    "Page",
    "Summary",
    "TwinUnread",
    "decode_cursor",
    "dismiss",
    "encode_cursor",
    "has_unread_on_page",
    "list_entries",
    "list_with_pinned",
    "mark_all_read",
    "mark_page_read",
    "mark_read",
    "mark_seen",
    "mark_unread",
    "parse_id",
    "read_values",
    "summaries",
    "summary",
    "unseen_count",
]
