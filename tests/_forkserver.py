"""``python -m MODULE``, ``python -c CODE`` and ``python SCRIPT`` without paying for the
interpreter start and ``import feedq`` each time (about 1.3 s on 2 cores).

:func:`run` is a stand-in for ``subprocess.run([sys.executable, ...],
capture_output=True, text=True, timeout=..., env=..., cwd=...)``: the program
still runs in a process of its own, forked from a warm interpreter (the
*zygote*, one per start-up environment) that has imported feedq and nothing
else. The child takes the request's environment, working directory,
``sys.argv`` and ``sys.path[0]`` as Python would set them, gets ``/dev/null``
as stdin and files as stdout/stderr, runs the program with ``runpy`` and ends
through the interpreter's own exit (atexit handlers, non-daemon threads
joined, the traceback of an uncaught exception, exit status 1). Its exit code
comes back as ``returncode`` (negative: killed by that signal). A run past
``timeout`` is killed and raises ``subprocess.TimeoutExpired``.

What a fork cannot give is a fresh interpreter: anything read once at import
time (``PYTHONWARNINGS``, ``FEEDQ_PURE_PYTHON``, ...) comes from the zygote's
environment, which is why each distinct environment (but for
``PYTEST_CURRENT_TEST``) gets its own zygote. Tests
of start-up itself (signals sent to a fresh child, import errors) keep using
``subprocess``.
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
from typing import Any

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
    """The zygote's loop (in the zygote process): one JSON request a line on
    stdin, answered with the child's pid and then its exit code. Returns only
    in a forked child, with the request that child is to run."""
    import gc
    import importlib

    for name in preload:
        importlib.import_module(name)
    gc.freeze()  # the children's collections leave the preloaded objects' pages shared
    stdin, stdout = sys.stdin.buffer, sys.stdout
    stdout.write(json.dumps({"ready": os.getpid()}) + "\n")
    stdout.flush()
    while True:
        line = stdin.readline()
        if not line:
            sys.exit(0)
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            return dict(request)
        stdout.write(json.dumps({"pid": pid}) + "\n")
        stdout.flush()
        _, status, usage = os.wait4(pid, 0)
        stdout.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status),
                                 "cpu_s": usage.ru_utime + usage.ru_stime}) + "\n")
        stdout.flush()


def _run_child(request: dict[str, Any]) -> None:
    """In the forked child: become ``python <argv>`` and run it."""
    import random
    import runpy

    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
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


class _Zygote:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.dir = tempfile.mkdtemp(prefix="feedq-zygote-")
        self.log = open(os.path.join(self.dir, "zygote.log"), "wb")  # noqa: SIM115 - closed in close()
        boot = _BOOT.format(root=str(ROOT), preload=PRELOAD)
        self.proc = subprocess.Popen([sys.executable, "-c", boot], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=dict(env), cwd=ROOT)
        self.lock = threading.Lock()
        self.calls = 0
        self.cpu_s = 0.0  # CPU time of the children that ended (their own, not their children's)
        self._read(120, "the zygote to start")

    def _read(self, timeout: float | None, what: str) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise subprocess.TimeoutExpired(self.proc.args, timeout or 0)
        line = self.proc.stdout.readline()
        if not line:
            log = Path(self.log.name).read_text(errors="replace")
            raise RuntimeError(f"the fork server died waiting for {what}:\n{log[-4000:]}")
        return dict(json.loads(line))

    def run(self, mode: str, target: str, args: Sequence[str], env: Mapping[str, str], cwd: str,
            timeout: float | None) -> subprocess.CompletedProcess[str]:
        with self.lock:
            self.calls += 1
            out = os.path.join(self.dir, f"{self.calls}.out")
            err = os.path.join(self.dir, f"{self.calls}.err")
            request = {"mode": mode, "target": target, "args": list(args), "env": dict(env), "cwd": cwd,
                       "stdout": out, "stderr": err}
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            pid = self._read(30, "a fork")["pid"]
            started = time.monotonic()
            try:
                ended = self._read(timeout, "the child")
                returncode, timed_out = ended["returncode"], False
                self.cpu_s += ended["cpu_s"]
            except subprocess.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)
                returncode = self._read(30, "the killed child")["returncode"]
                timed_out = True
            stdout, stderr = _text(out), _text(err)
            os.unlink(out)
            os.unlink(err)
            argv = [sys.executable, *([] if mode == "script" else [mode]), target, *args]
            if timed_out:
                raise subprocess.TimeoutExpired(argv, time.monotonic() - started, stdout, stderr)
            return subprocess.CompletedProcess(argv, returncode, stdout, stderr)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
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


def _text(path: str) -> str:
    """A file's bytes as ``subprocess.run(text=True)`` gives them (locale
    encoding, universal newlines)."""
    with open(path, "rb") as f:
        return io.TextIOWrapper(io.BytesIO(f.read())).read()


_ZYGOTES: dict[frozenset[tuple[str, str]], _Zygote] = {}
_ZYGOTES_LOCK = threading.Lock()


#: Variables that change while the tests run and that nothing reads at import.
_NOT_START_UP = ("PYTEST_CURRENT_TEST",)


def _zygote(env: Mapping[str, str]) -> _Zygote:
    key = frozenset((k, v) for k, v in env.items() if k not in _NOT_START_UP)
    with _ZYGOTES_LOCK:
        if key not in _ZYGOTES or _ZYGOTES[key].proc.poll() is not None:
            _ZYGOTES[key] = _Zygote(env)
        return _ZYGOTES[key]


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
        timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([sys.executable, *argv], capture_output=True,
    text=True, ...)`` for ``argv`` = ``["-m", MODULE, *ARGS]``, ``["-c",
    CODE, *ARGS]`` or ``[SCRIPT, *ARGS]``, run in a child of a warm
    interpreter."""
    if argv[0] in ("-m", "-c"):
        mode, target, *args = argv
    elif not argv[0].startswith("-"):
        mode, (target, *args) = "script", argv
    else:
        raise ValueError(f"only python SCRIPT, -m and -c runs fork: {list(argv)}")
    env = dict(os.environ if env is None else env)
    return _zygote(env).run(mode, target, args, env, os.fspath(cwd or os.getcwd()), timeout)


@atexit.register
def close_all() -> None:
    """End every zygote (each exits when its stdin closes)."""
    with _ZYGOTES_LOCK:
        for z in _ZYGOTES.values():
            z.close()
        _ZYGOTES.clear()
