"""The toolchain process: one long-lived child per compiling process that runs the steps which can
abort the process they run in -- MLIR's conversion to ROCDL (an upstream pattern that fails to
legalize aborts), its translation to LLVM IR, and LLVM's optimization and AMDGPU codegen with
what a kernel asks of the scheduler (LLVM's iterative schedulers have segfaulted) or IR we did not
make. Apart, such a crash is a CompileError for the caller, not its death.

It is started once and kept: a child per step (mlir-opt, mlir-translate, a Python with llvmlite)
cost about 0.25 s of a 1 s compile in process start-up and library loading alone. A child that
dies is replaced at the next request. Requests and replies are pickled, each behind its length,
on the child's stdin and its original stdout; everything the child or LLVM prints goes to a file
the parent reads back per request (LLVM writes its diagnostics straight to file descriptor 2).

`python -m tiledsl.backends.rocm.codegen_worker` is the child (`serve`).
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from typing import IO, Any

from tiledsl.backends.rocm.arch import Arch, get_arch

_LENGTH = struct.Struct("<Q")


def _send(pipe: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(_LENGTH.pack(len(data)) + data)
    pipe.flush()


def _receive(pipe: IO[bytes]) -> Any:
    """The next message, or EOFError when the other side has gone."""
    head = pipe.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError
    size = _LENGTH.unpack(head)[0]
    data = pipe.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


# ---------------------------------------------------------------------------------------------
# The parent's side.


class WorkerDied(Exception):
    """The toolchain child ended during a request: `returncode` (negative: the signal), and what it
    printed first."""

    def __init__(self, returncode: int, said: str):
        super().__init__(f"the toolchain process ended with {returncode}")
        self.returncode = returncode
        self.said = said


def worker_command() -> list[str]:
    return [sys.executable, "-m", "tiledsl.backends.rocm.codegen_worker"]


class _Worker:
    def __init__(self, command: list[str]):
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr)
        self.requests = 0

    def printed(self) -> int:
        """Bytes the child has printed so far (its output file's size)."""
        return os.fstat(self.stderr.fileno()).st_size

    def said_since(self, offset: int) -> str:
        """What the child printed since `offset` bytes of its output file."""
        return os.pread(self.stderr.fileno(), self.printed() - offset, offset).decode(errors="replace")

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # the child's end of input: it returns
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.stderr.close()


# A child's memory grows a little with each kernel (state LLVM and MLIR keep: about 150 MB after a
# first fmha compile, 290 MB after two dozen): it is replaced after this many requests.
REQUESTS_PER_CHILD = 400

_lock = threading.Lock()
_worker: _Worker | None = None


def request(op: str, arch_name: str, text: str) -> tuple[tuple[str, Any], str]:
    """Run step `op` (a key of HANDLERS) in the toolchain child on `text`: ((status, result), what
    the child printed meanwhile), status "ok" or "error" (the result then the message). Raises
    WorkerDied if the child ended."""
    global _worker
    with _lock:
        if _worker is None:
            _worker = _Worker(worker_command())
        worker = _worker
        start = worker.printed()
        try:
            _send(worker.proc.stdin, (op, arch_name, text))
            reply = _receive(worker.proc.stdout)
        except (BrokenPipeError, EOFError):
            returncode = worker.proc.wait()
            said = worker.said_since(start)
            _retire()
            raise WorkerDied(returncode, said) from None
        except BaseException:  # interrupted (Ctrl-C) mid-request: the reply would answer the next one
            worker.proc.kill()
            _retire()
            raise
        said = worker.said_since(start)
        worker.requests += 1
        if worker.requests >= REQUESTS_PER_CHILD:
            _retire()
        return reply, said


def _retire() -> None:
    """End the current child (the caller holds _lock); the next request starts another."""
    global _worker
    if _worker is not None:
        _worker.close()
        _worker = None


def shutdown() -> None:
    """End the toolchain child, if any (a later request starts another)."""
    with _lock:
        _retire()


def _forget_after_fork() -> None:
    """A forked process does not share its parent's child: it drops its copies of the pipes (so the
    child still sees its input end when the parent closes it) and starts its own when it needs one."""
    global _worker, _lock
    _lock = threading.Lock()  # a lock another thread held at the fork stays held in the copy
    if _worker is not None:
        for pipe in (_worker.proc.stdin, _worker.proc.stdout, _worker.stderr):
            pipe.close()
        _worker = None


atexit.register(shutdown)
os.register_at_fork(after_in_child=_forget_after_fork)


# ---------------------------------------------------------------------------------------------
# The child's side.


def _to_rocdl(text: str, arch: Arch) -> str:
    from mlir import ir, passmanager

    from tiledsl.backends.rocm import codegen

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        passmanager.PassManager.parse(codegen.rocdl_pipeline(arch)).run(module.operation)
        lowered = module.operation.get_asm(enable_debug_info=True)
    return codegen.extract_gpu_module(lowered, arch)


def _to_llvm_ir(text: str, arch: Arch) -> str:
    from mlir import ir
    from mlir.dialects import llvm

    with ir.Context():
        return str(llvm.translate_module_to_llvmir(ir.Module.parse(text).operation))


def _object(text: str, arch: Arch) -> tuple[str, bytes]:
    import llvmlite.binding as llvm

    from tiledsl.backends.rocm import codegen

    context = llvm.create_context()  # as a fresh process would: nothing of earlier kernels in it
    optimized = codegen.optimize(text, arch, context)
    return optimized, codegen.make_object(optimized, arch, filter_warnings=False, context=context)


def _assembly(text: str, arch: Arch) -> str:
    import llvmlite.binding as llvm

    from tiledsl.backends.rocm import codegen

    return codegen.make_assembly(text, arch, filter_warnings=False, context=llvm.create_context())


HANDLERS: dict[str, Callable[[str, Arch], Any]] = {
    "rocdl": _to_rocdl, "translate": _to_llvm_ir, "object": _object, "assembly": _assembly}


def serve() -> int:
    """The child: answer requests until the parent closes its input."""
    from tiledsl.errors import CompileError

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent's Ctrl-C is the parent's to handle
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever anything prints goes to the output file, not into the replies
    sys.stdout = sys.stderr
    requests = sys.stdin.buffer
    while True:
        try:
            op, arch_name, text = _receive(requests)
        except EOFError:
            return 0
        try:
            reply: tuple[str, Any] = ("ok", HANDLERS[op](text, get_arch(arch_name)))
        except CompileError as exc:
            reply = ("error", exc.detail)
        except Exception as exc:  # ir.MLIRError carries MLIR's diagnostics; anything else, its traceback
            mlir_error = type(exc).__module__.startswith("mlir")
            reply = ("error", str(exc) if mlir_error else traceback.format_exc())
        sys.stderr.flush()
        _send(replies, reply)


if __name__ == "__main__":
    sys.exit(serve())
