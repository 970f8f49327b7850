"""What the tests share that is not a fixture: building the demo app, running its jobs, the
test databases, signing in, the demo wiki's rows, mail, servers on 127.0.0.1, browsers and
an in-memory host. Fixtures live in ``tests/conftest.py``; no test module imports another.
"""
