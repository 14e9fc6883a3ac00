"""What langgraph-recall reads of LangChain's and LangGraph's private names, and why.

``langchain_core.tools.base._format_output``: ``BaseTool.run``/``arun`` turn what the tool's
code returned into a ``ToolMessage`` there, after that code has returned; its text form is
``json.dumps``, then ``str()``, of the value. A value that neither can render (nested 100,000
deep: a ``RecursionError``) fails there, so the call raises although its effect happened. The
durable wrapper must tell that from a tool that raised: recorded "failed", the effect would
read as not made. Only the traceback says which it was.
"""

from __future__ import annotations

from types import CodeType, TracebackType

from langchain_core.tools import BaseTool

try:  # pragma: no cover - a private name; without it no failure reads as after the tool
    from langchain_core.tools.base import _format_output

    _FORMAT_CODE: CodeType | None = _format_output.__code__
except (ImportError, AttributeError):  # pragma: no cover
    _FORMAT_CODE = None

_RUN_CODES = frozenset({BaseTool.run.__code__, BaseTool.arun.__code__})


def failed_after_tool_returned(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while ``BaseTool.run``/``arun`` formatted the value the
    tool's own code had returned (so the tool ran to its end). The outermost ``run`` counts:
    a tool that called another tool, which failed so, raised from its own code."""
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in _RUN_CODES:
            below = tb.tb_next
            return below is not None and below.tb_frame.f_code is _FORMAT_CODE
        tb = tb.tb_next
    return False
