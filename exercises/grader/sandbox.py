"""The sandbox: where learner code runs, apart from the grader (chapter 00 says what it guarantees).

The trust boundary is the process, and in the Gradescope bundle also the user. This process (the
pytest run) holds everything a learner must not reach - the quiz keys, the reference checks, the
hidden tests, the results path - and never imports a learner's module. Learner code runs only in
*workers*: processes forked from a *zygote* this module starts with a clean environment, in a
staged folder that holds the learner's own files, the grader's child-side harness (child/, which
computes no expected value) and copies of minisgl with the course's answers cut out (redact.py).
A worker returns data (child/wire.py: never a pickle) which this side checks for type and size;
every score is computed here.

Where the grader runs as root (`--sandbox-user`, set by run_autograder), the zygote and its workers
run as that unprivileged user: the course's real files (keys, hidden tests, grader, the real
minisgl) and the results folder are then unreadable and unwritable for them, and a process cap
stops a fork bomb. Elsewhere (a learner's laptop) the process boundary alone holds.

Nothing a worker starts outlives the grade: this process makes itself the "child subreaper" of
everything below it, so even a daemon that double-forks stays its descendant, and `sweep` kills
every descendant when the capstone starts or ends and before results.json is written.
"""

from __future__ import annotations

import compileall
import json
import os
import pwd
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .child import wire
from .child.collectives import SLOT
from .off_limits import CAPSTONE, copy_entries
from .redact import redacted_copy

START_TIMEOUT_S = 120.0  # the zygote imports torch; a pool's ranks join their group (busy 2-core machine)
ERROR_GRACE_S = 3.0  # after one rank fails, how long the others get before they count as stuck
MAX_LIVE_WORKERS = 10  # older pools close when more would run (memory on a 4 GB autograder)
SANDBOX_NPROC = 256  # processes the sandbox user may have (a fork bomb stops there)
PR_SET_CHILD_SUBREAPER = 36
HARNESS = Path(__file__).resolve().parent / "child"
COURSE_ROOT = Path(__file__).resolve().parents[2]


class SandboxError(Exception):
    """The sandbox could not be set up (one line naming the fix); a grader problem, not the learner's."""


@dataclass(frozen=True)
class User:
    """Who the workers run as: another user (uid/gid), or this process's own (uid None)."""

    name: str | None
    uid: int | None = None
    gid: int | None = None

    @classmethod
    def named(cls, name: str | None) -> User:
        if not name:
            return cls(None)
        if os.geteuid() != 0:
            raise SandboxError(f"--sandbox-user {name}: only root can run workers as another user; leave it out")
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise SandboxError(f"--sandbox-user {name}: no such user (run_autograder creates minisgl-sandbox, "
                               "or falls back to nobody)") from None
        return cls(name, entry.pw_uid, entry.pw_gid)

    @property
    def separate(self) -> bool:
        return self.uid is not None


def _prctl(option: int, value: int) -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


@dataclass
class Reply:
    """One rank's checked reply: kind "ok" or "error", the decoded fields, the collectives made."""

    kind: str
    fields: dict[str, Any]
    collectives: list[tuple[str, str, str | None, str | None]]


class MalformedReply(Exception):
    """A worker sent something that is not a reply (the learner's code wrote on its socket)."""


def _strings(value: Any, limit: int = 200) -> bool:
    return type(value) is str and len(value) <= limit


