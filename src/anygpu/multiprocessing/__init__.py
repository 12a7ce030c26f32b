"""torch.multiprocessing's names: the standard library's multiprocessing, plus `spawn`.

anygpu tensors live on a GPU device owned by one process; children started here open their
own device (the "spawn" start method, so no wgpu state is inherited through fork). For
data-parallel training start the ranks with `mpiexec` (anygpu.distributed), which gives them
an MPI world; processes from `spawn` do not form one.
"""

from __future__ import annotations

import multiprocessing as _mp
from multiprocessing import *  # noqa: F401,F403  (torch.multiprocessing re-exports it too)

__all__ = [name for name in dir(_mp) if not name.startswith("_")] + ["spawn", "ProcessRaisedException",
                                                                      "ProcessExitedException"]


class ProcessRaisedException(Exception):
    """A process started by `spawn` raised; the message carries its traceback."""

    def __init__(self, msg: str, error_index: int, error_pid: int):
        super().__init__(msg)
        self.error_index, self.pid = error_index, error_pid


class ProcessExitedException(Exception):
    """A process started by `spawn` ended with a non-zero exit code or a signal."""

    def __init__(self, msg: str, error_index: int, error_pid: int, exit_code: int):
        super().__init__(msg)
        self.error_index, self.pid, self.exit_code = error_index, error_pid, exit_code


def _run(fn, index: int, args: tuple, errors) -> None:
    import traceback

    try:
        fn(index, *args)
    except KeyboardInterrupt:
        pass
    except BaseException:  # report to the parent, then fail
        errors.put((index, traceback.format_exc()))
        raise SystemExit(1) from None


class ProcessContext:
    """The processes of one `spawn(..., join=False)`: `join()` waits for all of them."""

    def __init__(self, processes, errors):
        self.processes, self._errors = processes, errors

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def join(self, timeout: float | None = None) -> bool:
        """Wait for every process; True once all ended well. Raises for the first failure
        (the others are terminated)."""
        for process in self.processes:
            process.join(timeout)
        if any(p.is_alive() for p in self.processes):
            return False
        failed = [(i, p) for i, p in enumerate(self.processes) if p.exitcode != 0]
        if not failed:
            return True
        index, process = failed[0]
        reported = {}
        while not self._errors.empty():
            i, text = self._errors.get()
            reported[i] = text
        for p in self.processes:
            if p.is_alive():
                p.terminate()
        if index in reported:
            raise ProcessRaisedException(f"\n\n-- Process {index} terminated with the following error:\n"
                                         f"{reported[index]}", index, process.pid)
        raise ProcessExitedException(f"process {index} terminated with exit code {process.exitcode}", index,
                                     process.pid, process.exitcode)


def start_processes(fn, args=(), nprocs: int = 1, join: bool = True, daemon: bool = False,
                    start_method: str = "spawn"):
    """Start `nprocs` processes running fn(i, *args), i = 0..nprocs-1 (torch's signature)."""
    if not callable(fn):
        raise ValueError(f"spawn: fn must be callable, got {type(fn).__name__}")
    if int(nprocs) < 1:
        raise ValueError(f"spawn: nprocs must be at least 1, got {nprocs}")
    context = _mp.get_context(start_method)
    errors = context.SimpleQueue()
    processes = []
    for index in range(int(nprocs)):
        process = context.Process(target=_run, args=(fn, index, tuple(args), errors), daemon=daemon)
        process.start()
        processes.append(process)
    result = ProcessContext(processes, errors)
    if not join:
        return result
    while not result.join():
        pass
    return None


def spawn(fn, args=(), nprocs: int = 1, join: bool = True, daemon: bool = False, start_method: str = "spawn"):
    """torch.multiprocessing.spawn: run fn(i, *args) in `nprocs` fresh processes; with join,
    wait and raise ProcessRaisedException if one raised."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)
