"""The typed profile (DESIGN.md section 4) and the plan derived from it.

``profile/`` turns TOML into these objects; ``plan.py`` turns a Profile into TaskSpecs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from launcher.agent.containerrt import ContainerSpec

Strategy = Literal["parameter_server", "multi_worker_mirrored", "custom"]
SuccessPolicy = Literal["chief", "all_workers"]
#: a task's restart policy: what each does is supervise/policy.py's wants_restart; docs/contributing.md
#: lists what a new value needs (its TFJob name in export/tfjob.py, tests that fail without it)
RestartPolicy = Literal["never", "on-failure", "always", "exit-code"]
RESTART_POLICIES: tuple[RestartPolicy, ...] = get_args(RestartPolicy)
HostKeyPolicy = Literal["reject", "accept-new"]
Transport = Literal["ssh", "openssh", "local", "slurm"]
#: transports that reach a host over SSH: the built-in client (paramiko) and the system ssh client
SSH_TRANSPORTS = ("ssh", "openssh")
OnStall = Literal["warn", "restart"]
GpuBusy = Literal["warn", "refuse"]
LocalNetwork = Literal["auto", "private", "host"]
OnNan = Literal["warn", "stop"]
LogAction = Literal["no_retry", "warn"]
#: what a lost host does: its tasks move to a spare (else the roles shrink, else the job fails),
#: the roles go on with fewer tasks (down to each role's min_count), or the job fails
OnHostLost = Literal["replace", "shrink", "fail"]
#: when a role below its target count grows onto a spare (see launcher/supervise/growth.py)
GrowPolicy = Literal["at-checkpoint", "now", "never"]

ROLES = ("chief", "ps", "worker", "evaluator")
#: the order tasks are listed and started in: ps first, then workers, evaluator, chief last
START_ORDER = ("ps", "worker", "evaluator", "chief")
#: what [notify] can tell about before a job dies (launcher/supervise/alerts.py)
ALERT_NAMES = ("stall", "straggler", "nan", "host_unreachable", "host_lost", "moved", "drained", "throughput_drop",
               "gpu_idle", "gpu_error", "disk_low", "checkpoint_old")
#: ...and what it tells about with no ``on`` key, besides task failures and the job's end
DEFAULT_ALERTS = ("stall", "nan", "host_lost", "moved", "gpu_error")


@dataclass(frozen=True)
class SshSettings:
    user: str | None = None
    identity_file: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    host_key_policy: HostKeyPolicy = "reject"
    connect_timeout: float = 10.0
    ssh_port: int = 22
    #: the OpenSSH client config to resolve addresses through (``ssh -G``); None: none
    ssh_config: str | None = "~/.ssh/config"
    #: [ssh] client: the transport of ssh hosts that name none ("openssh": the system ssh client)
    client: str = "builtin"
    #: keys the profile left at their defaults, which ~/.ssh/config may then set
    unset: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostConfig:
    name: str
    address: str
    transport: Transport = "ssh"
    ssh: SshSettings = field(default_factory=SshSettings)
    gpus: tuple[int, ...] = ()
    #: what TF_CONFIG uses; None: ``address``, or the HostName ~/.ssh/config gives an alias
    tf_address: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # under the role's and [defaults]' env
    #: the [hosts.X] table this entry came from when its address was a host range (X), else None
    group: str | None = None
    #: transport "slurm": the allocation (job id) whose steps run this host's commands
    slurm_job_id: str | None = None
    #: transport "slurm" in a heterogeneous job: the component this node belongs to (srun --het-group)
    slurm_het_group: int | None = None
    #: a shell command the host's agent runs every few seconds; exit 0: this host is about to go
    #: (its own [hosts.X] value, else the one under [defaults] or [ssh]; None: none)
    preemption_notice: str | None = None


@dataclass(frozen=True)
class SlurmComponent:
    """One component of a heterogeneous Slurm job (``[roles.X.slurm]``, or [slurm]'s own keys for the
    roles without one): the nodes, partition and GPUs its roles' tasks get. None: [slurm]'s value."""

    roles: tuple[str, ...]
    nodes: int | None = None
    partition: str | None = None
    gpus_per_node: int | None = None
    sbatch_args: tuple[str, ...] = ()  # more #SBATCH options of this component alone


@dataclass(frozen=True)
class SlurmConfig:
    """[slurm]: hosts come from the allocation; the rest shapes `export sbatch`'s script."""

    nodes: int | None = None  # sbatch --nodes; inside an allocation the allocation decides
    time: str | None = None  # sbatch --time, e.g. "02:00:00"
    partition: str | None = None
    account: str | None = None
    gpus_per_node: int | None = None  # sbatch --gpus-per-node
    sbatch_args: tuple[str, ...] = ()  # more #SBATCH lines, e.g. ("--exclusive",)
    #: before the time limit: requeue the job (the run goes on) or stop the run; None: Slurm kills it
    time_limit_action: Literal["requeue", "stop"] | None = None
    time_limit_margin_seconds: float = 300.0
    #: a heterogeneous job: one component per role that names its own ``[roles.X.slurm]``, after the
    #: one of the roles that do not (component 0, where the batch script and the supervisor run);
    #: () or one component: a homogeneous job
    components: tuple[SlurmComponent, ...] = ()

    @property
    def heterogeneous(self) -> bool:
        return len(self.components) > 1

    def component_of(self, role: str) -> int | None:
        """The index of ``role``'s component (``srun --het-group``); None in a homogeneous job."""
        if not self.heterogeneous:
            return None
        return next((i for i, c in enumerate(self.components) if role in c.roles), None)


