"""Run a coroutine to completion from synchronous code, even inside a running loop.

``asyncio.run`` refuses to start inside a running event loop (a Jupyter cell
has one). As vLLM's ``LLM`` does over ``AsyncLLM``, the sync API then runs
the coroutine on a worker thread with its own loop and waits for it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def use_uvloop() -> None:
    """Use uvloop for new event loops when installed (faster); harmless without."""
    try:
        import uvloop
    except ImportError:
        return
    if not isinstance(asyncio.get_event_loop_policy(), uvloop.EventLoopPolicy):
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def run_sync(make_coroutine: Callable[[], Awaitable[T]]) -> T:
    """``make_coroutine()`` run to completion; works with or without a running loop.

    Takes a factory, not a coroutine, so the coroutine is created on the thread
    whose loop runs it.
    """

    async def main() -> T:
        return await make_coroutine()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        use_uvloop()
        return asyncio.run(main())
    import contextvars

    context = contextvars.copy_context()  # the caller's progress reporter goes along
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="promptrobust-sync") as pool:
        return pool.submit(context.run, asyncio.run, main()).result()
