"""The one declaration of every profile key: its kind, bounds, default and one-line description.

The reader (``checks.py``) checks unknown keys and value types against these tables, and ``schema.py``
turns the same tables into the JSON Schema editors read, so the two cannot drift apart. Checks that
need more than one value (ports that collide, GPUs a host does not offer) stay in the reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from launcher.agent.containerrt import PULL_POLICIES, RUNTIMES
from launcher.model import RESTART_POLICIES, ROLES
from launcher.profile.names import (
    ADDRESS_PATTERN,
    ALERT_PATTERN,
    JOB_NAME_PATTERN,
    MAX_TASKS,
    USER_PATTERN,
    WEBHOOK_PATTERN,
)
from launcher.profile.names import (  # re-exported: what a host's name in [hosts.NAME] may be
    HOST_NAME_PATTERN as HOST_NAME_PATTERN,
)

#: what a value must be; each kind has one type message in the reader and one JSON Schema form
Kind = Literal[
    "string",  # any string
    "choice",  # one of ``choices``
    "integer",  # int (not bool), within ``minimum`` .. ``maximum``
    "number",  # int or float, >= 0, or > 0 with ``positive``
    "boolean",
    "path_or_false",  # a non-empty string, or false (turned off)
    "string_list",  # a list of strings
    "index_list",  # a list of distinct integers >= 0
    "env",  # a table of environment variable name -> string
    "regex_map",  # a table of name -> regex string
    "size",  # bytes: an integer >= 0, or a string with a unit ("1GiB", "500 MB")
    "rate",  # bytes per second: a size, optionally ending in "/s" ("50MiB/s"); 0: no limit
    "table",  # a sub-table with the keys of ``table``
    "table_or_false",  # a sub-table with the keys of ``table``, or false (turned off)
    "tables",  # a table of named sub-tables, each with the keys of ``table``
    "table_list",  # an array of tables ([[name]]), each with the keys of ``table``
]

#: what an environment variable name may look like
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
#: a size with a unit (launcher/profile/sizes.py reads it)
SIZE_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*([KMGT]i?B|[KMGT]|B)?\s*$"
RATE_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*([KMGT]i?B|[KMGT]|B)?\s*(/\s*s)?\s*$"
#: a container mount: "SRC:DST[:ro|rw]", SRC absolute or ~, DST absolute, no ',' (containerrt.mount_problem)
MOUNT_PATTERN = r"^(/|~(?=[/:]))[^:,]*:/[^:,]*(:(ro|rw))?$"
#: roles of which a job has at most one task
SINGLE_TASK_ROLES = ("chief", "evaluator")


@dataclass(frozen=True)
class Key:
    """One key of a profile table."""

    name: str
    kind: Kind
    doc: str
    default: object = None  # None: no fixed default (absent, or derived from other keys)
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    positive: bool = False  # numbers: > 0 rather than >= 0
    required: bool = False
    nonblank: bool = False  # strings: refused when empty or only spaces
    expected: str = ""  # lists: what the type message says is expected
    table: Table | None = None  # "table" and "tables": the keys of the sub-table(s)
    names: tuple[str, ...] = ()  # "tables": the only sub-table names allowed (else any valid name)
    pattern: str = ""  # strings: a rule of launcher/profile/names.py (the schema's pattern, the reader's words)
    item_pattern: str = ""  # string lists: what each item must match (the schema's; the reader words it)


@dataclass(frozen=True)
class Table:
    """The keys one profile table accepts, in the order they are documented."""

    doc: str
    keys: tuple[Key, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys)

    def __getitem__(self, name: str) -> Key:
        for key in self.keys:
            if key.name == name:
                return key
        raise KeyError(name)

    def default(self, name: str) -> object:
        return self[name].default


def _port(name: str, doc: str, default: int | None = None) -> Key:
    return Key(name, "integer", doc, default=default, minimum=1, maximum=65535)


def _preemption_notice(doc: str) -> Key:
    return Key("preemption_notice", "string", doc, nonblank=True)


#: [defaults] and [ssh]: the preemption notice of every host without one of its own
_DEFAULT_PREEMPTION_NOTICE = ("The preemption_notice of every host that sets none of its own in [hosts.NAME], "
                              "local hosts too; give it under [defaults] or under [ssh], not both.")


CONTAINER_KEYS = Table(
    "Run each task in a container image: host networking, the task's environment, workdir, outputs and "
    "run dir mounted at the same paths. A role's table overrides [defaults]' key by key; container = false "
    "in a role runs it without one.",
    (
        Key("image", "string", "The image: a registry reference (\"tensorflow/tensorflow:2.16.1-gpu\"), or for "
            "apptainer, enroot and pyxis a .sif / .sqsh file on the hosts. Required here or in [defaults].",
            nonblank=True),
        Key("runtime", "choice", "What runs it: docker (the default), podman, apptainer, enroot; on Slurm "
            "(with [slurm]) pyxis, srun --container-image, is the default and docker and podman are refused.",
            choices=RUNTIMES),
        Key("mounts", "string_list", "More host folders inside, \"SRC:DST\" or \"SRC:DST:ro\" (SRC absolute or "
            "~ on the host, DST absolute).", default=[], expected='a list like ["/data:/data:ro"]',
            item_pattern=MOUNT_PATTERN),
        Key("options", "string_list", "Extra flags for the runtime, one argument per item, as given "
            "(docker run / podman run / apptainer exec / enroot start / srun).", default=[],
            expected='a list of flags like ["--shm-size=8g"]'),
        Key("pull", "choice", "When the image is fetched before start: never, missing (not on the host), or "
            "always. pyxis fetches at every start.", default="missing", choices=PULL_POLICIES),
    ),
)

TASK_KEYS = Table(
    "Settings every task gets unless its role overrides them.",
    (
        Key("command", "string", "Shell command each task runs; placeholders {python} {role} {index} {task} "
            "{host} {port} {run_dir} {outputs}.", nonblank=True),
        Key("python", "string", "Interpreter for {python}; default: the launcher's own on local hosts, "
            "python3 over ssh.", nonblank=True),
        Key("workdir", "string", "Directory the command runs in; local hosts: relative to the profile file "
            "({profile_dir} allowed).", default="."),
        Key("env", "env", "Environment variables for the task (values that look like secrets are masked)."),
        Key("restart", "choice", "When a failed task is restarted (exit-code: only when killed by a signal).",
            default="on-failure", choices=RESTART_POLICIES),
        Key("max_restarts", "integer", "Restarts each task may spend.", default=3, minimum=0),
        Key("grace_seconds", "number", "Seconds between SIGTERM and SIGKILL when a task is stopped.",
            default=10.0),
        Key("min_uptime", "number", "Seconds a task must run before a failure no longer counts as quick: "
            "failing quicker with one exit code 3 times in a row (or on every allowed attempt) is a crash "
            "loop that ends the job; 0: never.", default=10.0),
        Key("setup", "string_list", "Shell lines run in the task's shell before the command, each only if the "
            "one before succeeded (source a venv, module load cuda).", default=[],
            expected='a list of shell lines like ["source ~/venv/bin/activate"]'),
        Key("shell", "string", "The shell that runs setup and command, e.g. \"bash -lc\" for a login shell; "
            "default: /bin/sh -c."),
        Key("autolog", "boolean", "Step, loss and placement from unmodified TensorFlow/Keras scripts (a "
            "start-up hook on the task's path); false turns it off.", default=True),
        Key("stall_seconds", "number", "A task whose step has not advanced this long while the job runs is "
            "marked stalled; 0: off. [defaults] does not reach ps tasks (set it under [roles.ps]).",
            default=600.0),
        Key("on_stall", "choice", "What a stall does: warn (an event) or restart (the strategy's usual "
            "recovery, counted like a failure).", default="warn", choices=("warn", "restart")),
        Key("on_nan", "choice", "What a NaN or Inf loss does: warn (a nan_loss condition, cleared when the "
            "loss is finite again) or stop (the job is torn down and fails).", default="warn",
            choices=("warn", "stop")),
        Key("checkpoint_dir", "string", "A directory the task writes checkpoints into that autolog cannot see "
            "(a script that writes its own files): the agent watches it and reports each new complete one; "
            "relative to the workdir; placeholders {role} {index} {task} {outputs}.", nonblank=True),
        Key("container", "table_or_false", CONTAINER_KEYS.doc, table=CONTAINER_KEYS),
    ),
)

SSH_KEYS = Table(
    "SSH settings for every ssh host; any of them can be overridden per host.",
    (
        Key("user", "string", "Login user; default: the local user.", pattern=USER_PATTERN),
        Key("identity_file", "string", "Private key file to log in with."),
        Key("known_hosts", "string", "known_hosts file host keys are checked against.",
            default="~/.ssh/known_hosts"),
        Key("host_key_policy", "choice", "What to do with a host key not in known_hosts (never silently "
            "auto-added).", default="reject", choices=("reject", "accept-new")),
        Key("connect_timeout", "number", "Seconds to wait for an SSH connection.", default=10.0,
            positive=True),
        _port("ssh_port", "Port the host's sshd listens on.", default=22),
        Key("ssh_config", "path_or_false", "OpenSSH client config the address is resolved through as `ssh -G` "
            "does (Host aliases, HostName, User, Port, IdentityFile, ProxyJump); values set in the profile win; "
            "false: not read.", default="~/.ssh/config"),
    ),
)

SSH_TABLE = Table(SSH_KEYS.doc, (
    *SSH_KEYS.keys,
    Key("client", "choice", "The SSH client of every ssh host without a transport of its own: builtin "
        "(paramiko) or openssh (the system ssh binary, as transport = \"openssh\").", default="builtin",
        choices=("builtin", "openssh")),
    _preemption_notice(_DEFAULT_PREEMPTION_NOTICE),
))

#: [defaults]: every task key, and the hosts' default preemption notice (not a task key: no role takes it)
DEFAULTS_KEYS = Table(TASK_KEYS.doc, (
    *TASK_KEYS.keys,
    _preemption_notice(_DEFAULT_PREEMPTION_NOTICE),
))

HOST_KEYS = Table(
    "One machine tasks run on.",
    (
        Key("address", "string", "Address or name of the host (\"localhost\" for this machine).",
            required=True, nonblank=True, pattern=ADDRESS_PATTERN),
        Key("transport", "choice", "How tasks are started there: over SSH with the built-in client (ssh), "
            "with the system ssh binary, multiplexed (openssh: Kerberos, PKCS#11/FIDO keys, 2FA, all of "
            "ssh_config), or locally without SSH. Default: ssh, or openssh where [ssh] client = \"openssh\".",
            default="ssh", choices=("ssh", "openssh", "local")),
        Key("gpus", "index_list", "GPU indices this host offers.", default=[],
            expected="a list of GPU indices like [0, 1]"),
        Key("tf_address", "string", "Address TF_CONFIG and {host} use for this host (e.g. its fast network); "
            "default: address.", pattern=ADDRESS_PATTERN),
        Key("env", "env", "Environment variables for every task on this host (e.g. NCCL_SOCKET_IFNAME); "
            "[defaults] and role env win over them."),
        _preemption_notice("Shell command the host's agent runs every few seconds while the job runs; exit 0 "
                           "says this host is about to go (a cloud preemption notice, a maintenance window), "
                           "and its tasks move off it as planned, not as failures; the first 4 KiB of its "
                           "output are read, within 10 s. No ${env:...} value: every user sees the command in "
                           "`ps` (read a secret on the host instead). Default: the one under [defaults] or [ssh]."),
        *SSH_KEYS.keys,
    ),
)

ROLE_SLURM_KEYS = Table(
    "With [slurm]: this role's tasks run in a component of their own of a heterogeneous Slurm job "
    "(#SBATCH hetjob; the tasks start as `srun --het-group` steps), e.g. ps on CPU nodes and workers on "
    "GPU nodes. The roles without this table share [slurm]'s component, where the supervisor runs; a key "
    "left out here takes [slurm]'s value.",
    (
        Key("nodes", "integer", "Nodes of this role's component (sbatch --nodes); default 1.", minimum=1),
        Key("partition", "string", "Partition of this role's component.", nonblank=True),
        Key("gpus_per_node", "integer", "GPUs per node of this role's component (sbatch --gpus-per-node).",
            minimum=0),
        Key("sbatch_args", "string_list", "More sbatch options of this role's component alone (one per "
            "#SBATCH line; [slurm]'s sbatch_args are the whole job's).", default=[],
            expected='a list of options like ["--constraint=cpu"]'),
    ),
)

ROLE_KEYS = Table(
    "The tasks of one role; any [defaults] key can be overridden here.",
    (
        Key("count", "integer", f"Number of tasks of this role (chief and evaluator: at most 1; all roles "
            f"together: at most {MAX_TASKS}).", default=1, minimum=0, maximum=MAX_TASKS),
        Key("hosts", "string_list", "Host names the tasks are spread over, in order; a host range's table "
            "name stands for its hosts that are not spares.",
            expected='a list of host names like ["gpu1"]'),
        _port("port", "Base port: the i-th task on a host gets port + i; omit to pick free ports at launch."),
        Key("gpus_per_task", "integer", "GPUs given to each task (sets CUDA_VISIBLE_DEVICES); 0: CPU only.",
            default=0, minimum=0),
        Key("min_count", "integer", "The fewest tasks this role may go on with when a host is lost (1 to "
            "count); default: count, or 1 for workers under strategy parameter_server.", minimum=1,
            maximum=MAX_TASKS),
        Key("max_count", "integer", "The most tasks this role may grow to (distlaunch resize, a host "
            "re-admitted or added); at least count; default: count.", minimum=1, maximum=MAX_TASKS),
        Key("slurm", "table", ROLE_SLURM_KEYS.doc, table=ROLE_SLURM_KEYS),
        *TASK_KEYS.keys,
    ),
)

NOTIFY_KEYS = Table(
    "Tell someone when the job ends, a task fails, or an alert starts or clears.",
    (
        Key("command", "string", "Shell command run on the launcher when the job ends or a task fails; "
            "$DISTLAUNCH_EVENT, $DISTLAUNCH_JOB_STATE, $DISTLAUNCH_REASON, $DISTLAUNCH_RUN_ID, "
            "$DISTLAUNCH_TASK tell it what happened.", nonblank=True),
        Key("timeout_seconds", "number", "Seconds the command may take before it is killed.", default=30.0,
            positive=True),
        Key("bell", "boolean", "Ring the terminal bell in the dashboard when the job ends.", default=True),
        Key("webhook", "string", "An http(s) URL that gets a JSON POST for each notification (Slack-style "
            "`text`, plus `event`, `alert`, `active`, `task`, `host`, `figure`, `run`).", nonblank=True,
            pattern=WEBHOOK_PATTERN),
        Key("on", "string_list", "Alerts told when they start and when they clear, besides task failures and "
            "the job's end: stall, straggler, nan, host_unreachable, host_lost, moved, drained, throughput_drop, "
            "gpu_idle, gpu_error, disk_low, checkpoint_old.",
            default=["stall", "nan", "host_lost", "moved", "gpu_error"],
            expected='a list of alert names, e.g. ["stall", "nan", "throughput_drop"]', item_pattern=ALERT_PATTERN),
        Key("throughput_drop_percent", "number", "throughput_drop: how far below the run's own recent steps/s.",
            default=50.0, positive=True, maximum=100),
        Key("throughput_window_seconds", "number", "throughput_drop: the window a rate is measured over; the "
            "reference is the median of the ten before.", default=60.0, positive=True),
        Key("gpu_idle_minutes", "number", "gpu_idle: minutes every GPU of a running task stays under 5%.",
            default=10.0, positive=True),
        Key("disk_low", "size", "disk_low: free space at outputs or the run dir on any host under this "
            '(bytes, or a size like "5GiB").', default=5 * 1024**3),
        Key("checkpoint_old_minutes", "number", "checkpoint_old: minutes since a running task's last checkpoint.",
            default=60.0, positive=True),
        Key("repeat_minutes", "number", "An alert that cleared is not told again before this many minutes.",
            default=10.0),
    ),
)

SYNC_KEYS = Table(
    "Code to the hosts: changed files of a folder on this machine copied into each host's workdir before "
    "any task starts.",
    (
        Key("source", "string", "The folder to copy, relative to the profile's folder.", default="."),
        Key("exclude", "string_list", "gitignore-style patterns left out (.git/ always is).", default=[],
            expected='a list of patterns like ["data/", "*.ckpt"]'),
    ),
)

SLURM_KEYS = Table(
    "Run on Slurm: outside an allocation `up` submits the job (sbatch) with these keys and watches it; "
    "inside one, hosts are its nodes (SLURM_JOB_NODELIST) and tasks start as `srun --overlap` steps; "
    "the keys also shape `distlaunch export sbatch`.",
    (
        Key("nodes", "integer", "Nodes the batch script asks for (sbatch --nodes).", minimum=1),
        Key("time", "string", "Time limit the batch script asks for, e.g. \"02:00:00\".", nonblank=True),
        Key("partition", "string", "Partition to submit to.", nonblank=True),
        Key("account", "string", "Account to charge.", nonblank=True),
        Key("gpus_per_node", "integer", "GPUs per node the batch script asks for (sbatch --gpus-per-node).",
            minimum=0),
        Key("sbatch_args", "string_list", "More sbatch options, one per #SBATCH line.", default=[],
            expected='a list of options like ["--exclusive"]'),
        Key("time_limit_action", "choice", "Before the job's time limit (time_limit_margin_seconds ahead): "
            "requeue ends this allocation with the tasks stopped as at any end (their checkpoint) and puts "
            "the job back in Slurm's queue, where it continues the same run (a run `up` submitted, whose batch "
            "script has #SBATCH --requeue); stop ends the run Stopped: time limit. Left out, Slurm kills "
            "the tasks at the limit.", choices=("requeue", "stop")),
        Key("time_limit_margin_seconds", "number", "How long before the time limit time_limit_action acts "
            "(enough for the tasks to checkpoint and stop).", default=300.0, minimum=0),
    ),
)

LOG_POLICY_KEYS = Table(
    "A rule on the tasks' output: a line matching pattern raises a condition (warn) or keeps the task "
    "that printed it from being restarted when it fails (no_retry).",
    (
        Key("pattern", "string", "A regex (Python's re) searched in each line a task prints, e.g. "
            "\"CUDA_ERROR_OUT_OF_MEMORY\".", required=True, nonblank=True),
        Key("action", "choice", "no_retry: the incarnation that printed it is not restarted when it fails "
            "(nor the group restart it would cause), and the failure names the line; warn: a log_policy "
            "condition, once per incarnation.", required=True, choices=("no_retry", "warn")),
    ),
)

TOP_KEYS = Table(
    "A distlaunch cluster profile: which TensorFlow tasks run where, and how they are supervised.",
    (
        Key("name", "string", "Name of the job (it names the outputs folder: no '/', no '..', not starting "
            "with '.' or '-'); default: the profile's file name.", nonblank=True, pattern=JOB_NAME_PATTERN),
        Key("strategy", "choice", "The tf.distribute strategy; default: parameter_server with ps tasks, "
            "else multi_worker_mirrored.", choices=("parameter_server", "multi_worker_mirrored", "custom")),
        Key("success_policy", "choice", "chief: the job succeeds when chief:0 (or worker:0) exits 0; "
            "all_workers: when every worker does.", default="chief", choices=("chief", "all_workers")),
        Key("backoff_limit", "integer", "Restarts the whole job may spend.", default=10, minimum=0),
        Key("orphan_grace_seconds", "number", "How long tasks keep running after the launcher is lost.",
            default=60.0),
        Key("spares", "string_list", "Hosts kept ready to replace a lost one: [hosts] names (a host range's "
            "table name stands for all its hosts); they run no task at start, check and up preflight them, "
            "and no role's hosts may name them.", default=[], expected='a list of host names like ["gpu9"]'),
        Key("host_lost_seconds", "number", "Seconds a host may be out of contact before it is lost and "
            "on_host_lost applies; more than orphan_grace_seconds, so its tasks have stopped before they "
            "run elsewhere (left out: 120, or orphan_grace_seconds + 60 where that is more).", default=120.0,
            positive=True),
        Key("on_host_lost", "choice", "What a lost host does: replace (its tasks move to a spare; with none "
            "left, as shrink), shrink (its roles go on with fewer tasks, down to min_count; else the job "
            "fails) or fail (the job fails naming the host).", default="replace",
            choices=("replace", "shrink", "fail")),
        Key("max_host_losses", "integer", "Hosts the job may lose (each a move, not counted as restarts) "
            "before it fails; default: the number of spares + 1.", minimum=0),
        Key("readmit_after_seconds", "number", "Seconds after its loss that a lost host which answers "
            "again is re-admitted (a fresh preflight, a new incarnation) as a spare the job may grow back "
            "onto; 0: never.", default=300.0, minimum=0),
        Key("grow", "choice", "When a role below its target count grows onto a spare: at-checkpoint (at "
            "a checkpoint written since the last one used, where the group must restart), now, or never "
            "(only distlaunch resize grows).", default="at-checkpoint",
            choices=("at-checkpoint", "now", "never")),
        Key("grow_every_seconds", "number", "The least time between two grows of the job.", default=60.0,
            minimum=0),
        Key("host_discovery", "string", "A command run on the launcher every host_discovery_seconds that "
            "prints host names, one per line (a host of [hosts] or [user@]address[:port], read with [ssh]'s "
            "settings): each new one passes a preflight and joins the running job as a spare that roles "
            "grow onto (as Horovod's --host-discovery-script); a host that leaves the list stays.",
            nonblank=True),
        Key("host_discovery_seconds", "number", "Seconds between two runs of host_discovery.", default=30.0,
            positive=True),
        Key("sample_interval", "number", "Seconds between CPU/GPU samples per task.", default=1.0,
            positive=True),
        Key("straggler_ratio", "number", "A worker whose steps/s stays below this fraction of the workers' "
            "median for straggler_seconds is flagged a straggler (a fraction, e.g. 0.7); 0: off.", default=0.7),
        Key("straggler_seconds", "number", "How long a worker stays below straggler_ratio of the workers' "
            "median steps/s before it is flagged a straggler (and [notify]'s straggler alert fires).",
            default=30.0, positive=True),
        Key("outputs", "string", "Where the job keeps what must outlive a run (checkpoints, models), on each "
            "host; {outputs} in commands; never removed by down or prune. ~ is the host's home; relative: "
            "to the profile's folder on local hosts, to the home on ssh hosts; {name} is the job's name.",
            default="~/distlaunch/outputs/{name}"),
        Key("allow_version_skew", "boolean", "true: hosts may run different TensorFlow major.minor versions "
            "(else check and up refuse such a job for a TensorFlow strategy).", default=False),
        Key("min_free_disk", "size", "Check and up warn when a host has less free space than this at the outputs "
            "or its run dir: bytes, or with a unit (\"1GiB\", \"500MB\").", default="1GiB"),
        Key("checkpoint_copies_kept", "integer", "Where checkpoints are per host: how many of a task's newest "
            "checkpoints distlaunch keeps copied off their host, on the launcher's machine and on each spare.",
            default=2, minimum=1),
        Key("checkpoint_copy_bandwidth", "rate", "Where checkpoints are per host: the average rate their copies "
            "(to the launcher's machine and to the spares) may take of the links training uses too: bytes per "
            "second, or with a unit (\"50MiB/s\"); 0: no limit.", default="50MiB/s"),
        Key("checkpoint_copy_percent", "integer", "Where checkpoints are per host: the most of the time their "
            "copies may take (a copy of t seconds is followed by a rest of t x (100 / this - 1)), so they cost the "
            "training hosts little however often checkpoints come; a checkpoint saved meanwhile waits, only the "
            "newest is copied. 100: no rest (the freshest copies).", default=5, minimum=1, maximum=100),
        Key("gpu_busy", "choice", "When GPUs a task is given hold memory of other processes: warn, or refuse "
            "the launch.", default="warn", choices=("warn", "refuse")),
        Key("local_network", "choice", "A job whose tasks all run on this machine (one local host, no containers): "
            "private runs them in a network namespace of their own, which no other user of the machine can reach "
            "(TensorFlow's ports have no authentication) and from which the tasks reach no other machine; host "
            "shares the machine's network; auto is private where other people have processes here and the kernel "
            "allows it, else host.", default="auto", choices=("auto", "private", "host")),
        Key("defaults", "table", DEFAULTS_KEYS.doc, table=DEFAULTS_KEYS),
        Key("ssh", "table", SSH_TABLE.doc, table=SSH_TABLE),
        Key("hosts", "tables", "The machines of the job by name; without it everything runs on this machine.",
            table=HOST_KEYS),
        Key("roles", "tables", "The tasks of each role: chief, ps, worker, evaluator.", table=ROLE_KEYS,
            names=ROLES),
        Key("metrics", "regex_map", "Regexes on each output line of unmodified scripts (step, loss, or any "
            "name); the first capture group is the number."),
        Key("notify", "table", NOTIFY_KEYS.doc, table=NOTIFY_KEYS),
        Key("sync", "table", SYNC_KEYS.doc, table=SYNC_KEYS),
        Key("slurm", "table", SLURM_KEYS.doc, table=SLURM_KEYS),
        Key("log_policies", "table_list", LOG_POLICY_KEYS.doc, table=LOG_POLICY_KEYS),
    ),
)