@dataclass(frozen=True)
class TaskDefaults:
    """Settings every task has; [defaults] and each [roles.X] produce one of these."""

    command: str
    python: str | None = None  # None: the launcher's own interpreter on local hosts, python3 over ssh
    workdir: str = "."
    env: dict[str, str] = field(default_factory=dict)
    restart: RestartPolicy = "on-failure"
    max_restarts: int = 3
    grace_seconds: float = 10.0
    setup: tuple[str, ...] = ()  # shell lines run before the command, in its shell
    shell: str | None = None  # e.g. "bash -lc"; None: /bin/sh -c
    min_uptime: float = 10.0  # a failure sooner than this after start, every time, is a crash loop
    autolog: bool = True  # step/loss/placement from unmodified scripts (launcher/autolog/recorder.py)
    stall_seconds: float = 600.0  # step not advancing this long -> stalled; 0 = off (ps: off unless set)
    on_stall: OnStall = "warn"
    on_nan: OnNan = "warn"  # a NaN or Inf loss: a condition (warn), or the job fails (stop)
    #: a directory of checkpoints autolog cannot see, watched by the agent ("": none)
    checkpoint_dir: str = ""
    container: ContainerSpec | None = None  # the task runs in this image (None: on the host)


@dataclass(frozen=True)
class RoleConfig:
    name: str
    count: int
    hosts: tuple[str, ...]
    port: int | None  # None: a free port is picked per task at launch
    gpus_per_task: int
    settings: TaskDefaults  # [defaults] merged with this role's overrides (env merged key by key)
    #: the fewest tasks this role may go on with when a host is lost (1..count; 0 with count 0).
    #: The reader always sets it (default: count, or 1 for parameter_server workers); 0 from a
    #: constructor that leaves it out means count (``fewest``)
    min_count: int = 0
    #: the most tasks this role may grow to (``resize``, a re-admitted or added host); 0: ``count``
    max_count: int = 0

    @property
    def fewest(self) -> int:
        """``min_count``, with 0 (left out) read as ``count``."""
        return self.min_count or self.count

    @property
    def most(self) -> int:
        """``max_count``, with 0 (left out) read as ``count``."""
        return max(self.max_count, self.count)


@dataclass(frozen=True)
class MetricsConfig:
    step: str | None = None
    loss: str | None = None
    extra: dict[str, str] = field(default_factory=dict)  # other name = regex pairs


@dataclass(frozen=True)
class LogPolicy:
    """One [[log_policies]] table: a line of a task's output that matches ``pattern`` (a regex)
    raises a condition (warn) or keeps the failing incarnation from being restarted (no_retry)."""

    pattern: str
    action: LogAction


@dataclass(frozen=True)
class NotifyConfig:
    """[notify]: a command run (and a webhook posted to) on the launcher when the job ends, a task
    fails, or an alert starts or clears; the dashboard bell."""

    command: str | None = None
    timeout_seconds: float = 30.0
    bell: bool = True
    webhook: str | None = None
    on: tuple[str, ...] = DEFAULT_ALERTS
    throughput_drop_percent: float = 50.0
    throughput_window_seconds: float = 60.0
    gpu_idle_minutes: float = 10.0
    disk_low: int = 5 * 1024**3  # bytes
    checkpoint_old_minutes: float = 60.0
    #: an alert that cleared is not told again before this many minutes
    repeat_minutes: float = 10.0


@dataclass(frozen=True)
class SyncConfig:
    """[sync]: a launcher-side folder copied (changed files only) into each host's workdir before start."""

    source: str = "."  # relative to the profile's folder
    exclude: tuple[str, ...] = ()  # gitignore-style; .git/ is always excluded

    def source_dir(self, profile_dir: Path) -> Path:
        return (profile_dir / Path(self.source).expanduser()).resolve()


@dataclass(frozen=True)
class Overrides:
    """What one run changes: dotted keys set from the command line, arguments for every command
    (profile/overrides.py applies them)."""

    sets: tuple[str, ...] = ()  # "KEY=VALUE" as given
    args: tuple[str, ...] = ()  # appended to every task's command (shell-quoted)


