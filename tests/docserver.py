"""A fork server for the docs test (tests/test_docs_run.py; CONTRIBUTING.md, "Executable documentation"): one
long-lived process imports torch and ticketcli once, and every `ticket ...` and `python ...` the docs run, the
driver of each file's blocks included, is a child forked from it: a command pays for its own work, not for
importing torch again.

`python docserver.py serve SOCKET` is the server: it imports everything (running no torch op, so that forking
stays safe), listens on the Unix socket SOCKET, says `ready` on stdout and serves until SIGTERM, or until the
process that started it has gone. `python -S -E docserver.py client SOCKET PYTHON-ARGS...` is the client the
docs' `ticket` and `python` shims run (`-m ticketcli ARGS`, `-c CODE ARGS` or `SCRIPT ARGS`): it connects, hands
over its arguments, working directory, environment, umask, ignored signals and its stdin/stdout/stderr file
descriptors themselves (SCM_RIGHTS), forwards the signals it receives to the child, and ends as the child ended
(its exit code, or killed by the same signal). Pipes, redirections and exit codes are therefore real: the child
writes to the client's own fds. The child sets itself up as a fresh interpreter would (`sys.argv`, `sys.path[0]`,
`__main__`, new std streams, default signal handlers, reseeded random state), runs, and ends as one would, minus
the interpreter's teardown.

Whenever the server cannot stand in for a fresh process, the client execs one (`python PYTHON-ARGS`): no server
listening, interpreter options or a session on stdin, or an environment that differs from the server's in a
variable read at start-up (PYTHON*, torch's and the BLAS libraries' thread and allocator settings, the locale)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import struct
import sys
from typing import Any, NamedTuple

# Environment variables read while the interpreter, torch or a BLAS library starts: a child forked from the server
# has them as the server had them, so a command whose value differs runs in a fresh process instead.
STARTUP_PREFIXES = ("PYTHON", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "GOTO", "TORCH", "CUDA", "LD_", "MALLOC", "LC_")
STARTUP_NAMES = ("LANG", "LANGUAGE")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
HEADER = struct.Struct("!I")  # the request's length, before its JSON
MAX_REQUEST = 1 << 20  # an environment and argv larger than this is not a docs command


def startup_env(env: dict[str, str], imported: dict[str, str] | None = None) -> dict[str, str]:
    """The part of an environment that a forked child cannot change after the fact, less the variables the
    server's imports set (`imported`) where `env` has the values they set: a process started by a served command
    inherits those, and the same imports in a fresh process would set them again."""
    imported = imported or {}
    return {
        k: v for k, v in env.items() if (k.startswith(STARTUP_PREFIXES) or k in STARTUP_NAMES) and imported.get(k) != v
    }


# ---------------------------------------------------------------- the client (stdlib only: it starts in ~20 ms)


def client(path: str, args: list[str]) -> None:
    """Run `python ARGS` (`-m MODULE ...`, `-c CODE ...` or `SCRIPT ...`) in a child of the server at `path`, as if
    this process were it; any other form of `python ARGS`, or no usable server, execs the real one."""
    run = main_of(args)
    std = [fd for fd in (0, 1, 2) if is_open(fd)]  # before the socket, which would take a closed one's number
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if run is None:
            raise OSError("not a form the server runs")
        sock.connect(path)
    except OSError:
        fresh(args)
    umask = os.umask(0)
    os.umask(umask)
    request = {
        "run": run,
        "argv": args[len(run) :],
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "umask": umask,
        "std": std,
        "ignored": [int(s) for s in FORWARDED if signal.getsignal(s) is signal.SIG_IGN],
    }
    data = json.dumps(request).encode()
    socket.send_fds(sock, [HEADER.pack(len(data)) + data], std)
    reader = sock.makefile("rb")
    first = reader.readline().split()
    if first == [b"fresh"]:
        fresh(args)
    if len(first) != 2 or first[0] != b"pid":
        lost(first)

    def forward(signum: int, frame: object) -> None:
        sock.sendall(f"kill {signum}\n".encode())

    for s in FORWARDED:
        if int(s) not in request["ignored"]:
            signal.signal(s, forward)
    last = reader.readline().split()
    if len(last) != 2 or last[0] != b"status":
        lost(last)
    status = int(last[1])
    if os.WIFSIGNALED(status):  # end as the child ended: a shell then reports 128+N, and `wait` sees the signal
        sig = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's cannot be set, and needs no reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


def main_of(args: list[str]) -> list[str] | None:
    """What `python ARGS` runs, as the leading arguments that name it (`-m MODULE`, `-c CODE`, `SCRIPT`), or None
    for what the server does not run (interpreter options, a session on stdin)."""
    if len(args) >= 2 and args[0] in ("-m", "-c"):
        return args[:2]
    if args and not args[0].startswith("-"):
        return args[:1]
    return None


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def fresh(args: list[str]) -> None:
    """Become a fresh `python ARGS` (no server, or one that cannot stand in for it)."""
    os.execv(sys.executable, [sys.executable, *args])


def lost(line: list[bytes]) -> None:
    """The server went away mid-command: an internal error of the test's runner, not of the command."""
    os.write(2, f"error: the docs test's fork server went away ({b' '.join(line)!r})\n".encode())
    os._exit(70)


