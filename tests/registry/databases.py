"""The two databases, for registry tests whose subject lives in the database (webhooks, search,
the CLI's curation commands), whichever store holds the blobs."""

from __future__ import annotations

import pytest

#: Parametrizes the `backend` fixture (and so `registry`) over SQLite and PostgreSQL only.
ON_DATABASES = pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