@dataclass(frozen=True)
class Profile:
    path: Path
    name: str
    strategy: Strategy
    success_policy: SuccessPolicy
    backoff_limit: int
    orphan_grace_seconds: float
    sample_interval: float
    defaults: TaskDefaults
    hosts: dict[str, HostConfig]
    roles: dict[str, RoleConfig]  # keyed by role name, in ROLES order
    metrics: MetricsConfig
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    #: per job on each host, {name} filled; {outputs} in commands (see profile/keys.py for the rules)
    outputs: str = "~/distlaunch/outputs/{name}"
    sync: SyncConfig | None = None  # no [sync]: the code is already on the hosts
    #: the profile as read (recorded in the run dir: attach and restarts use it, not the file)
    text: str = ""
    #: this run's --set keys and the arguments appended to every command
    overrides: Overrides = field(default_factory=Overrides)
    #: values that came from the launcher's environment (${env:VAR}): masked wherever shown or written
    secrets: frozenset[str] = frozenset()
    slurm: SlurmConfig | None = None  # [slurm]: hosts from the Slurm allocation
    #: a worker below this fraction of the workers' median steps/s for ``straggler_seconds`` is flagged
    straggler_ratio: float = 0.7
    straggler_seconds: float = 30.0
    #: hosts may differ in TensorFlow major.minor (else preflight refuses a TensorFlow strategy's job)
    allow_version_skew: bool = False
    #: bytes; preflight warns below this at a host's outputs and run dir
    min_free_disk: int = 1024**3
    #: a task's newest checkpoints kept copied off their host (launcher's machine, each spare)
    checkpoint_copies_kept: int = 2
    #: bytes per second the checkpoint copies may average; 0: no limit
    checkpoint_copy_bandwidth: int = 50 * 1024**2
    #: the most of the time (percent) the checkpoint copies may take; the copier rests the rest
    checkpoint_copy_percent: int = 5
    #: what preflight does when a task's GPUs hold other processes' memory
    gpu_busy: GpuBusy = "warn"
    #: whether an all-local job runs in a private network namespace (launcher/commands/localnet.py)
    local_network: LocalNetwork = "auto"
    log_policies: tuple[LogPolicy, ...] = ()  # [[log_policies]], in the order written
    #: hosts (names in ``hosts``, ranges expanded) kept ready to replace a lost one; they run no task at start
    spares: tuple[str, ...] = ()
    #: seconds a host may be out of contact before it is lost (always > orphan_grace_seconds)
    host_lost_seconds: float = 120.0
    on_host_lost: OnHostLost = "replace"
    #: hosts the job may lose (moves, not restarts) before it fails; None: ``host_loss_limit``'s default
    max_host_losses: int | None = None
    #: seconds after its loss that a host answering again is re-admitted as a spare; 0: never
    readmit_after_seconds: float = 300.0
    grow: GrowPolicy = "at-checkpoint"
    #: the least seconds between two grows
    grow_every_seconds: float = 60.0
    #: a command that prints hosts to add to the running job (supervise/hostjoin.py); None: none
    host_discovery: str | None = None
    host_discovery_seconds: float = 30.0

    @property
    def directory(self) -> Path:
        return self.path.parent

    @property
    def host_loss_limit(self) -> int:
        """Hosts the job may lose before it fails: ``max_host_losses``, else one more than the spares."""
        return self.max_host_losses if self.max_host_losses is not None else len(self.spares) + 1


@dataclass(frozen=True)
class TaskSpec:
    """One task as the plan sees it. ``port`` is None where a free port is picked at launch."""

    task_id: str  # "worker:1"
    role: str
    index: int
    host: str  # host name in the profile
    address: str
    port: int | None
    gpus: tuple[int, ...]  # physical GPU indices on the host given to this task
    command: str  # rendered, placeholders filled ({port} only once the port is known)
    python: str
    workdir: str
    env: dict[str, str]  # the profile's env plus CUDA_VISIBLE_DEVICES; TF_CONFIG added at launch
    restart: RestartPolicy
    max_restarts: int
    grace_seconds: float
    in_cluster: bool  # False for the evaluator, which TF_CONFIG's cluster must not list
    setup: tuple[str, ...] = ()
    shell: str | None = None
    min_uptime: float = 10.0  # seconds; quicker failures with one exit code, again and again: crash loop
    autolog: bool = True
    stall_seconds: float = 0.0  # 0: no stall detection for this task
    on_stall: OnStall = "warn"
    on_nan: OnNan = "warn"
    #: the profile's checkpoint_dir, {role} {index} {task} filled ({outputs} at launch); "": none
    checkpoint_dir: str = ""

    @property
    def slug(self) -> str:
        """A file-name-safe form of the task id: ``worker-1``."""
        return self.task_id.replace(":", "-")


@dataclass(frozen=True)
class Plan:
    profile: Profile
    tasks: tuple[TaskSpec, ...]  # in START_ORDER, then by index
    #: by host name, the address ~/.ssh/config resolved an alias to (spares too): where a task
    #: placed on that host later (a move) is reached
    addresses: Mapping[str, str] = field(default_factory=dict)
    #: `up` decided the tasks run in a private network namespace (launcher/commands/localnet.py)
    private_network: bool = False

    def task(self, task_id: str) -> TaskSpec:
        for t in self.tasks:
            if t.task_id == task_id:
                return t
        raise KeyError(task_id)
