"""The supervisor's links to the hosts: each host's event stream and the requests sent on it.

A follower stream per host delivers the agents' event lines; each is decoded, checked against the
task's sequence numbers (an event resent after an attach is dropped, a gap is told), its time
corrected by the host's clock offset, and handed to the loop in batches. Requests (``start``) ride
the same channel with an id and wait for their answer (the lines are the agent stream of
launcher/protocol/lines.py). A stream that closes or falls silent is reconnected with back-off
and resumed from the offsets already received.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
import time
from concurrent.futures import Future
from typing import Any

from launcher import events as ev
from launcher.agent.spec import SCRIPT_VAR, task_script
from launcher.autolog.steptime import PROFILER_PORT_ENV
from launcher.errors import HostError, HostGone
from launcher.events import Event, EventDecodeError
from launcher.plan import render_command, split_secrets, task_container, tf_config
from launcher.profile.overrides import mask_secrets
from launcher.protocol.lines import AgentAnswer, AgentRequest, Heartbeat, Note, Ping, Unwritten, decode_agent
from launcher.remote.session import HostSession
from launcher.supervise.core import SupervisorCore, TaskRuntime
from launcher.telemetry.causes import with_cause
from launcher.transport import LineStream

RECONNECT_MAX_DELAY = 10.0
#: a follower sends at least a heartbeat every second; this much silence means the link is dead
#: (a partitioned TCP connection only errors out after minutes of retransmissions)
STREAM_SILENCE_SECONDS = 5.0
#: followers touch their host's lease only while these pings arrive (agent `follow --pinged`)
PING_SECONDS = 1.0
#: how long a start sent on a follow channel may wait for the host agent's answer
AGENT_REQUEST_SECONDS = 60.0
#: a ping's bytes (an empty line), sent every PING_SECONDS
PING = Ping().encode()


class HostLinks(SupervisorCore):
    """Follow every host's agents, send them requests, and keep the links up."""

    def agent_spec(self, rt: TaskRuntime) -> dict[str, Any]:
        spec = rt.spec
        env, _secret = split_secrets(spec.env, self.profile.secrets)  # secrets go by stdin, not spec.json
        env["TF_CONFIG"] = json.dumps(tf_config(self.plan, spec.task_id, self.ports))
        profiler_port = self.profiler_ports.get(spec.task_id)
        if PROFILER_PORT_ENV in env or not spec.autolog:  # the profile closed it: no server, no port
            self.profiler_ports.pop(spec.task_id, None)
        elif profiler_port is not None:  # autolog starts the task's profiler server there
            env[PROFILER_PORT_ENV] = str(profiler_port)
        metrics = self.profile.metrics
        patterns = {k: v for k, v in (("step", metrics.step), ("loss", metrics.loss)) if v}
        patterns.update(metrics.extra)
        command = self._command(rt)
        secret = self._secret_script(rt) is not None
        return {
            "run": self.run_id, "task": spec.task_id, "host": spec.host,
            "incarnation": rt.incarnation, "restarts": rt.restarts,
            "command": mask_secrets(command, set(self.profile.secrets)) if secret else command,
            "workdir": spec.workdir, "env": env, "gpus": list(spec.gpus),
            "grace_seconds": spec.grace_seconds,
            "orphan_grace_seconds": self.profile.orphan_grace_seconds,
            "sample_interval": self.profile.sample_interval, "metrics": patterns,
            "setup": [mask_secrets(line, set(self.profile.secrets)) for line in spec.setup] if secret
            else list(spec.setup),
            "shell": spec.shell or "", "autolog": spec.autolog, "script_in_env": secret,
            "container": self._container_json(rt), "outputs": self.sessions[spec.host].outputs_dir,
        }

    def _container_json(self, rt: TaskRuntime) -> dict[str, Any] | None:
        container = task_container(self.plan, rt.spec)
        return container.to_json() if container is not None else None

    def _command(self, rt: TaskRuntime) -> str:
        session = self.sessions[rt.spec.host]
        return render_command(rt.spec.command, port=rt.port, run_dir=session.base_dir,
                              outputs=session.outputs_dir)

    def _secret_script(self, rt: TaskRuntime) -> str | None:
        """The task's whole script (setup lines, then the command) when a value from the launcher's
        environment is in it: it then goes to the agent with the secrets, never in spec.json."""
        script = task_script(list(rt.spec.setup), self._command(rt), task_container(self.plan, rt.spec) is not None)
        return script if any(secret in script for secret in self.profile.secrets if secret) else None

    def _task_secrets(self, rt: TaskRuntime) -> dict[str, str]:
        secret = split_secrets(rt.spec.env, self.profile.secrets)[1]
        script = self._secret_script(rt)
        if script is not None:
            secret[SCRIPT_VAR] = script
        return secret

    def _start_on(self, session: HostSession, rts: list[TaskRuntime]) -> None:
        """Write the specs of ``rts`` and start them through the host's agent: as a request on the
        open follow channel where there is one (no SSH exec, no interpreter to boot), else with
        the `start` verb; one round trip either way."""
        secrets = {rt.spec.slug: self._task_secrets(rt) for rt in rts}
        specs = {rt.spec.slug: self.agent_spec(rt) for rt in rts}
        secrets = {slug: env for slug, env in secrets.items() if env}
        answer = self._ask_agent(session.name, {"op": "start", "specs": specs, "tasks": list(specs),
                                                "secrets": secrets})
        if answer is None:
            session.start_tasks(specs, secrets)
        else:
            session.started(answer, list(specs))

    def _ask_agent(self, host: str, request: dict[str, Any],
                   timeout: float = AGENT_REQUEST_SECONDS) -> dict[str, Any] | None:
        """Send ``request`` on the host's follow channel (an ``AgentRequest``) and wait for its
        ``AgentAnswer``; None when there is no live channel to send it on, or it ended before the
        answer came (the caller uses the verb then; a live agent refuses to start a task twice)."""
        stream = self._streams.get(host)
        if stream is None or not self._host_up.get(host):
            return None
        request_id = next(self._request_ids)
        answer: Future[dict[str, Any] | None] = Future()
        self._requests[request_id] = (host, answer)
        line = AgentRequest(request, request_id).encode()
        with self._send_locks[host]:
            sent = stream.send(line, timeout)
        if not sent:
            self._requests.pop(request_id, None)
            return None
        try:
            return answer.result(timeout)  # None: the channel ended; the caller uses the verb
        except TimeoutError:
            raise HostError(f"host {host}: its agent did not answer within {timeout:g} s") from None
        finally:
            self._requests.pop(request_id, None)

    def _on_answer(self, answer: AgentAnswer) -> None:
        waiting = self._requests.get(answer.id) if answer.id is not None else None
        if waiting is not None and not waiting[1].done():
            waiting[1].set_result(answer.body)

    def _fail_requests(self, host: str) -> None:
        """The host's follow channel ended: requests waiting on it go by the `start` verb instead."""
        for where, waiting in list(self._requests.values()):
            if where == host and not waiting.done():
                waiting.set_result(None)

    def _start_follower(self, host: str) -> None:
        session = self.sessions[host]
        offsets = dict(self._offsets[host])

        pending: list[tuple[str, float]] = []
        pending_lock = threading.Lock()

        def drain() -> None:
            with pending_lock:
                batch = pending[:]
                pending.clear()
            self._on_lines(host, batch)

        def on_line(line: str) -> None:
            self._last_heard[host] = time.monotonic()  # here, not on the loop: a busy loop is no silence
            message = decode_agent(line)
            if isinstance(message, AgentAnswer):  # to _ask_agent, whose caller waits on a host thread
                self._on_answer(message)
                return
            with pending_lock:  # lines that arrive while the loop is busy go to it in one call
                pending.append((line, time.time()))
                first = len(pending) == 1
            if first:
                self._call(drain)

        def on_close(code: int | None) -> None:
            self._fail_requests(host)
            self._call(lambda: self._on_stream_closed(host, stream))

        self._last_heard[host] = time.monotonic()
        channel = session.take_channel()  # the preflight's channel, waiting to become this stream
        stream: LineStream
        if channel is not None:
            stream = self._streams[host] = channel  # before attach: a channel that ended is told at once
            channel.attach(on_line, on_close)
            return
        stream = session.follow(offsets, on_line, on_close)
        self._streams[host] = stream

    def _on_lines(self, host: str, batch: list[tuple[str, float]]) -> None:
        """The lines a host's stream delivered while the loop was busy, in order. Runs of events
        that change nothing here (metrics, logs: nearly all of them) are published together; a
        task's state change is published and acted on in its place."""
        held: list[tuple[Event, str | None]] = []
        for line, received in batch:
            decoded = self._decode(host, line, received)
            if decoded is None:
                continue
            event = with_cause(decoded[0], self._tails, self._peers)
            if event is not decoded[0]:
                decoded = (event, None)
            raised = self.outputs.on_event(event) if event.task in self.tasks else []
            if event.kind == ev.STATE and event.task in self.tasks:
                self._publish_many(held)
                held = []
                self._publish(*decoded)
                self._on_task_state(self.tasks[event.task], event)
                continue
            held.append(decoded)
            if raised:  # log policies and NaN loss: conditions, maybe the job's end (on_nan = stop)
                held = self._on_output_conditions(held, raised)
            if event.kind == ev.METRIC and event.task in self.tasks:
                step = event.get("step")
                if isinstance(step, int) and self.tasks[event.task].state == ev.RUNNING:
                    self.watchdog.on_step(event.task, step, time.monotonic())
        self._publish_many(held)

    def _on_output_conditions(self, held: list[tuple[Event, str | None]],
                              raised: list[Event]) -> list[tuple[Event, str | None]]:
        held.extend((condition, None) for condition in raised)
        stop = self.outputs.stop_reason()
        if stop is None or self._finishing:
            return held
        self._publish_many(held)
        self._finish(ev.JOB_FAILED, stop)
        return []

    def _decode(self, host: str, line: str, received: float) -> tuple[Event, str | None] | None:
        """The event a stream line carries and the text to store for it (None: encode it again),
        or None for a heartbeat, an undecodable line or an event already recorded."""
        message = decode_agent(line)
        if isinstance(message, str):
            return self._decode_event(host, message, received, in_file=True)
        if isinstance(message, Heartbeat):
            self._observe_clock(host, message.ts, received)
        elif isinstance(message, Note):
            return self._note(host, message)
        elif isinstance(message, Unwritten):  # an event its host could not write (a full disk)
            return self._decode_event(host, message.event, received, in_file=False)
        return None  # anything else: an answer no one waits for any more, a marker of a newer agent

    def _decode_event(self, host: str, line: str, received: float, in_file: bool) -> tuple[Event, str | None] | None:
        """``in_file``: the line is in the task's event file on the host, and moves the offset a
        later follower resumes from."""
        try:
            event = Event.from_json(line)
        except EventDecodeError:
            return None
        if event.task is not None:
            if in_file:
                slug = event.task.replace(":", "-")
                offsets = self._offsets[host]
                size = len(line) if line.isascii() else len(line.encode())
                offsets[slug] = offsets.get(slug, 0) + size + 1
            if not self._in_sequence(event):
                return None
        ts = self._clocks[host].correct(event.ts, received)
        if ts == event.ts:
            return event, line
        # a host whose clock is off: its times moved onto ours
        data = dict(event.data)
        if isinstance(data.get("exited_at"), int | float):  # the task's end, for the root cause
            data["exited_at"] = self._clocks[host].correct(float(data["exited_at"]), received)
        return dataclasses.replace(event, ts=ts, data=data), None

    def _note(self, host: str, note: Note) -> tuple[Event, str | None] | None:
        """An agent's word that is in no event file (its disk is full): a task's condition."""
        if note.task not in self.tasks:
            return None
        return ev.condition_event(self.run_id, note.task, note.condition, note.active,
                                  f"{note.reason} (host {host})" if note.reason else ""), None

    def _in_sequence(self, event: Event) -> bool:
        """False for an event already recorded (a resend after attach from older offsets);
        a gap in the task's ``seq`` is told and kept in state.json."""
        seq = event.data.get("seq")
        task = str(event.task)
        if not isinstance(seq, int):
            return True
        last = self._last_seq.get(task, -1)
        if seq <= last:
            return False
        if seq > last + 1:
            missing = seq - last - 1
            self.lost_events[task] = self.lost_events.get(task, 0) + missing
            self._notice(f"{task}: {missing} event(s) lost between its agent and the launcher "
                         f"(seq {last + 1}..{seq - 1})")
        self._last_seq[task] = seq
        return True

    def _observe_clock(self, host: str, host_ts: float, received: float) -> None:
        clock = self._clocks[host]
        was_off = clock.offset != 0.0
        clock.observe(host_ts, received)
        if clock.offset != 0.0 and not was_off:
            self._notice(f"host {host}: {clock.describe()}; its event times are corrected by the launcher "
                         "(sync its clock with NTP)")

    def _on_stream_closed(self, host: str, stream: LineStream, why: str = "event stream lost") -> None:
        if self._finishing or self._done.is_set() or self._streams.get(host) is not stream:
            return
        self._host_up[host] = False
        del self._streams[host]  # its late on_close must not count as a second loss
        self._publish(ev.host_event(self.run_id, host, "unreachable", f"{why}; reconnecting"))
        self._executors[host].submit(stream.close)  # off the loop: closing may wait for its reader
        self._executors[host].submit(self._reconnect, host, 1.0)

    def _ping_streams(self) -> None:
        """Tell every follower the launcher still reads it; on its own thread, as a send into a
        dead link may block. Without pings a partitioned host's follower would keep the lease fresh."""
        while not self._done.wait(PING_SECONDS):
            for host, stream in list(self._streams.items()):
                with self._send_locks[host]:  # never inside a request line
                    stream.send(PING)

    def _check_silence(self) -> None:
        """Treat a stream that sent nothing, not even a heartbeat, for STREAM_SILENCE_SECONDS as lost."""
        if self._finishing:
            return
        now = time.monotonic()
        for host, stream in list(self._streams.items()):
            silent = now - self._last_heard.get(host, now)
            if self._host_up[host] and silent > STREAM_SILENCE_SECONDS:
                self._on_stream_closed(host, stream, f"no heartbeat for {silent:.0f}s")

    def _reconnect(self, host: str, delay: float) -> None:
        """On the host's thread: reconnect with back-off; the loop then resumes the stream."""
        session = self.sessions[host]
        while not self._finishing and not self._done.is_set():
            time.sleep(delay)
            try:
                session.host.close()
                session.host.connect()
                if host in self._undetach:
                    session.set_detached(False)
                    self._undetach.discard(host)
            except HostGone as exc:  # e.g. the Slurm allocation ended: the job cannot go on
                self._call(functools.partial(self._finish, "Failed", str(exc)))
                return
            except HostError:
                delay = min(delay * 2, RECONNECT_MAX_DELAY)
                continue
            self._call(functools.partial(self._resume_stream, host, delay))
            return

    def _resume_stream(self, host: str, delay: float) -> None:
        """On the loop: follow the host's agents again from the offsets already received."""
        if self._finishing:
            return
        try:
            self._start_follower(host)
        except HostError:
            self._executors[host].submit(self._reconnect, host, min(delay * 2, RECONNECT_MAX_DELAY))
            return
        self._host_up[host] = True
        self._publish(ev.host_event(self.run_id, host, "up", "reconnected"))
