"""The signature table, row by row: every example line is found by its own row and by no row before it."""

from __future__ import annotations

import pytest

from launcher.telemetry.causes import PeerIndex, signature_cause
from launcher.telemetry.signatures import SIGNATURES

PEERS = PeerIndex([("ps:0", "localhost", 2222), ("worker:1", "10.0.0.7", 2223), ("chief:0", "localhost", 2224)])
EXAMPLES = [(sig.name, line) for sig in SIGNATURES for line in sig.examples]


def test_every_row_has_real_examples() -> None:
    assert all(sig.examples for sig in SIGNATURES)
    assert len({sig.name for sig in SIGNATURES}) == len(SIGNATURES)


@pytest.mark.parametrize(("name", "line"), EXAMPLES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(EXAMPLES)])
def test_each_example_is_told_by_its_own_row(name: str, line: str) -> None:
    first = next(sig for sig in SIGNATURES if sig.pattern.search(line))
    assert first.name == name
    cause = signature_cause(line.splitlines(), PEERS, "chief:0", "gpu1")
    assert cause is not None and cause.text


def test_a_peer_named_by_its_tensorflow_name_is_the_culprit() -> None:
    lines = ["The following tasks are unhealthy (stopped sending heartbeats):", "/job:worker/replica:0/task:1"]
    cause = signature_cause(lines, PEERS, "chief:0", "gpu1")
    assert cause is not None
    assert (cause.text, cause.culprit) == ("lost contact with worker:1: it stopped sending heartbeats", "worker:1")


def test_a_peer_named_by_address_is_the_culprit_whatever_the_address_is_written_as() -> None:
    line = ("tensorflow.python.framework.errors_impl.UnavailableError: failed to connect to all addresses; last "
            "error: UNKNOWN: ipv4:127.0.0.1:2222: Failed to connect to remote host: Connection refused")
    cause = signature_cause([line], PEERS, "chief:0", "gpu1")
    assert cause is not None and (cause.text, cause.culprit) == ("lost contact with ps:0", "ps:0")


def test_the_peer_is_found_on_the_lines_around_the_signature() -> None:
    """Real lines of a chief whose ps was killed (ParameterServerStrategy, TensorFlow 2.x)."""
    lines = ["tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:", "",
             "2 root error(s) found.",
             "Additional GRPC error information from remote target /job:ps/replica:0/task:0/device:CPU:0 while "
             "calling /tensorflow.eager.EagerService/RunComponentFunction:"]
    cause = signature_cause(lines, PEERS, "chief:0", "gpu1", first=0)
    assert cause is not None and (cause.text, cause.culprit) == ("lost contact with ps:0", "ps:0")


def test_the_task_itself_and_unknown_jobs_are_never_the_culprit() -> None:
    line = "UnavailableError: Socket closed /job:localhost/replica:0/task:0 /job:chief/replica:0/task:0"
    cause = signature_cause([line], PEERS, "chief:0", "gpu1")
    assert cause is not None and (cause.text, cause.culprit) == ("lost contact with a peer", None)


def test_a_missing_module_names_the_package_and_the_host() -> None:
    cause = signature_cause(["ModuleNotFoundError: No module named 'tensorflow_datasets.core'"], PEERS,
                            "worker:0", "gpu2")
    assert cause is not None and cause.text == "package tensorflow_datasets missing on host gpu2"


def test_a_tensor_too_large_for_the_cpu_is_not_called_a_gpu_out_of_memory() -> None:
    cpu = next(sig for sig in SIGNATURES if sig.name == "cpu_oom").examples[0]
    cause = signature_cause([cpu], PEERS, "worker:0", "gpu2")
    assert cause is not None and "GPU" not in cause.text and "host memory" in cause.text
