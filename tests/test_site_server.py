"""The site build's local server (memmath_site/thumbnails.py) prints no traceback when Chromium drops a request it no
longer needs, and still prints any other error."""

from __future__ import annotations

import http.server

from memmath_site.thumbnails import QuietServer


def test_a_dropped_request_prints_no_traceback_and_other_errors_still_do(capsys):
    server = QuietServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    try:
        try:
            raise BrokenPipeError(32, "Broken pipe")
        except BrokenPipeError:
            server.handle_error(None, ("127.0.0.1", 1))
        assert capsys.readouterr().err == ""
        try:
            raise ValueError("a handler's own bug")
        except ValueError:
            server.handle_error(None, ("127.0.0.1", 1))
        assert "ValueError: a handler's own bug" in capsys.readouterr().err
    finally:
        server.server_close()
