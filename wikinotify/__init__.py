"""wikinotify: notifications for Flask wikis.

::

    from wikinotify import ModelHost, WikiNotify, blueprint

    notify = WikiNotify(host=ModelHost(user=User, page=Page, watch=Watch,
                                       page_url="/pages/{path}"))
    notify.init_app(app)
    app.register_blueprint(blueprint)            # at /_notifications
"""

from __future__ import annotations

from .blueprint import blueprint
from .categories import Category, CategoryError, Channels
from .config import ConfigError
from .extension import WikiNotify
from .host import ONE_SITE_ID, Host, SiteFacts, UserFacts
from .model_host import ModelHost

__all__ = [
    "Category",
    "CategoryError",
    "Channels",
    "ConfigError",
    "Host",
    "ModelHost",
    "ONE_SITE_ID",
    "SiteFacts",
    "UserFacts",
    "WikiNotify",
    "blueprint",
]
