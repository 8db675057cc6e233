"""Dynamic batching: sentences from requests that arrive together are decoded in one model call.

Why: one forward pass over 32 sentences costs far less than 32 passes over one sentence (the matrix products are
wider, the per-call overhead is paid once), so a server that waits a few milliseconds to gather concurrent
requests answers many more of them per second than one that decodes each request on its own.

How: every request becomes an entry in a pending list. A single asyncio task takes the oldest entry, waits
`max_wait_s` for company when the server was idle, then gathers all pending entries with the SAME key (for
translation: beam, alpha and n-best; a beam-4 request is never decoded in a beam-1 batch) up to `max_tokens`
source tokens, and runs the model on one worker thread, so the event loop keeps accepting requests while the
model works. Requests that arrive during a model call are what the next call batches. There is no lock around a
request: a handler only awaits its own future.

One worker thread on purpose: the model's own kernels already use every core, and two calls at once on one
model would race on state a call keeps (recorded attention weights). A server of several models (several language
pairs: pairs.py) gives every batcher the same one-thread executor, so that two models never decode at once either:
each would use every core (`--threads` is the process's), and two at once would only contend for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

RunBatch = Callable[[list[str], Hashable], Sequence[Any]]  # (texts, key) -> one output per text, in order
CountTokens = Callable[[list[str]], int]


def model_executor() -> ThreadPoolExecutor:
    """The one worker thread models run on (see the module's docstring for why one)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="transduce-model")


def count_words(texts: list[str]) -> int:
    """A tokenizer-free size estimate (words + one end-of-sentence token each), for predictors without one."""
    return sum(len(text.split()) + 1 for text in texts)


@dataclass(eq=False)
class _Entry:
    texts: list[str]
    key: Hashable
    tokens: int
    future: asyncio.Future
    arrived: float  # event-loop time


class DynamicBatcher:
    """Gathers concurrent requests into model calls; `submit` is what a request handler awaits.

    max_tokens: the source-token budget of one model call (a single larger request still runs, alone).
    max_wait_s: how long the first request after an idle spell waits for others to join it.
    max_requests: at most this many requests per call; 1 turns batching off (one request at a time).
    executor: the one-thread executor the model runs on, shared with other batchers (whoever made it shuts it
    down); by default one of its own, shut down by `close`.
    """

    def __init__(
        self,
        run_batch: RunBatch,
        *,
        max_tokens: int = 4096,
        max_wait_s: float = 0.005,
        max_requests: int | None = None,
        count_tokens: CountTokens = count_words,
        executor: ThreadPoolExecutor | None = None,
    ) -> None:
        if max_tokens < 1 or max_wait_s < 0 or (max_requests is not None and max_requests < 1):
            raise ValueError("max_tokens and max_requests must be >= 1 and max_wait_s >= 0")
        self.run_batch, self.count_tokens = run_batch, count_tokens
        self.max_tokens, self.max_wait_s, self.max_requests = max_tokens, max_wait_s, max_requests
        self._owns_executor = executor is None
        self.executor = executor or model_executor()
        self.calls = 0  # model calls made, and the requests and sentences they held (for /v1/info and tests)
        self.requests = 0
        self.sentences = 0
        self._pending: list[_Entry] = []
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    async def submit(self, texts: list[str], key: Hashable = None) -> list[Any]:
        """The outputs for `texts` (in order), decoded with whatever else is pending under the same key."""
        self._ensure_running()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append(_Entry(list(texts), key, self.count_tokens(list(texts)), future, loop.time()))
        assert self._wake is not None, "_ensure_running creates the wake-up event"
        self._wake.set()
        return await future

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on the model thread, between batches (for one-off model work such as attention)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def close(self) -> None:
        """Stop the batching task (pending requests are cancelled) and let the model thread finish its call."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for entry in self._pending:
            entry.future.cancel()
        self._pending.clear()
        if self._owns_executor:
            self.executor.shutdown(wait=True)

    def _ensure_running(self) -> None:
        """Start the batching task on the running event loop (again, if an earlier loop has gone)."""
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._loop(), name="transduce-batcher")

    async def _loop(self) -> None:
        while True:
            assert self._wake is not None, "_ensure_running creates the wake-up event before starting this task"
            await self._wake.wait()
            await self._wait_for_company()
            batch = self._take()
            if not self._pending:
                self._wake.clear()
            if batch:
                await self._run(batch)

    async def _wait_for_company(self) -> None:
        """Sleep until the oldest pending request has waited max_wait_s, unless its batch is already full.

        Requests that queued up during a model call have waited long enough and go at once.
        """
        pending = self._live()
        if not pending or self._batch_is_full():
            return
        delay = pending[0].arrived + self.max_wait_s - asyncio.get_running_loop().time()
        if delay > 0:
            await asyncio.sleep(delay)

    def _live(self) -> list[_Entry]:
        """Pending entries whose requests still wait (a timed-out request's future is already cancelled)."""
        self._pending = [e for e in self._pending if not e.future.done()]
        return self._pending

    def _batch_is_full(self) -> bool:
        pending = self._live()
        if not pending:
            return False
        same = [e for e in pending if e.key == pending[0].key]
        return sum(e.tokens for e in same) >= self.max_tokens or (
            self.max_requests is not None and len(same) >= self.max_requests
        )

    def _take(self) -> list[_Entry]:
        """The oldest entry plus later ones with its key, in arrival order, within the token and request caps."""
        pending = self._live()
        if not pending:
            return []
        key, tokens = pending[0].key, 0
        batch: list[_Entry] = []
        for entry in pending:
            if entry.key != key:
                continue
            if batch and (tokens + entry.tokens > self.max_tokens or len(batch) == self.max_requests):
                break
            batch.append(entry)
            tokens += entry.tokens
        taken = set(map(id, batch))
        self._pending = [e for e in pending if id(e) not in taken]
        return batch

    async def _run(self, batch: list[_Entry]) -> None:
        """One model call for the whole batch; each request gets its own slice of the outputs (or the error)."""
        texts = [text for entry in batch for text in entry.texts]
        try:
            outputs = await self.call(self.run_batch, texts, batch[0].key)
        except Exception as error:
            if len(batch) > 1:  # one bad request must not fail the others: decode each on its own
                for entry in batch:
                    await self._run([entry])
                return
            _settle(batch[0].future, error=error)
            return
        self.calls += 1
        self.requests += len(batch)
        self.sentences += len(texts)
        start = 0
        for entry in batch:
            _settle(entry.future, result=list(outputs[start : start + len(entry.texts)]))
            start += len(entry.texts)


def _settle(future: asyncio.Future, *, result: Any = None, error: BaseException | None = None) -> None:
    """Resolve a request's future unless the request has stopped waiting (timed out or disconnected)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
