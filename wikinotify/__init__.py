"""wikinotify: notifications for Flask wikis.

::

    from wikinotify import WikiNotify, blueprint

    notify = WikiNotify(host=MyWikiHost())
    notify.init_app(app)
    app.register_blueprint(blueprint)            # at /_notifications
"""

from __future__ import annotations

from .blueprint import blueprint
from .categories import Category, CategoryError, Channels
from .config import ConfigError
from .extension import WikiNotify
from .host import Host, SiteFacts, UserFacts

__all__ = [
    "Category",
    "CategoryError",
    "Channels",
    "ConfigError",
    "Host",
    "SiteFacts",
    "UserFacts",
    "WikiNotify",
    "blueprint",
]
