"""The codes the CLI and its HTTP client report themselves.

A failure the server answered with keeps the server's problem code (app/http/problems.py lists
those); these are the ones that arise on the client's side, so the server's catalogue, which is
what the service can answer, does not list them. A test keeps this table equal to the codes the
CLI and app/client.py use.
"""

from __future__ import annotations

from app.failure import ProblemCode

#: code -> what it means.
CODES: dict[ProblemCode, str] = {
    "server-unreachable": "The server cannot be reached, or answered without a problem body",
    "download-corrupt": "Downloaded bytes do not match the digest the server gave for them",
    "io-error": "A file cannot be read or written",
    "missing-extra": "The command needs an optional dependency (an extra) that is not installed",
}