def check_reply(message: Any) -> Reply:
    """The reply a worker sent, every field type-checked and decoded; MalformedReply otherwise."""
    if type(message) is not dict or message.get("kind") not in ("ok", "error"):
        raise MalformedReply("not a reply")
    collectives = message.get("collectives", [])
    if type(collectives) is not list or len(collectives) > 10_000 or not all(
            type(c) is list and len(c) in (4, 5) and all(x is None or _strings(x, 100) for x in c) for c in collectives):
        raise MalformedReply("a collectives log that is not [api, group, dtype, device, shape] strings")
    fields: dict[str, Any] = {}
    try:
        if message["kind"] == "error":
            error = message.get("error")
            if type(error) is not dict or not all(_strings(error.get(k), 4000) for k in ("type", "base", "message")) \
                    or type(error.get("not_implemented")) is not bool or type(error.get("off_limits")) is not bool \
                    or type(error.get("where")) is not list or not all(_strings(w, 400) for w in error["where"]):
                raise MalformedReply("an error account of the wrong shape")
            fields["error"] = {k: error[k] for k in ("type", "base", "message", "not_implemented", "off_limits")}
            fields["error"]["where"] = list(error["where"][:5])
            notes = message.get("notes", {})
            if type(notes) is not dict or not all(_strings(k, 40) and type(v) is int for k, v in notes.items()):
                raise MalformedReply("notes that are not names and counts")
            fields["error"]["notes"] = dict(notes)
        else:
            fields["value"] = wire.decode(message.get("value"))
            for name, kind in (("changed", list), ("aliased", bool), ("devices", list), ("kept_alive", str),
                               ("calls", int), ("started", int), ("modified", bool), ("unfinished", str),
                               ("trees", list), ("trees_after_append", list)):
                if name in message and message[name] is not None:
                    if type(message[name]) is not kind:
                        raise MalformedReply(f"field {name} is not a {kind.__name__}")
                    fields[name] = message[name]
            if not all(type(i) is int for i in fields.get("changed", [])):
                raise MalformedReply("field changed is not a list of ints")
            if not all(_strings(d, 20) for d in fields.get("devices", [])):
                raise MalformedReply("field devices is not a list of device names")
    except wire.WireError as error:
        raise MalformedReply(str(error)) from None
    return Reply(message["kind"], fields, [tuple(c) for c in collectives])  # type: ignore[misc]


@dataclass
class RunOutcome:
    """What a pool's ranks sent back for one job: replies by rank, the ranks that never answered,
    those whose reply was malformed, and the progress counters read when the job ended."""

    replies: dict[int, Reply]
    missing: list[int]
    malformed: dict[int, str]
    progress: list[tuple[int, int]]
    seconds: float


class WorkerPool:
    """`world_size` workers of one (implementation, task), joined in one torch.distributed group
    when there are several; reused from test to test, killed and rebuilt after a hang or a crash."""

    def __init__(self, sandbox: Sandbox, name: str, impl_dir: Path, minisgl_dir: Path, world_size: int) -> None:
        self.sandbox, self.name, self.world_size = sandbox, name, world_size
        self.progress_path, self._progress = sandbox.new_file("progress", name, SLOT.size * world_size)
        from minisgl.utils import free_port

        from .ranks import choose_backend

        device_type, backend = choose_backend(world_size)
        init_method = f"tcp://127.0.0.1:{free_port()}" if world_size > 1 else ""
        self.pids: list[int] = []
        self.sockets: list[socket.socket] = []
        try:
            for rank in range(world_size):
                spec = {"rank": rank, "world_size": world_size, "init_method": init_method, "backend": backend,
                        "device_type": device_type, "progress": str(self.progress_path),
                        "impl_dir": str(impl_dir), "minisgl_dir": str(minisgl_dir),
                        "log": str(sandbox.scratch / "logs" / f"{name}-rank{rank}.log")}
                mine, theirs = socket.socketpair()
                self.sockets.append(mine)
                self.pids.append(sandbox.fork(spec, theirs))
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        for rank, sock in enumerate(self.sockets):
            try:
                message = wire.receive(sock, deadline)
            except wire.WireError as error:
                raise SandboxError(f"grader worker {self.name} rank {rank} did not start ({error})") from None
            if type(message) is not dict or message.get("kind") != "ready":
                detail = message.get("message") if type(message) is dict else message
                raise SandboxError(f"grader worker {self.name} rank {rank} failed to start: {str(detail)[:500]}")

    @property
    def alive(self) -> bool:
        return bool(self.sockets) and all(_running(pid) for pid in self.pids)

    def run(self, requests: list[dict], timeout_s: float) -> RunOutcome:
        """Send request r to rank r; wait for every reply until `timeout_s` (or ERROR_GRACE_S after
        one rank failed). A pool that did not answer whole is closed: it cannot be trusted again."""
        start = time.monotonic()
        os.pwrite(self._progress, bytes(SLOT.size * self.world_size), 0)
        replies: dict[int, Reply] = {}
        malformed: dict[int, str] = {}
        for rank, request in enumerate(requests):
            try:
                wire.send(self.sockets[rank], request)
            except OSError:
                malformed[rank] = "its process had ended before the job was sent"
        deadline = start + timeout_s
        waiting = {sock: rank for rank, sock in enumerate(self.sockets) if rank not in malformed}
        while waiting:
            failed = malformed or any(r.kind == "error" for r in replies.values())
            if failed:
                deadline = min(deadline, time.monotonic() + ERROR_GRACE_S)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select(list(waiting), [], [], min(left, 0.5))
            for sock in ready:
                rank = waiting.pop(sock)
                try:
                    replies[rank] = check_reply(wire.receive(sock, time.monotonic() + max(5.0, left)))
                except wire.WireError as error:
                    malformed[rank] = ("its process ended during the job (it exited or crashed)"
                                       if "closed" in str(error) else f"its reply was unreadable ({error})")
                except MalformedReply as error:
                    malformed[rank] = f"its reply was not the grader's ({error}): did your code write on its socket?"
        progress = self.read_progress()
        missing = sorted(waiting.values())
        if missing or malformed:
            self.close()
        return RunOutcome(replies, missing, malformed, progress, time.monotonic() - start)

    def read_progress(self) -> list[tuple[int, int]]:
        """(collectives entered, index of the one it is in) per rank, as the ranks last wrote them
        (read through this side's handle, never by name: at most one slot per rank)."""
        data = os.pread(self._progress, SLOT.size * self.world_size, 0)
        return [SLOT.unpack_from(data, rank * SLOT.size) if len(data) >= (rank + 1) * SLOT.size else (0, -1)
                for rank in range(self.world_size)]

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
        self.sockets = []
        self.sandbox.kill_groups(self.pids)
        if self._progress >= 0:
            os.close(self._progress)
            self._progress = -1


