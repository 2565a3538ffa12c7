"""Run a command and report its own peak resident set size, free of the caller's.

Linux folds into a process's ru_maxrss the peak of the memory image it was exec'd from: at exec the kernel records
the old image's high-water mark, and a child spawned by fork or vfork starts from its parent's image. A command
started straight from a pytest worker that has grown to 1.7 GB therefore reports at least 1.7 GB, whatever it did
itself. This small interpreter (`-S -E`: no site, no PYTHON* variables) takes that first exec; the command is its
child, forked from an image of a few megabytes, so the command's ru_maxrss is its own.

`python -S -E measured.py FD PROGRAM ARGS...` runs PROGRAM ARGS with this process's file descriptors, environment
and working directory; forwards the signals a test sends it; writes the command's ru_maxrss (KiB) to FD; and ends
as the command ended: its exit code, or killed by the same signal. Should this process be killed (a test's
timeout), the command is killed with it."""

import ctypes
import os
import signal
import sys

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
PR_SET_PDEATHSIG = 1


def main() -> None:
    report, argv = int(sys.argv[1]), sys.argv[2:]
    pid = 0
    pending: list[int] = []

    def forward(signum: int, frame: object) -> None:
        if pid:
            os.kill(pid, signum)
        else:
            pending.append(signum)

    handled = [s for s in FORWARDED if signal.getsignal(s) is not signal.SIG_IGN]  # an ignored one stays ignored
    for s in handled:
        signal.signal(s, forward)
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        try:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # killed before the line above took effect
                os._exit(137)
            for s in (*handled, signal.SIGPIPE, signal.SIGXFSZ):  # as the command would start from a shell
                signal.signal(s, signal.SIG_DFL)
            os.close(report)
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    pid = child
    for s in pending:
        os.kill(pid, s)
    _, status, usage = os.wait4(pid, 0)  # retried after a forwarded signal (PEP 475)
    os.write(report, f"{usage.ru_maxrss}\n".encode())
    os.close(report)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
