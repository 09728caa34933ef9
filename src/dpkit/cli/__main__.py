"""``python -m dpkit.cli``: the same as the ``dpkit`` command."""

from dpkit.cli import main

main()
