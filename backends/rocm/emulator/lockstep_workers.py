"""Lockstep chunks of one launch in worker processes, over a shared copy of the heap.

Design: fork, not spawn. A forked worker inherits everything a chunk needs -- the bound kernel
with its batched handlers, the launch's regions, the heap's allocation table -- with nothing to
pickle or rebuild (binding a kernel costs far more than a fork). Before forking, the parent copies
the live heap bytes into an anonymous shared mapping (`mmap(-1, n)` is MAP_SHARED: it stays shared
across fork and disappears with the last process holding it, so nothing can leak into /dev/shm);
each worker points its copy of the heap at that mapping, takes chunk indices from a shared counter
until none are left (a chunk is a unit of lockstep.run_launch: whole workgroups), and sends back
each chunk's wave-instruction counts and its traffic counts through a pipe. Only when every worker
succeeded does the parent copy the shared bytes back into its heap; on any error it raises
WorkerError with the heap untouched, and lockstep falls back to the ordinary path as it does in
one process (which reports the ordinary run's first fault).

Why the results are one process's: chunks hold whole workgroups, and lockstep's results for a
kernel whose workgroups do not race are the same whatever order its workgroups run in -- that is
what lockstep itself relies on. Kernels with atomics on global memory never come here
(lockstep.global_atomics): concurrent read-modify-writes of one address from two processes would
lose updates, and float sums would depend on the processes' timing.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import pickle
import signal
from collections.abc import Callable

import numpy as np

from tiledsl.backends.rocm.emulator.memory import EmulatorError, Heap


class WorkerError(EmulatorError):
    """A worker met an error (or died): the launch goes to the ordinary path."""


def run_chunks(run_chunk: Callable[[int], list[int]], nchunks: int, heap: Heap, workers: int) -> list[list[int]]:
    """`run_chunk(i)` for i in range(nchunks) in `workers` forked processes (each chunk once);
    each chunk's result in chunk order. `run_chunk` reads and writes memory only through `heap`."""
    top = heap.top
    shm = mmap.mmap(-1, max(top, 1))
    shared = np.frombuffer(shm, dtype=np.uint8)
    shared[:top] = heap.data[:top]
    counter = multiprocessing.get_context("fork").Value("q", 0)  # the next chunk to take
    pids: list[int] = []
    fds: list[int] = []
    ok = False
    try:
        for _ in range(min(workers, nchunks)):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker: never returns
                os.close(r)
                _worker(w, run_chunk, nchunks, heap, shared, counter)
            os.close(w)
            pids.append(pid)
            fds.append(r)
        results: dict[int, list[int]] = {}
        loaded = unique = 0
        errors = []
        for fd in fds:
            msg = _read_message(fd)
            if msg is None:
                errors.append("a worker process died")
            elif msg[0] == "error":
                errors.append(msg[1])
            else:
                results.update(msg[1])
                loaded += msg[2]
                unique += msg[3]
        if errors or len(results) != nchunks:
            raise WorkerError("; ".join(errors) or "a chunk was not run")
        ok = True
    finally:
        for fd in fds:
            os.close(fd)
        for pid in pids:
            if not ok:  # a worker may still be running (the parent was interrupted, another failed)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            os.waitpid(pid, 0)
    heap.data[:top] = shared[:top]
    heap.loaded_bytes += loaded
    heap.unique_loaded_bytes += unique
    return [results[i] for i in range(nchunks)]


def _worker(fd: int, run_chunk, nchunks: int, heap: Heap, shared: np.ndarray, counter) -> None:
    """A worker process's life: run chunks until none are left, report, exit."""
    try:
        # This process's heap object (a copy-on-write copy of the parent's) now reads and writes
        # the shared bytes; its byte windows were views of the old array.
        heap.data = shared
        heap.windows = {}
        heap.loaded_bytes = heap.unique_loaded_bytes = 0
        done: dict[int, list[int]] = {}
        while True:
            with counter.get_lock():
                i = counter.value
                counter.value = i + 1
            if i >= nchunks:
                break
            done[i] = run_chunk(i)
        msg: tuple = ("ok", done, heap.loaded_bytes, heap.unique_loaded_bytes)
    except BaseException as exc:  # noqa: BLE001 -- every error goes back to the parent
        with counter.get_lock():
            counter.value = nchunks  # the other workers take no further chunk
        msg = ("error", f"{type(exc).__name__}: {exc}")
    try:
        data = pickle.dumps(msg)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os._exit(0)  # no atexit handlers, no flushing of the parent's buffers twice


def _read_message(fd: int):
    """A worker's pickled message (read to end of file), or None when it sent none."""
    parts = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            break
        parts.append(b)
    return pickle.loads(b"".join(parts)) if parts else None
