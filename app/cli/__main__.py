"""`python -m app.cli`: the `pt2serde` command."""

from app.cli import main

raise SystemExit(main())