# ---------------------------------------------------------------- the server


class Served:
    """One command being served: the client's connection and the forked child."""

    def __init__(self, conn: socket.socket, pid: int, pidfd: int):
        self.conn, self.pid, self.pidfd = conn, pid, pidfd


class Preloaded(NamedTuple):
    """What importing showed and set, to be shown and set again in each child as a fresh process would."""

    shown: list[Any]  # the warnings the imports showed
    env: dict[str, str]  # the variables the imports added to os.environ (torch._dynamo sets TORCHINDUCTOR_CACHE_DIR)


def preload() -> Preloaded:
    """Import what the commands import (torch, numpy, Typer, Rich, every ticketcli module but the trackers',
    whose libraries start threads, and what a first training step imports: torch._dynamo, seconds of it; not
    scikit-learn, which no command imports: the digits are read from its data file), and record what those
    imports showed and set. Nothing here may run a torch op: torch's thread pools would not survive a fork."""
    import gc
    import importlib
    import pkgutil
    import threading
    import warnings

    before = dict(os.environ)
    with warnings.catch_warnings(record=True) as shown:
        import numpy  # noqa: F401
        import torch  # noqa: F401
        import torch._dynamo  # noqa: F401  (a torch optimizer's first use imports it: seconds per command)

        import ticketcli
        import ticketcli.cli.app  # noqa: F401

        for info in pkgutil.walk_packages(ticketcli.__path__, "ticketcli."):
            if not info.name.startswith(("ticketcli.track", "ticketcli.export.onnx", "ticketcli.__main__")):
                importlib.import_module(info.name)
    if threading.active_count() != 1:
        raise RuntimeError(f"preloading started Python threads ({threading.enumerate()}): forking is not safe")
    gc.collect()
    gc.freeze()  # the children's collections then never walk (and so never copy) the server's objects
    added = {k: v for k, v in os.environ.items() if k not in before}
    os.environ.clear()
    os.environ.update(before)  # the server stands for commands started in the environment it was started in
    return Preloaded(list(shown), added)


