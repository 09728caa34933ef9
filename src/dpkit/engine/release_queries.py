"""Correlated-noise release inside the curator: range/CDF queries, marginals, synthetic data.

(Being built: see issue 5, part 4.) :class:`ReleaseQueries` is mixed into
:class:`dpkit.engine.curator.Curator`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReleaseQueries"]


class ReleaseQueries:
    """Curator methods that answer query families through :mod:`dpkit.release` strategies."""

    def _release_sql(self, query: str, **kwargs: Any) -> Any:
        """Answer ``query`` if it is one of the release forms; ``None`` otherwise."""
        return None
