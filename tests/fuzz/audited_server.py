"""The service under an audit hook: `python -m tests.fuzz.audited_server` serves app.main:app like
`pt2serde serve`, with tests.fuzz.audit_hook installed before the app is imported.

Kept free of test imports: the server process must import what `pt2serde serve` imports, no more
(torch above all). tests.fuzz.launch starts it.
"""

from __future__ import annotations

import tests.fuzz.audit_hook  # noqa: F401  (installs the hook before anything else is imported)


def main() -> None:
    """Serve app.main:app on the configured host and port."""
    import uvicorn

    from app.settings import Settings

    settings = Settings.from_env()
    uvicorn.run("app.main:app", host=settings.host, port=settings.port, log_level="warning")


if __name__ == "__main__":
    main()
