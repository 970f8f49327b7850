"""The demo wiki's one :class:`~wikinotify.WikiNotify`, importable anywhere in the demo.

Created without a host, so importing it pulls in neither :mod:`demo.host` nor the app:
:func:`demo.create_app` hands it the host with ``notify.init_app(app, host=DemoHost())``.
"""

from __future__ import annotations

from wikinotify import WikiNotify

notify = WikiNotify()
