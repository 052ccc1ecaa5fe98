"""The HTTP API of queuestore (extra ``http``): task verbs, live events, a dashboard.

    queuestore serve --port 8000

or, in code, ``uvicorn`` on :func:`create_app`. See ``docs/howto/http-server.md``
and ``docs/reference/http-api.md``.
"""

from queuestore.http.app import create_app, serve
from queuestore.http.auth import Authenticator, StaticTokens, TokenVerifier

__all__ = ["Authenticator", "StaticTokens", "TokenVerifier", "create_app", "serve"]
