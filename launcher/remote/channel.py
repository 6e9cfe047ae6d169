"""One exec per host for a launch: it prepares the host, answers the preflight, then follows.

A launch used to spend three SSH execs per host before a task could start (upload and
preflight, ``follow``, then the start), each booting a Python on the host. Now the first exec
writes the agent from its stdin, answers the preflight as its first line, and then waits: the
launcher's first line on that stdin (a ping, or the start of the job's tasks) makes it start
the host agent and follow it, so the same channel becomes the host's event stream. If the launch
stops at preflight (a busy port on another host), the launcher closes the channel and the host
is left without a host agent.

``AgentChannel`` is the launcher's side: it holds the first line for the preflight and every
later line until the supervisor attaches its handlers (``attach``), then passes them straight on.

``up`` without ``[sync]`` (``preflight._fast_preflight``, ``HostSession.open_channel``,
``launcher/remote/channel.py``) runs ONE command per host, and its channel is never closed between
preflight and the end of the job:

1. The shell makes the host run dir (0700) and the outputs (exit 98 names them), then ``exec``s the
   host's python with a bootstrap (``BOOTSTRAP``) that takes the agent from the host's cache
   (``~/.cache/distlaunch/agent/<sha256>.pyz``, trusted only as ``BOOTSTRAP``'s comment says) or
   else asks for it (``#agent send``) and reads exactly the agent's size from stdin, checks its
   sha256, writes ``agent.pyz`` (0600, through ``agent.pyz.tmp-<pid>``, removed if the write
   fails) and runs ``preflight ... --then-follow`` from it in the same interpreter: one Python boot
   per host for the whole launch, and the ~490 KB archive crosses the link once per version.
2. ``preflight`` prints its answer (python, TensorFlow's version from package metadata, failed path
   checks, busy and picked ports) as the first line; the launcher reads it from the channel
   (``AgentChannel.first_line``). A host without that python ends with 127 and is named.
3. The verb then imports the host agent's modules and waits on stdin. The launcher judges every
   host's answer; if any host has a problem it closes every channel, the verbs end on EOF, and no
   host agent was ever started. With several hosts the verb runs with ``--listen HOST``: its answer
   also names the ports it now holds open (``listening``; the checked ones and the picked ones,
   whose bound sockets it kept), each connection greeted with ``distlaunch-reach HOST`` by one
   accept thread. The launcher sends every host at once a ``#reach {"targets": [...]}`` line (the
   other hosts' cluster tasks at their TF_CONFIG address and port, ``launcher/remote/reach.py``);
   the verb connects to all of them in parallel (non-blocking, 3 s), reads each greeting (another
   host's greeting there: a wrong ``tf_address``), and answers one ``#reach {"failed": [...]}`` line
   (``AgentChannel.ask``). Any failed pair stops the launch as above, one line per pair. The ports
   stay held until the next line on stdin, which the launcher sends only once every host answered;
   the verb then closes them before it forks the host agent, so the tasks find them free.
4. Otherwise the supervisor takes each channel as that host's follow stream (``take_channel``; lines
   that came before are held by ``AgentChannel`` and handed over in order) and sends its first line
   there: the ``start`` request of the first role. On that line the verb forks the host agent
   (inheriting the imported modules), connects to it and follows it as ``follow --pinged`` does,
   passing the line on; the ``#re`` answer and the tasks' events come back on the same channel.

Before, a launch cost three execs per host (upload and preflight, ``follow``, ``start``), each
booting a Python there. Slurm hosts, whose host agent must be a step of its own, and ``up`` with
``[sync]`` (which runs between upload and preflight) keep the step-by-step path: upload, preflight,
then ``follow`` and ``start`` as verbs. The reach check is the same there: the preflight verb runs
as a channel of its own (``HostSession.open_preflight``; for Slurm in a launch,
``open_channel(follow=False)``), answers ``#reach`` as above, and ends on EOF when the launcher
closes it after the check. A plan with one host has no pairs and skips it; local-transport hosts
count as hosts. The SSH socket runs with ``TCP_NODELAY``: an exec's several small packets otherwise
wait for delayed ACKs (~40 ms a round trip on Linux).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

from launcher.transport import LineStream

#: installs the agent zipapp in the host run dir, then runs an agent verb from it in this same
#: interpreter: one Python boot per host. Its arguments: the archive's size and sha256, the run
#: dir's ``agent.pyz``, the host's cache folder and the folder its trust is judged up to (the
#: home; "" for no cache). It first says on stdout ``#agent cached`` (the cache holds the archive:
#: the launcher sends nothing) or ``#agent send`` (the launcher then sends exactly that many bytes,
#: and the rest of stdin is the follow channel's). The cache is used only when it and every folder
#: up to the top are real directories of this user's that no one else may write, and the file is a
#: regular file of the user's, not writable by others, opened without following a link; what it
#: holds runs only when its sha256 is the launcher's. Otherwise the archive is sent, checked
#: against the same hash, written to the run dir as before and kept in the cache only where the
#: cache is trusted. Writes go through ``NAME.tmp-<its pid>``, removed if the write fails; one that
#: a killed writer left is removed by the next upload (session.py, ``stale_upload_cleanup``; in the
#: cache, by the next store).
BOOTSTRAP = """\
import hashlib, os, stat, sys, time
size, digest, path, cache, top = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
KEEP = 4
STALE_TMP_S = 600
if cache and top:
    # a home that is a link (/home/u -> /gpfs/u) is judged where it leads; "//" and "/" collapse
    rest = os.path.relpath(os.path.normpath(cache), os.path.normpath(top))
    top = os.path.realpath(top)
    cache = "" if rest.startswith("..") else os.path.normpath(os.path.join(top, rest))
