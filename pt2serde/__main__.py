"""`python -m pt2serde` and the `pt2serde` command: app.cli's main, found through this package
so that it checks which `app` and `schema` Python finds."""

from app.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
