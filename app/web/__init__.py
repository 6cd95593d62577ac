"""The market on the web: server-rendered pages for users and developers.

Jinja2 templates and htmx (vendored in ``static/``), on the same service layer as the API: the
pages call the domain services in-process, never the dock's own HTTP API. A browser holds a
signed, httpOnly session cookie instead of the API key (``session``); every form carries a CSRF
token. ``router`` is the one thing the app factory includes.
"""
