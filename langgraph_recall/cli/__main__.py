"""``python -m langgraph_recall.cli``: the same as the ``langgraph-recall`` console script."""

import sys

from ._commands import main

sys.exit(main())
