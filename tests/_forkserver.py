"""``python -m MODULE``, ``python -c CODE`` and ``python SCRIPT`` without
paying for the interpreter start and ``import feedq`` each time (about 1.3 s
of CPU on 2 cores).

:func:`run` stands in for ``subprocess.run([sys.executable, *argv],
capture_output=True, text=True, timeout=..., env=..., cwd=...)`` and
:func:`popen` for ``subprocess.Popen`` of the same (stdin a pipe or
``/dev/null``; stdout and stderr collected, read once the child ended). The
program still runs in a process of its own, forked from a warm interpreter
(the *zygote*, one per start-up environment) that has imported numpy and
feedq and nothing else (not torch, ray or tensorflow: feedq looks at what is
already imported). The child takes the request's environment, working
directory, ``sys.argv`` and ``sys.path[0]`` as Python would set them, and its
stdin, stdout and stderr; it runs the program with ``runpy`` and ends through
the interpreter's own exit (atexit handlers, non-daemon threads joined, the
traceback of an uncaught exception, exit status 1, death by SIGINT after a
``KeyboardInterrupt``). Its exit code comes back as ``returncode``
(negative: killed by that signal). A :func:`run` past ``timeout`` is killed
and raises ``subprocess.TimeoutExpired``.

What a fork cannot give is a fresh interpreter: anything read once at import
time (``PYTHONWARNINGS``, ``FEEDQ_PURE_PYTHON``, ...) comes from the zygote's
environment, which is why each distinct environment (but for
``PYTEST_CURRENT_TEST``) gets its own zygote. Tests of start-up itself (an
import that fails, what a fresh process imports, signals sent before the
program runs) keep using ``subprocess``.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]

#: What every zygote imports before it forks its first child.
PRELOAD = ("numpy", "feedq", "feedq.cli.main", "feedq.distributed")

_BOOT = (
    "import sys\n"
    "sys.path.insert(0, {root!r})\n"
    "from tests._forkserver import _serve, _run_child\n"
    "del sys.path[0]\n"
    "_run_child(_serve({preload!r}))\n"
)


def _serve(preload: Sequence[str]) -> dict[str, Any]:
    """The zygote's loop (in the zygote process; one thread): JSON requests,
    one a line on stdin, each answered with the child's pid once forked and
    with its exit code once it ended; any number of children at a time.
    Returns only in a forked child, with the request that child is to run."""
    import gc
    import importlib

    for name in preload:
        importlib.import_module(name)
    gc.freeze()  # the children's collections leave the preloaded objects' pages shared
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the select below
    children: dict[int, int] = {}  # pid -> request id

    def reply(message: dict[str, Any]) -> None:
        os.write(1, (json.dumps(message) + "\n").encode())  # not sys.stdout: its lock and buffer are forked

    reply({"ready": os.getpid()})
    pending = b""
    while True:
        ready, _, _ = select.select([0, wake_r], [], [])
        if wake_r in ready:
            try:
                while os.read(wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
        if 0 in ready:
            data = os.read(0, 1 << 16)
            if not data:  # the tests ended
                for pid in children:
                    os.kill(pid, signal.SIGKILL)
                sys.exit(0)
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.close(wake_r)
                    os.close(wake_w)
                    return dict(request)
                children[pid] = request["id"]
                reply({"id": request["id"], "pid": pid})
        while children:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
            if pid == 0:
                break
            reply({"id": children.pop(pid), "returncode": os.waitstatus_to_exitcode(status),
                   "cpu_s": usage.ru_utime + usage.ru_stime})


def _run_child(request: dict[str, Any]) -> None:
    """In the forked child: become ``python <argv>`` and run it."""
    import random
    import runpy

    stdin = os.open(request["stdin"], os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the child's stdin for good
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    random.seed()  # a fresh process would not share its parent's random state
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    mode, target, args = request["mode"], request["target"], request["args"]
    if mode == "-m":
        sys.argv = ["-m", *args]  # runpy sets argv[0] to the module's file
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif mode == "script":
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(os.path.realpath(target))
        runpy.run_path(target, run_name="__main__")
    else:  # "-c"
        sys.argv = ["-c", *args]
        sys.path[0] = ""
        main = sys.modules["__main__"]
        for key in [k for k in vars(main) if not (k.startswith("__") and k.endswith("__"))]:
            delattr(main, key)  # the zygote's own names; __spec__ (None) and the like stay
        exec(compile(target, "<string>", "exec"), vars(main))  # noqa: S102 - what python -c does


class Child:
    """A program running in a child of a zygote, like ``subprocess.Popen``."""

    def __init__(self, zygote: _Zygote, ident: int, args: list[str], stdin: IO[bytes] | None,
                 files: tuple[str, ...]) -> None:
        self._zygote, self._id, self.args, self.stdin, self._files = zygote, ident, args, stdin, files
        self.pid: int = zygote.wait_for(ident, "pid", 30)
        self.returncode: int | None = None
        self.cpu_s: float | None = None  # the child's own CPU time once it ended

    def poll(self) -> int | None:
        if self.returncode is None:
            ended = self._zygote.ended(self._id, 0)
            if ended is not None:
                self.returncode, self.cpu_s = ended
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            ended = self._zygote.ended(self._id, timeout)
            if ended is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self.returncode, self.cpu_s = ended
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def output(self) -> tuple[str, str]:
        """stdout and stderr as ``text=True`` gives them, once it ended (the files go)."""
        self.wait()
        if self.stdin is not None and not self.stdin.closed:
            self.stdin.close()
        out, err, *fifo = self._files
        texts = (_text(out), _text(err))
        for path in (out, err, *fifo):
            if os.path.exists(path):
                os.unlink(path)
        return texts


class _Zygote:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.dir = tempfile.mkdtemp(prefix="feedq-zygote-")
        self.log = open(os.path.join(self.dir, "zygote.log"), "wb")  # noqa: SIM115 - closed in close()
        boot = _BOOT.format(root=str(ROOT), preload=PRELOAD)
        # SIGINT back to the default: a test run started in the background (SIGINT
        # ignored) would otherwise leave its children without KeyboardInterrupt.
        self.proc = subprocess.Popen([sys.executable, "-c", boot], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=dict(env), cwd=ROOT,
                                     preexec_fn=_sigint_default)
        self.lock = threading.Lock()
        self.replies: dict[tuple[int | str, str], Any] = {}  # (request id, "pid" | "returncode") -> reply
        self.calls = 0
        self._buf = b""
        self._pump(120)
        if ("ready", "") not in self.replies:
            raise RuntimeError(f"the fork server did not start: {self._log()}")

    def _log(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-4000:]

    def _pump(self, timeout: float | None) -> None:
        """Read what replies came (waiting up to ``timeout`` for one) into ``replies``."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return
        data = os.read(fd, 1 << 16)
        if not data:
            raise RuntimeError(f"the fork server died:\n{self._log()}")
        self._buf += data
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            message = json.loads(line)
            if "ready" in message:
                self.replies["ready", ""] = message
            elif "pid" in message:
                self.replies[message["id"], "pid"] = message["pid"]
            else:
                self.replies[message["id"], "returncode"] = (message["returncode"], message["cpu_s"])

    def wait_for(self, ident: int, kind: str, timeout: float | None) -> Any:
        """The reply ``kind`` to request ``ident``; ``None`` after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while (ident, kind) not in self.replies:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left < 0:
                    return None
                self._pump(left)
            return self.replies.pop((ident, kind))

    def ended(self, ident: int, timeout: float | None) -> tuple[int, float] | None:
        result: tuple[int, float] | None = self.wait_for(ident, "returncode", timeout)
        return result

    def popen(self, mode: str, target: str, args: Sequence[str], env: Mapping[str, str], cwd: str,
              stdin_pipe: bool) -> Child:
        with self.lock:
            self.calls += 1
            ident = self.calls
        out = os.path.join(self.dir, f"{ident}.out")
        err = os.path.join(self.dir, f"{ident}.err")
        stdin: IO[bytes] | None = None
        files: tuple[str, ...] = (out, err)
        if stdin_pipe:
            fifo = os.path.join(self.dir, f"{ident}.in")
            os.mkfifo(fifo, 0o600)
            stdin = os.fdopen(os.open(fifo, os.O_RDWR), "wb")  # O_RDWR: opening does not wait for the child
            files += (fifo,)
        request = {"id": ident, "mode": mode, "target": target, "args": list(args), "env": dict(env),
                   "cwd": cwd, "stdin": fifo if stdin_pipe else os.devnull, "stdout": out, "stderr": err}
        with self.lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        argv = [sys.executable, *([] if mode == "script" else [mode]), target, *args]
        return Child(self, ident, argv, stdin, files)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # the zygote kills any child left and exits
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _text(path: str) -> str:
    """A file's bytes as ``subprocess.run(text=True)`` gives them (locale
    encoding, universal newlines)."""
    if not os.path.exists(path):  # the child died before it opened it
        return ""
    with open(path, "rb") as f:
        return io.TextIOWrapper(io.BytesIO(f.read())).read()


#: Variables that change while the tests run and that nothing reads at import.
_NOT_START_UP = ("PYTEST_CURRENT_TEST",)

#: Zygotes kept at most (about 150 MB each): the least recently used one goes first.
MAX_ZYGOTES = 3

_ZYGOTES: dict[frozenset[tuple[str, str]], _Zygote] = {}  # least recently used first
_ZYGOTES_LOCK = threading.Lock()


def _zygote(env: Mapping[str, str]) -> _Zygote:
    key = frozenset((k, v) for k, v in env.items() if k not in _NOT_START_UP)
    with _ZYGOTES_LOCK:
        zygote = _ZYGOTES.pop(key, None)
        if zygote is None or zygote.proc.poll() is not None:
            while len(_ZYGOTES) >= MAX_ZYGOTES:
                _ZYGOTES.pop(next(iter(_ZYGOTES))).close()
            zygote = _Zygote(env)
        _ZYGOTES[key] = zygote
        return zygote


def popen(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
          cwd: str | os.PathLike[str] | None = None, stdin_pipe: bool = False) -> Child:
    """``subprocess.Popen([sys.executable, *argv], ...)`` for ``argv`` =
    ``["-m", MODULE, *ARGS]``, ``["-c", CODE, *ARGS]`` or ``[SCRIPT,
    *ARGS]``, in a child of a warm interpreter; ``stdin_pipe``: the child's
    stdin is ``Child.stdin`` (else ``/dev/null``)."""
    if argv[0] in ("-m", "-c"):
        mode, target, *args = argv
    elif not argv[0].startswith("-"):
        mode, (target, *args) = "script", argv
    else:
        raise ValueError(f"only python SCRIPT, -m and -c runs fork: {list(argv)}")
    env = dict(os.environ if env is None else env)
    return _zygote(env).popen(mode, target, args, env, os.fspath(cwd or os.getcwd()), stdin_pipe)


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
        timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([sys.executable, *argv], capture_output=True,
    text=True, timeout=...)`` through :func:`popen`."""
    child = popen(argv, env=env, cwd=cwd)
    started = time.monotonic()
    try:
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(30)
        stdout, stderr = child.output()
        raise subprocess.TimeoutExpired(child.args, time.monotonic() - started, stdout, stderr) from None
    stdout, stderr = child.output()
    return subprocess.CompletedProcess(child.args, child.wait(), stdout, stderr)


@atexit.register
def close_all() -> None:
    """End every zygote (each exits when its stdin closes)."""
    with _ZYGOTES_LOCK:
        for z in _ZYGOTES.values():
            z.close()
        _ZYGOTES.clear()
