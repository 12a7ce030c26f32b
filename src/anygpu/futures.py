"""anygpu.futures: torch.futures's ``Future``, ``collect_all`` and ``wait_all``.

A Future holds the result of work that may finish later: ``set_result`` (or
``set_exception``) completes it once, ``wait()`` blocks until then and returns the value
(or raises the error), ``then(callback)`` chains work that runs when it completes.

anygpu's collectives finish before they return, so ``all_reduce(t, async_op=True)
.get_future()`` is a Future that is already done (its value is ``[t]``, as torch's). A
DistributedDataParallel communication hook returns one (docs/DISTRIBUTED.md).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Generic, TypeVar

__all__ = ["Future", "collect_all", "wait_all"]

T = TypeVar("T")
S = TypeVar("S")


class Future(Generic[T]):
    """torch.futures.Future's surface on a thread-safe completion slot.

    devices: accepted for torch compatibility (anygpu has one device per process)."""

    def __init__(self, *, devices=None):
        self._condition = threading.Condition()
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[["Future[T]"], None]] = []

    def __repr__(self) -> str:
        return f"anygpu.futures.Future(done={self._done})"

    def done(self) -> bool:
        """Whether a result or an error is set (not whether callbacks have run)."""
        return self._done

    def _complete(self, value: Any, error: BaseException | None) -> None:
        with self._condition:
            if self._done:
                raise RuntimeError("Future.set_result: this Future is already completed; a Future can only be "
                                   "marked completed once")
            self._value, self._error, self._done = value, error, True
            callbacks, self._callbacks = self._callbacks, []
            self._condition.notify_all()
        for callback in callbacks:
            callback(self)

    def set_result(self, result: T) -> None:
        """Complete the Future with `result` and run the callbacks added so far (once only)."""
        self._complete(result, None)

    def set_exception(self, result: BaseException) -> None:
        """Complete the Future with an error: wait() and value() raise it."""
        if not isinstance(result, BaseException):
            raise ValueError(f"Future.set_exception: expected an exception, got {type(result).__name__}")
        self._complete(None, result)

    def wait(self) -> T:
        """Block until the Future completes; return its value or raise its error."""
        with self._condition:
            while not self._done:
                self._condition.wait()
        return self.value()

    def value(self) -> T:
        """The value of a completed Future (raises its error); RuntimeError if not completed yet."""
        if not self._done:
            raise RuntimeError("Future.value: the Future is not completed yet; call wait() to block until it is")
        if self._error is not None:
            raise self._error
        return self._value

    def add_done_callback(self, callback: Callable[["Future[T]"], None]) -> None:
        """Call callback(self) once the Future completes (now, if it already has)."""
        with self._condition:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback(self)

    def then(self, callback: Callable[["Future[T]"], S]) -> "Future[S]":
        """A new Future holding callback(self) once this one completes. An error of this
        Future or of the callback completes the new Future with a RuntimeError naming it,
        as torch's."""
        chained: Future[S] = Future()

        def run(done: "Future[T]") -> None:
            try:
                result = callback(done)
            except BaseException as error:  # handed to whoever waits on the chained Future
                wrapped = RuntimeError(f"Got the following error when running the callback: "
                                       f"{type(error).__name__}: {error}")
                wrapped.__cause__ = error
                chained.set_exception(wrapped)
                return
            chained.set_result(result)

        self.add_done_callback(run)
        return chained


def collect_all(futures: list[Future]) -> Future[list[Future]]:
    """A Future completed, with the list of `futures` as its value, once all of them are."""
    futures = list(futures)
    combined: Future[list[Future]] = Future()
    remaining = [len(futures)]
    lock = threading.Lock()

    def one_done(_: Future) -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            combined.set_result(futures)

    if not futures:
        combined.set_result([])
    for future in futures:
        future.add_done_callback(one_done)
    return combined


def wait_all(futures: list[Future]) -> list:
    """Wait for every Future; their values in order (the first error raises)."""
    return [future.wait() for future in futures]
