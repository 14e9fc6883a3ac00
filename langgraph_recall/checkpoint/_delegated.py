"""What ``RecallCheckpointer`` passes to the saver it wraps unchanged, and the checks every
call makes first: the process it was made in (``_here``) and that it and its store are still
open (``_usable``). Async calls on a sync-only saver run its sync method in a thread
(``_acall``).

Every method of the checkpointer that reaches a database is wrapped once by ``mapped``: a
driver's error from the inner saver (or from the store under it) leaves it as
``RecallError(code="database")``, raised from the driver's, whichever of its methods met it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from langchain_core.runnables import RunnableConfig

from .._errors import RecallError
from .._process import Birth

if TYPE_CHECKING:
    from ..store import RecallStore
    from ._saver import _Shared


F = TypeVar("F", bound=Callable[..., Any])


def mapped(method: F) -> F:
    """``method`` (sync or async), with a driver's error leaving it as a ``RecallError``."""
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def amapped(self: Delegated, *args: Any, **kwargs: Any) -> Any:
            try:
                return await method(self, *args, **kwargs)
            except Exception as exc:
                self._raise_mapped(exc)

        return amapped  # type: ignore[return-value]

    @functools.wraps(method)
    def smapped(self: Delegated, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            self._raise_mapped(exc)

    return smapped  # type: ignore[return-value]


class Delegated:
    """The plain delegation of ``RecallCheckpointer`` to its inner saver."""

    inner: Any
    store: RecallStore
    _shared: _Shared
    _birth: Birth

    @mapped
    def delete_thread(self, thread_id: str) -> None:
        self._usable()
        self.inner.delete_thread(thread_id)

    @mapped
    async def adelete_thread(self, thread_id: str) -> None:
        self._usable()
        await self._acall("delete_thread", thread_id)

    @mapped
    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._usable()
        self.inner.delete_for_runs(run_ids)

    @mapped
    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._usable()
        await self._acall("delete_for_runs", run_ids)

    @mapped
    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._usable()
        self.inner.copy_thread(source_thread_id, target_thread_id)

    @mapped
    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._usable()
        await self._acall("copy_thread", source_thread_id, target_thread_id)

    @mapped
    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._usable()
        self.inner.prune(thread_ids, strategy=strategy)

    @mapped
    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._usable()
        await self._acall("prune", thread_ids, strategy=strategy)

    @mapped
    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Any:
        self._usable()
        # The inner saver's (SQL) version, never the base class's get_tuple walk through us.
        return self.inner.get_delta_channel_history(config=config, channels=channels)

    @mapped
    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Any:
        self._usable()
        return await self._acall("get_delta_channel_history", config=config, channels=channels)

    fenced: bool

    def _saver_error(self, exc: BaseException) -> BaseException:
        """``exc`` as it leaves the checkpointer (see ``mapped``)."""
        return self.store._database_error(exc, own=self.fenced)

    def _raise_mapped(self, exc: BaseException) -> NoReturn:
        """Raise ``exc`` as it leaves the checkpointer (called in its ``except``)."""
        err = self._saver_error(exc)
        if err is exc:
            raise exc
        raise err from err.__cause__

    def _mapped_items(self, items: Iterator[Any]) -> Iterator[Any]:
        """A listing of the inner saver, its driver's errors mapped as ``mapped`` does."""
        try:
            yield from items
        except Exception as exc:
            self._raise_mapped(exc)

    async def _amapped_items(self, items: AsyncIterator[Any]) -> AsyncIterator[Any]:
        try:
            async for item in items:
                yield item
        except Exception as exc:
            self._raise_mapped(exc)

    def _here(self) -> None:
        self._birth.check("RecallCheckpointer")

    def _usable(self) -> None:
        """``_here``, and refuse a read or a new run once the checkpointer or its store is
        closed. (A write of a run already going is not refused here: closed under it, that run
        ends with ``lease_lost``, see ``_closed_under``.)"""
        self._here()
        if self.store._closed:
            raise RecallError(
                "the RecallStore of this checkpointer is closed; open the store again "
                "(RecallStore.open) and make its checkpointer anew",
                code="closed",
            )
        if self._shared.inner_closed:
            raise RecallError(
                "this checkpointer is closed, and the database connections store.checkpointer() "
                "made for it too; make a new one with store.checkpointer()",
                code="closed",
            )

    def get_next_version(self, current: Any, channel: None) -> Any:  # bound to inner's in __init__
        return self.inner.get_next_version(current, channel)

    async def _acall(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The inner saver's async method; its sync twin in a thread where the async raises."""
        self._here()
        if name not in self._shared.sync_only:
            try:
                return await getattr(self.inner, "a" + name)(*args, **kwargs)
            except NotImplementedError:
                # SqliteSaver / PostgresSaver: sync only. Remember, and use the sync method.
                self._shared.sync_only.add(name)
        return await asyncio.to_thread(getattr(self.inner, name), *args, **kwargs)