def trusted():
    if not cache or not (cache + "/").startswith(top.rstrip("/") + "/"):
        return False
    d = cache
    while True:
        try:
            st = os.lstat(d)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return False
        if d == top:
            return True
        parent = os.path.dirname(d)
        if parent == d:
            return False
        d = parent
def cached():
    try:
        fd = os.open("%s/%s.pyz" % (cache, digest), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022 or st.st_size != size:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            got = f.read(size + 1)
        if hashlib.sha256(got).hexdigest() != digest:
            return None
        os.utime(fd)  # the newest used: kept longest
        return got
    except OSError:
        return None
    finally:
        os.close(fd)
def write(target, data):
    tmp = "%s.tmp-%d" % (target, os.getpid())  # this writer's own: a stale one names a dead pid
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
def keep(data):
    d = top
    for part in cache[len(top):].split("/"):
        if part:
            d = d.rstrip("/") + "/" + part
            try:
                os.mkdir(d, 0o700)
            except FileExistsError:
                pass
    if not trusted():
        return
    write("%s/%s.pyz" % (cache, digest), data)
    kept = []
    for name in os.listdir(cache):
        full = cache + "/" + name
        pid = name.rsplit(".tmp-", 1)[-1] if ".tmp-" in name else ""
        if pid.isdigit():
            # a home shared by several hosts (NFS): a pid of this host says nothing of another's
            # writer, so only a temp file both dead here and old is someone's leftover
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                try:
                    if time.time() - os.lstat(full).st_mtime > STALE_TMP_S:
                        os.unlink(full)
                except OSError:
                    pass
            except OSError:
                pass
        elif name.endswith(".pyz"):
            kept.append((os.lstat(full).st_mtime, full))
    for _, old in sorted(kept, reverse=True)[KEEP:]:
        os.unlink(old)
data = cached() if trusted() else None
os.write(1, b"#agent cached\\n" if data is not None else b"#agent send\\n")
if data is None:
    data = bytearray()
    while len(data) < size:
        chunk = os.read(0, min(65536, size - len(data)))
        if not chunk:
            break
        data += chunk
    if len(data) < size:
        sys.stderr.write("agent upload cut short: %d of %d bytes\\n" % (len(data), size))
        sys.exit(98)
    data = bytes(data)
    if hashlib.sha256(data).hexdigest() != digest:
        sys.stderr.write("agent upload does not match its sha256\\n")
        sys.exit(98)
    if cache:
        try:
            keep(data)
        except OSError:
            pass  # the cache only saves time
try:
    write(path, data)
except OSError as exc:
    sys.stderr.write("cannot write %s: %s\\n" % (path, exc))
    sys.exit(98)
if sys.path and sys.path[0] == "":
    sys.path[0] = path  # not the current directory (the home over SSH): a ~/psutil must not shadow
else:
    sys.path.insert(0, path)
from launcher.agent import main
sys.exit(main(sys.argv[6:]))
"""


class AgentChannel(LineStream):
    """A host's exec channel whose first line answers the preflight and whose later lines are
    the host agent's event stream, handed to whoever ``attach``es."""

    def __init__(self) -> None:
        self.stream: LineStream | None = None
        self._lock = threading.Lock()
        self._first: Future[str | None] = Future()
        self._agent: Future[str | None] = Future()  # the bootstrap's ``#agent cached|send`` line
        self._held: list[str] = []
        self._on_line: Callable[[str], None] | None = None
        self._on_close: Callable[[int | None], None] | None = None
        self._closed = False
        self._exit_code: int | None = None
        self._asked: tuple[str, Future[str | None]] | None = None  # ``ask``'s prefix and its answer
        #: what the host printed before the answer (a login script's greeting): kept for errors
        self.noise: list[str] = []

    # -- fed by the stream's reader thread --------------------------------------------------------

    def feed(self, line: str) -> None:
        with self._lock:
            if not self._first.done():
                if line.startswith("#agent ") and not self._agent.done():
                    self._agent.set_result(line[len("#agent "):].strip())
                elif line.startswith("{"):
                    self._first.set_result(line)
                else:  # the answer is one JSON object; a shell rc file may print before it
                    self.noise = [*self.noise[-4:], line]
                return
            if self._asked is not None and line.startswith(self._asked[0]):
                self._asked[1].set_result(line)
                self._asked = None
                return
            handler = self._on_line
            if handler is None:
                self._held.append(line)
                return
        handler(line)  # the one reader thread: lines stay in order

    def ended(self, code: int | None) -> None:
        with self._lock:
            self._closed, self._exit_code = True, code
            if not self._first.done():
                self._first.set_result(None)
            if not self._agent.done():
                self._agent.set_result(None)
            if self._asked is not None:
                self._asked[1].set_result(None)
                self._asked = None
            handler = self._on_close
        if handler is not None:
            handler(code)

    # -- the launcher's side ------------------------------------------------------------------------

    def agent_wanted(self, timeout: float) -> str | None:
        """The bootstrap's word on the agent: ``cached`` (nothing to send) or ``send``; None if the
        command ended without one. Raises TimeoutError after ``timeout`` s."""
        return self._agent.result(timeout)

    def first_line(self, timeout: float) -> str | None:
        """The preflight's answer line (the first that starts with ``{``); None if the command
        ended without one. Raises TimeoutError after ``timeout`` s."""
        return self._first.result(timeout)

    def ask(self, line: str, prefix: str, timeout: float) -> str | None:
        """Send ``line`` and wait for the answer line that starts with ``prefix`` (before ``attach``:
        the reach check); None if the command ended first. Raises TimeoutError after ``timeout`` s."""
        answer: Future[str | None] = Future()
        with self._lock:
            if self._closed:
                return None
            self._asked = (prefix, answer)
        if not self.send(line.encode() + b"\n", timeout):
            return None
        return answer.result(timeout)

    def attach(self, on_line: Callable[[str], None], on_close: Callable[[int | None], None]) -> None:
        """From now on every line goes to ``on_line`` (first those held meanwhile), and the end
        to ``on_close`` (at once if it ended already)."""
        with self._lock:
            for line in self._held:
                on_line(line)
            self._held.clear()
            self._on_line, self._on_close = on_line, on_close
            closed, code = self._closed, self._exit_code
        if closed:
            on_close(code)

    # -- LineStream ---------------------------------------------------------------------------------

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()

    def end(self, timeout: float = 2.0) -> None:
        """EOF to the verb, up to ``timeout`` s for it to exit, then close (transport LineStream.end)."""
        if self.stream is not None:
            self.stream.end(timeout)

    @property
    def alive(self) -> bool:
        return self.stream is not None and self.stream.alive

    def wait(self, timeout: float | None = None) -> int | None:
        return self.stream.wait(timeout) if self.stream is not None else None

    def stderr_tail(self) -> str:
        return self.stream.stderr_tail() if self.stream is not None else ""

    def send(self, data: bytes, timeout: float | None = None) -> bool:
        return self.stream is not None and self.stream.send(data, timeout)
