"""A minimal wiki (pages, accounts, watching) that adopts wikinotify by the README's
steps alone; README.md here says how to run it. Its adoption is every statement that
names wikinotify or what came from it (tests/test_example_host.py counts them)."""

from flask import Flask, abort, redirect, request
from flask_login import LoginManager, current_user, login_required, login_user
from flask_migrate import Migrate
from flask_wtf import CSRFProtect
from werkzeug.security import check_password_hash

import wikinotify.migrations
from wikinotify import ModelHost, WikiNotify, blueprint

from .models import Page, User, Watch, db

# The wiki as wikinotify sees it, read from its models (Page.slug is the page's path).
host = ModelHost(user=User, page=Page, watch=Watch, page_url="/pages/{path}",
                 admin=User.is_admin)
notify = WikiNotify(host=host)
migrate = Migrate()
login_manager = LoginManager()


def create_app() -> Flask:
    app = Flask(__name__)
    app.config.update(SQLALCHEMY_DATABASE_URI="sqlite:///minimal_wiki.sqlite3")
    app.config["WIKINOTIFY_SITE_URL"] = "http://localhost:5000"  # links in mail
    app.config.from_prefixed_env()  # FLASK_SECRET_KEY, FLASK_WIKINOTIFY_REDIS_URL, ...
    db.init_app(app)
    migrate.init_app(app, db)
    wikinotify.migrations.init_app(app)  # wikinotify's tables come with `flask db upgrade`
    login_manager.init_app(app)
    CSRFProtect(app)
    notify.init_app(app)
    app.register_blueprint(blueprint)  # the inbox, preferences and API at /_notifications
    app.add_url_rule("/login", view_func=login, methods=["POST"])
    app.add_url_rule("/pages/<slug>", view_func=show_page)
    app.add_url_rule("/pages/<slug>", view_func=save_page, methods=["POST"])
    app.add_url_rule("/pages/<slug>/watch", view_func=watch_page, methods=["POST"])
    return app


login_manager.user_loader(lambda user_id: db.session.get(User, int(user_id)))


def login():
    user = db.session.scalar(db.select(User).filter_by(name=request.form["name"]))
    if user is None or not check_password_hash(user.password_hash, request.form["password"]):
        abort(401)
    login_user(user)
    return redirect("/_notifications/inbox")


@login_required
def show_page(slug: str):
    page = db.first_or_404(db.select(Page).filter_by(slug=slug))
    notify.mark_seen(current_user.id, page.id, section="page")  # clears what was seen
    db.session.commit()  # what wikinotify's mark_seen changed
    return {"title": page.title, "text": page.text}


@login_required
def save_page(slug: str):
    page = db.session.scalar(db.select(Page).filter_by(slug=slug))
    kind, variant = ("page:edit", "edited") if page else ("page:create", "created")
    page = page or Page(slug=slug)
    page.title, page.text = request.form["title"], request.form["text"]
    db.session.add(page)
    db.session.flush()  # the new page's id, for wikinotify's event
    notify.emit(kind, actor_id=current_user.id, page_id=page.id,
                snapshot=host.snapshot(page), variant=variant)
    db.session.commit()  # the page and its event, in one transaction
    return redirect(f"/pages/{slug}")


@login_required
def watch_page(slug: str):
    page = db.first_or_404(db.select(Page).filter_by(slug=slug))
    db.session.merge(Watch(user_id=current_user.id, page_id=page.id))
    db.session.commit()
    return redirect(f"/pages/{slug}")