def _running(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Sandbox:
    """One per grading run: the staged folder, the zygote, the pools. `current()` returns it."""

    def __init__(self, user: User, job_timeout_s: float) -> None:
        self.user, self.job_timeout_s = user, job_timeout_s
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        self.root = Path(tempfile.mkdtemp(prefix="minisgl-sandbox-"))
        self.lib, self.scratch = self.root / "lib", self.root / "scratch"
        # Folders that stay this process's own, so no name in them can be swapped for a link: the
        # files this side makes for the workers (progress, zygote-log) and the parents of the
        # folders it hands over (writable). Only scratch/ is the sandbox user's to write in.
        for folder in ("lib", "progress", "writable", "zygote-log"):
            (self.root / folder).mkdir()
        (self.root / "zygote-log").chmod(0o700)
        for folder in ("home", "tmp", "cache", "cache/kernels", "logs", "work"):
            (self.scratch / folder).mkdir(parents=True)
        shutil.copytree(HARNESS, self.lib / "harness" / "grader_child", ignore=shutil.ignore_patterns("__pycache__"))
        self._copy_kernels()
        self._minisgl: dict[bool, Path] = {}  # capstone? -> the folder holding that copy of minisgl
        self._impls: dict[str, Path] = {}
        self.pools: OrderedDict[tuple[str, str, int], WorkerPool] = OrderedDict()
        self.strikes: dict[tuple[str, str], int] = {}  # (impl, task) -> jobs that hung
        self._zygote: subprocess.Popen | None = None
        self._capstone_mode: bool | None = None  # which copy of minisgl the live pools use
        self._pool_count = 0
        self._zygote_starts = 0
        self._control: socket.socket | None = None
        self._publish(self.lib)
        for folder in ("", "home", "tmp", "cache", "cache/kernels", "logs", "work"):
            self.give(self.scratch / folder)
        self.root.chmod(0o755 if user.separate else 0o700)

    # ---- the staged folder ----------------------------------------------------------------------
    def _copy_kernels(self) -> None:
        """The C kernels this process built, where the workers' minisgl looks for them (their cache
        folder is their own: they cannot read this user's)."""
        from minisgl.utils import minisgl_cache_dir

        for library in (minisgl_cache_dir() / "kernels").glob("*.so"):
            shutil.copy2(library, self.scratch / "cache" / "kernels" / library.name)

    def _publish(self, path: Path) -> None:
        """Readable (not writable) by the sandbox user: folders 755, files 644, owned by us."""
        if not self.user.separate:
            return
        for folder, _, files in os.walk(path):
            os.chmod(folder, 0o755)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o644)

    def give(self, folder: Path) -> None:
        """Hand `folder`, which this process just made, to the sandbox user: opened without following
        a link, its owner changed through that handle (a name swapped for a link is refused)."""
        if not self.user.separate:
            return
        handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchown(handle, self.user.uid, self.user.gid)
        finally:
            os.close(handle)

    def new_file(self, folder: str, name: str, size: int) -> tuple[Path, int]:
        """A new zero-filled file of `size` bytes in this process's `folder` that the sandbox user may
        write, and this side's read-write handle on it: made here (O_EXCL, never a planted link),
        read back only through the handle."""
        path = self.root / folder / name
        handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.ftruncate(handle, size)
        if self.user.separate:
            os.fchown(handle, self.user.uid, self.user.gid)
        return path, handle

    def writable_dir(self, name: str) -> Path:
        """A fresh folder the learner's code may write in (a test's ipc sockets), made in a folder of
        this process's own, so that its name cannot be swapped before it is handed over."""
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.root / "writable"))
        self.give(path)
        return path

    def shared_dir(self, name: str) -> Path:
        """A fresh folder this process writes and the sandbox may only read (a model checkpoint)."""
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.lib))
        path.chmod(0o755 if self.user.separate else 0o700)
        return path

    def publish(self, path: Path) -> None:
        self._publish(path)

    def minisgl_dir(self, capstone: bool) -> Path:
        """The folder holding the copy of minisgl for the capstone or for every other task."""
        if capstone not in self._minisgl:
            import minisgl

            entries, plugged = copy_entries(capstone)
            out = self.lib / ("minisgl-capstone" if capstone else "minisgl-tasks")
            out.mkdir()
            redacted_copy(Path(minisgl.__file__).resolve().parent, out, entries, plugged)
            compileall.compile_dir(out, quiet=1)
            self._publish(out)
            self._minisgl[capstone] = out
        return self._minisgl[capstone]

    def impl_dir(self, impl: str) -> Path:
        """The learner's files of `impl` (an implementation folder) staged as the package `exercises`,
        and nothing else: not the grader, not the tests, not the quizzes."""
        if impl not in self._impls:
            out = self.root / "impl" / str(len(self._impls))
            package = out / "exercises"
            package.mkdir(parents=True)
            (package / "__init__.py").write_text("")
            for source in sorted(Path(impl).glob("ch[0-9][0-9]_*.py")):
                shutil.copyfile(source, package / source.name)
            self._publish(out.parent)
            self._impls[impl] = out
        return self._impls[impl]

    # ---- processes ------------------------------------------------------------------------------
    def _environment(self) -> dict[str, str]:
        """A clean environment: no grader paths, no results path, nothing of this process's."""
        env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": str(self.scratch / "home"),
               "TMPDIR": str(self.scratch / "tmp"), "MINISGL_CACHE_DIR": str(self.scratch / "cache"),
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"}
        for name, value in os.environ.items():
            if name in ("CC", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_HOME") or \
                    name.startswith(("NCCL_", "TRITON_")):
                env[name] = value
        return env

    def _off_limits(self) -> list[Path]:
        """What the sandbox user must not read: the reference, the quiz keys, the hidden tests and the
        real engine's source (each folder, and a few files in it: a folder that cannot be listed
        may still let a file through by its name)."""
        import minisgl

        folders = [COURSE_ROOT / "solutions", COURSE_ROOT / "solutions" / "quizzes",
                   COURSE_ROOT / "exercises" / "tests" / "hidden", Path(minisgl.__file__).resolve().parent]
        paths = []
        for folder in (f for f in folders if f.is_dir()):
            paths += [folder, *sorted(folder.glob("*.py"))[:3]]
        return paths

    def _probe(self) -> None:
        """Refuse to start when the sandbox user can read anything off limits: asked as that user, by
        a tiny interpreter that tries to list or open each path and prints those it could."""
        probe = ("import os, sys\n"
                 "for p in sys.argv[1:]:\n"
                 "    try:\n"
                 "        os.listdir(p) if os.path.isdir(p) else open(p, 'rb').close()\n"
                 "        print(p)\n"
                 "    except OSError:\n"
                 "        pass\n")
        try:
            done = subprocess.run([sys.executable, "-I", "-c", probe, *map(str, self._off_limits())],
                                  user=self.user.uid, group=self.user.gid, extra_groups=[], env=self._environment(),
                                  cwd=self.scratch / "work", stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=START_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):
            return  # an interpreter it cannot start: the zygote's start says why
        readable = done.stdout.splitlines()
        if readable:
            raise SandboxError(f"the sandbox user {self.user.name} can read {readable[0]}: learner code must not; "
                               "make the course readable by root alone (chmod 700 its folder)")

    def _start_zygote(self) -> None:
        import minisgl

        if self.user.separate and not self._zygote_starts:
            self._probe()
        course_roots = sorted({str(COURSE_ROOT), str(Path(minisgl.__file__).resolve().parents[1])})
        nproc = SANDBOX_NPROC if self.user.separate else None
        control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        boot = (f"import sys; sys.path.insert(0, {str(self.lib / 'harness')!r}); "
                f"from grader_child.zygote import main; main({theirs.fileno()}, {course_roots!r}, {nproc!r})")
        self._zygote_starts += 1  # a fresh log each start, in a folder of this process's own
        _, log = self.new_file("zygote-log", f"zygote{self._zygote_starts}.log", 0)
        kwargs: dict[str, Any] = {}
        if self.user.separate:
            kwargs = {"user": self.user.uid, "group": self.user.gid, "extra_groups": []}
        try:
            self._zygote = subprocess.Popen(
                [sys.executable, "-I", "-c", boot], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, cwd=self.scratch / "work", env=self._environment(),
                start_new_session=True, **kwargs)
        finally:
            theirs.close()
        control.settimeout(START_TIMEOUT_S)
        try:
            ready = control.recv(1 << 16)
        except (socket.timeout, OSError):
            ready = b""
        # what the zygote printed before any learner code ran (its workers print to logs of their own)
        tail = os.pread(log, 800, max(0, os.fstat(log).st_size - 800)).decode(errors="replace")
        os.close(log)
        if not ready:
            who = f"user {self.user.name}" if self.user.separate else "this user"
            raise SandboxError(f"the sandbox could not start {sys.executable} as {who} (can that user read the "
                               f"interpreter and its packages?): {tail.strip() or 'no output'}")
        control.settimeout(None)
        self._control = control

    def start(self) -> None:
        """Start the zygote now (and again if it was killed): a sandbox that cannot start fails the
        whole run at once, with the reason, rather than every test one by one."""
        if self._zygote is None or self._zygote.poll() is not None:
            self._start_zygote()

    def fork(self, spec: dict, worker_socket: socket.socket) -> int:
        """A new worker forked from the zygote, talking on `worker_socket` (closed here)."""
        self.start()
        assert self._control is not None
        try:
            socket.send_fds(self._control, [json.dumps(spec).encode()], [worker_socket.fileno()])
            self._control.settimeout(START_TIMEOUT_S)
            reply = json.loads(self._control.recv(1 << 16) or b"{}")
        except (OSError, ValueError):
            reply = {}
        finally:
            worker_socket.close()
        if type(reply.get("pid")) is not int:
            self._zygote.kill()  # it will be started again for the next pool
            raise SandboxError("the sandbox's zygote did not fork a worker (was it killed?)")
        return reply["pid"]

    def pool(self, impl: str, task: str, world_size: int) -> WorkerPool:
        """The live pool of `world_size` workers for (impl, task), started if needed."""
        key = (impl, task, world_size)
        pool = self.pools.get(key)
        if pool is not None and pool.alive:
            self.pools.move_to_end(key)
            return pool
        if pool is not None:
            self.close_pools([key])
        capstone = task == CAPSTONE
        if self._capstone_mode is not capstone:
            self._switch(capstone)
        live = sum(p.world_size for p in self.pools.values())
        while self.pools and live + world_size > MAX_LIVE_WORKERS:
            oldest = next(iter(self.pools))
            live -= self.pools[oldest].world_size
            self.close_pools([oldest])
        self._pool_count += 1
        name = f"pool{self._pool_count}"
        pool = self.pools[key] = WorkerPool(self, name, self.impl_dir(impl), self.minisgl_dir(capstone), world_size)
        return pool

    def _switch(self, capstone: bool) -> None:
        """The capstone's copy of minisgl keeps what the other tasks' copy cuts out, so the two are
        never in use at once: entering or leaving the capstone closes every pool, kills whatever
        the sandbox started, and removes the capstone's copy when leaving."""
        self.close_pools(list(self.pools))
        self.sweep()
        if not capstone and True in self._minisgl:
            shutil.rmtree(self._minisgl.pop(True), ignore_errors=True)
        self._capstone_mode = capstone

    def close_pools(self, keys: list[tuple[str, str, int]]) -> None:
        for key in keys:
            pool = self.pools.pop(key, None)
            if pool is not None:
                pool.close()

    def descendants(self) -> list[Any]:
        """The processes the OS says this process started, at any depth (as their subreaper, it keeps
        even double-forked daemons among them), that run as the sandbox's user: the only processes
        this side ever signals. Never a pid a worker reported or wrote down."""
        import psutil

        uid = self.user.uid if self.user.separate else os.getuid()
        found = []
        for process in psutil.Process().children(recursive=True):
            try:
                if process.uids().real == uid:
                    found.append(process)
            except psutil.Error:
                pass
        return found

    def kill_groups(self, leaders: list[int]) -> None:
        """SIGKILL the sandbox's processes that are a worker of `leaders` or in its process group
        (what its code started, unless that left the group: sweep() finds those)."""
        import psutil

        for process in self.descendants():
            try:
                if process.pid in leaders or os.getpgid(process.pid) in leaders:
                    process.kill()
            except (psutil.Error, ProcessLookupError):
                pass

    def sweep(self) -> None:
        """Kill every process the sandbox started but the zygote (a sweep of this process's
        descendants: one by user would also kill another grade's sandbox running as the same user).
        Then reap what became our children."""
        import psutil

        keep = {self._zygote.pid} if self._zygote is not None and self._zygote.poll() is None else set()
        doomed = {p.pid: p for p in self.descendants() if p.pid not in keep}
        for process in doomed.values():
            try:
                process.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        psutil.wait_procs(list(doomed.values()), timeout=3)
        for process in doomed.values():  # orphans the subreaper adopted are ours to reap
            try:
                os.waitpid(process.pid, os.WNOHANG)
            except ChildProcessError:
                pass

    def close(self) -> None:
        """Every pool, the zygote, every process they started; then the staged folder."""
        self.close_pools(list(self.pools))
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._zygote is not None:
            self._zygote.kill()
            self._zygote.wait()
            self._zygote = None
        self.sweep()
        shutil.rmtree(self.root, ignore_errors=True)


_CURRENT: Sandbox | None = None
_SETTINGS: dict[str, Any] = {"user": None, "job_timeout_s": 30.0}


def configure(user: str | None, job_timeout_s: float) -> None:
    """Set by exercises/conftest.py from --sandbox-user and --rank-timeout."""
    _SETTINGS.update(user=user, job_timeout_s=job_timeout_s)


def current() -> Sandbox:
    """The run's sandbox, created on first use."""
    global _CURRENT
    if _CURRENT is None:
        _CURRENT = Sandbox(User.named(_SETTINGS["user"]), _SETTINGS["job_timeout_s"])
    return _CURRENT


def shutdown() -> None:
    """Close the run's sandbox, if any (idempotent): called before results.json is written."""
    global _CURRENT
    if _CURRENT is not None:
        _CURRENT.close()
        _CURRENT = None