def serve(path: str) -> tuple[socket.socket, dict[str, Any], list[int], Preloaded]:
    """Serve until SIGTERM; returns only in a forked child: its connection, request, fds and the start-up
    warnings."""
    import selectors

    loaded = preload()
    owner, parent = os.getpid(), os.getppid()
    own_env = startup_env(dict(os.environ))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    served: dict[int, Served] = {}  # by the client connection's fd
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    print("ready", flush=True)
    try:
        while not stop and os.getppid() == parent:
            for key, _ in sel.select(timeout=1.0):
                if key.data == "accept":
                    conn, _ = listener.accept()
                    conn.settimeout(10)
                    try:
                        request, fds = receive(conn)
                    except (OSError, ValueError) as e:
                        print(f"docserver: a bad request: {e}", file=sys.stderr, flush=True)
                        conn.close()
                        continue
                    if startup_env(request["env"], loaded.env) != own_env:
                        close_all(fds)
                        conn.sendall(b"fresh\n")
                        conn.close()
                        continue
                    pid = os.fork()
                    if pid == 0:  # the child: leave the server's loop, its sockets and its children behind
                        sel.close()
                        listener.close()
                        for s in served.values():
                            s.conn.close()
                            os.close(s.pidfd)
                        return conn, request, fds, loaded
                    close_all(fds)  # the client and the child hold them: a pipe's reader sees EOF when they end
                    conn.settimeout(None)
                    s = Served(conn, pid, os.pidfd_open(pid))
                    served[conn.fileno()] = s
                    sel.register(conn, selectors.EVENT_READ, ("client", s))
                    sel.register(s.pidfd, selectors.EVENT_READ, ("child", s))
                    send(s, f"pid {pid}\n")
                elif key.data[0] == "client":
                    s = key.data[1]
                    line = s.conn.recv(64)
                    if not line:  # the client was killed: so is the command it stood for
                        sel.unregister(s.conn)
                        os.kill(s.pid, signal.SIGKILL)
                        continue
                    for word in line.split(b"\n"):
                        if word.startswith(b"kill "):
                            os.kill(s.pid, int(word[5:]))
                else:
                    s = key.data[1]
                    _, status = os.waitpid(s.pid, 0)
                    sel.unregister(s.pidfd)
                    os.close(s.pidfd)
                    send(s, f"status {status}\n")
                    served.pop(s.conn.fileno(), None)
                    if s.conn in {k.fileobj for k in sel.get_map().values()}:
                        sel.unregister(s.conn)
                    s.conn.close()
    finally:
        if os.getpid() == owner:  # a child leaving by an exception must not take the server's socket with it
            for s in served.values():
                os.kill(s.pid, signal.SIGKILL)
            os.unlink(path)
    sys.exit(0)


def send(s: Served, text: str) -> None:
    try:
        s.conn.sendall(text.encode())
    except OSError:  # the client has gone; its child is (being) killed
        pass


def receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """A client's request and the std fds it passed, checked before use."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < HEADER.size:
        more = conn.recv(HEADER.size)
        if not more:
            raise ValueError("a truncated request")
        data += more
    (size,) = HEADER.unpack(data[: HEADER.size])
    if size > MAX_REQUEST:
        close_all(fds)
        raise ValueError(f"a request of {size} bytes")
    data = data[HEADER.size :]
    while len(data) < size:
        more = conn.recv(size - len(data))
        if not more:
            close_all(fds)
            raise ValueError("a truncated request")
        data += more
    request = json.loads(data)
    if sorted(request) != ["argv", "cwd", "env", "ignored", "run", "std", "umask"] or len(request["std"]) != len(fds):
        close_all(fds)
        raise ValueError(f"a malformed request: {sorted(request)}")
    return request, fds


def close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def become(request: dict[str, Any], fds: list[int], loaded: Preloaded) -> None:
    """Turn this forked child into the fresh `python ARGS` the client stands for, run it, and end as that process
    would end."""
    import random
    import warnings

    for fd, received in zip(request["std"], fds):
        os.dup2(received, fd)
    for fd in fds:
        if fd not in (0, 1, 2):
            os.close(fd)
    for fd in {0, 1, 2} - set(request["std"]):
        os.close(fd)  # closed in the client: closed here (entry.py claims it as it would in a fresh process)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for s in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):  # SIGKILL, SIGSTOP and the C library's own cannot be set
            signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # what the interpreter sets at start-up
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    for s in request["ignored"]:  # an ignored signal stays ignored across exec, so across this stand-in too
        signal.signal(s, signal.SIG_IGN)
    os.umask(request["umask"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for k, v in loaded.env.items():  # as the preloaded imports set them in a fresh process: only where unset
        os.environ.setdefault(k, v)
    std_streams(set(request["std"]))
    random.seed()  # a fresh process draws its own; a fork would share the server's
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    for w in loaded.shown:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    try:
        run(request["run"], request["argv"])
        code = 0
    except SystemExit as e:  # as the interpreter reads it: None is 0, a number is the code, anything else printed
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except BaseException as e:  # noqa: BLE001 - shown and ended on as the interpreter would
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:  # the traceback starts where python's
            tb = tb.tb_next
        sys.excepthook(type(e), e.with_traceback(tb), tb)  # the hook shows the exception's own traceback
        code = -signal.SIGINT if isinstance(e, KeyboardInterrupt) else 1
    leave(code)


def run(main: list[str], argv: list[str]) -> None:
    """Run `python MAIN ARGV` here as the interpreter would: `sys.argv`, `sys.path[0]` and the `__main__`
    module as it sets them for `-m MODULE`, `-c CODE` or `SCRIPT`."""
    import runpy
    import types

    if main[0] == "-m":
        sys.argv, sys.path[0] = ["-m", *argv], os.getcwd()
        runpy.run_module(main[1], run_name="__main__", alter_sys=True)
    elif main[0] == "-c":
        sys.argv, sys.path[0] = ["-c", *argv], ""
        module = types.ModuleType("__main__")
        module.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = module
        exec(compile(main[1], "<string>", "exec"), module.__dict__)
    else:
        sys.argv, sys.path[0] = [main[0], *argv], os.path.dirname(os.path.realpath(main[0]))
        runpy.run_path(main[0], run_name="__main__")


def leave(code: int) -> None:
    """End as the interpreter ends (non-daemon threads joined, exit handlers run, std streams flushed: exit 120 if
    that fails; an uncaught KeyboardInterrupt kills the process with SIGINT), without its teardown: freeing every
    object of the server's heap would copy each page this child shares with it, seconds of CPU for nothing the
    command wrote."""
    import atexit
    import threading
    import traceback

    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception as e:  # noqa: BLE001 - what the interpreter reports at exit, and its exit status
            with contextlib.suppress(Exception):
                print(f"Exception ignored in: {stream!r}", file=sys.stderr)
                traceback.print_exception(e, file=sys.stderr)
                sys.stderr.flush()
            code = 120
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def std_streams(open_fds: set[int]) -> None:
    """New sys.stdin/stdout/stderr on fds 0-2 as the interpreter makes them at start-up (None for a closed one),
    with the server's encodings and buffering: the variables that choose those (PYTHONIOENCODING,
    PYTHONUNBUFFERED, the locale) are start-up ones, equal to the server's."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        old = getattr(sys, f"__{name}__")
        stream = None
        if fd in open_fds:
            unbuffered = fd > 0 and old is not None and isinstance(getattr(old, "buffer", None), io.RawIOBase)
            binary = open(fd, "wb" if fd else "rb", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
            with contextlib.suppress(AttributeError):
                getattr(binary, "raw", binary).name = f"<{name}>"
            stream = io.TextIOWrapper(
                binary,
                encoding=old.encoding if old else None,
                errors=old.errors if old else None,
                newline="\n",
                line_buffering=not unbuffered and fd > 0 and (os.isatty(fd) or fd == 2),
                write_through=unbuffered,
            )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        conn, request, fds, loaded = serve(sys.argv[2])
        conn.close()
        become(request, fds, loaded)
    elif sys.argv[1:2] == ["client"]:
        client(sys.argv[2], sys.argv[3:])
    else:
        sys.exit("usage: docserver.py serve SOCKET | client SOCKET PYTHON-ARGS...")
