"""A container that never started is its cause in one line (launcher/telemetry/causes.py): the agent's
"container did not start: ..." wins over the output's lines, and the daemon's own line in the output
says the same where the agent's reason does not (an older agent: "exit code 125")."""

from __future__ import annotations

from launcher.telemetry.causes import PeerIndex, cause_of

DAEMON = ("docker: Error response from daemon: error gathering device information while adding custom device "
          '"/dev/none": no such file or directory.')


def test_the_agents_reason_is_the_cause() -> None:
    reason = 'container did not start: error gathering device information while adding custom device "/dev/none"'
    data = {"state": "failed", "exit_code": 125, "reason": reason, "host": "box"}
    lines = [DAEMON, "", "Run 'docker run --help' for more information",
             "tensorflow.python.framework.errors_impl.UnavailableError: Socket closed"]
    assert cause_of(data, lines, PeerIndex([]), "worker:0").text == reason


def test_the_daemons_line_alone_gives_the_same_cause() -> None:
    data = {"state": "failed", "exit_code": 125, "reason": "exit code 125", "host": "box"}
    cause = cause_of(data, [DAEMON, "", "Run 'docker run --help' for more information"], PeerIndex([]), "worker:0")
    assert cause.text == ('container did not start: error gathering device information while adding custom '
                          'device "/dev/none": no such file or directory')
