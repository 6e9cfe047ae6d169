"""Which ``ssh -G`` settings the built-in (paramiko) client honours, which it may ignore, and
which it must refuse by name; and OpenSSH's ``%`` tokens.

A setting ``ssh_config`` gives a host is never dropped silently: it is honoured (sshconfig.py,
ssh.py), harmless to ignore because it changes neither where nor how the client connects and
authenticates (``IGNORED``), or refused with one line that points at ``transport = "openssh"``.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import shlex
import socket

#: honoured by the built-in client (sshconfig.resolve and SshHost)
HONOURED = frozenset({
    "host", "hostname", "user", "port", "identityfile", "certificatefile", "identitiesonly",
    "identityagent", "proxyjump", "proxycommand", "userknownhostsfile", "globalknownhostsfile",
    "stricthostkeychecking", "hostkeyalias", "connecttimeout", "serveraliveinterval",
    "serveralivecountmax", "compression",
})

#: change neither the destination nor how the client authenticates or checks the host: a
#: session-only feature (forwardings, X11, a tty, escape characters), logging, multiplexing
#: (ControlMaster/Path/Persist), or a value that only makes OpenSSH stricter than this client is
IGNORED = frozenset({
    "controlmaster", "controlpath", "controlpersist", "loglevel", "logverbose", "syslogfacility",
    "visualhostkey", "hashknownhosts", "updatehostkeys", "addkeystoagent", "forwardagent",
    "forwardx11", "forwardx11trusted", "forwardx11timeout", "xauthlocation", "escapechar",
    "enableescapecommandline", "requesttty", "sessiontype", "stdinnull", "forkafterauthentication",
    "batchmode", "checkhostip", "tcpkeepalive", "ipqos", "rekeylimit", "clearallforwardings",
    "exitonforwardfailure", "gatewayports", "localforward", "remoteforward", "dynamicforward",
    "permitremoteopen", "streamlocalbindmask", "streamlocalbindunlink", "sendenv", "setenv",
    "numberofpasswordprompts", "fingerprinthash", "connectionattempts", "canonicalizehostname",
    "canonicaldomains", "canonicalizefallbacklocal", "canonicalizemaxdots",
    "canonicalizepermittedcnames", "passwordauthentication", "kbdinteractiveauthentication",
    "kbdinteractivedevices", "verifyhostkeydns", "nohostauthenticationforlocalhost",
    "requiredrsasize", "tunnel", "tunneldevice", "gssapitrustdns", "gssapirenewalforcesrekey",
    "gssapikexalgorithms", "gssapiserveridentity", "gssapiclientidentity", "permitlocalcommand",
    "obscurekeystroketiming", "channeltimeout", "revokedhostkeys", "knownhostscommand",
    "include", "ignoreunknown", "pubkeyauthentication", "securitykeyprovider", "preferredauthentications",
    "gssapiauthentication", "gssapidelegatecredentials", "gssapikeyexchange",
    "hostbasedauthentication", "enablesshkeysign", "tag",
})

#: values of a setting in IGNORED above that do change how to authenticate: refused
_REFUSED_VALUES = {
    "pubkeyauthentication": {"no", "false"},
    "gssapiauthentication": {"yes", "true"},
    "gssapidelegatecredentials": {"yes", "true"},
    "gssapikeyexchange": {"yes", "true"},
    "hostbasedauthentication": {"yes", "true"},
    "enablesshkeysign": {"yes", "true"},
    "permitlocalcommand": {"yes", "true"},
    "knownhostscommand": None,  # any value: host keys from a command this client does not run
    "revokedhostkeys": None,  # any value: keys this client cannot know are revoked
    "gssapiclientidentity": None,
    "gssapiserveridentity": None,
}

#: OpenSSH's spelling of the settings named in messages (ssh -G prints them in lower case)
NAMES = {name.lower(): name for name in (
    "PKCS11Provider", "SecurityKeyProvider", "GSSAPIAuthentication", "GSSAPIDelegateCredentials",
    "GSSAPIKeyExchange", "HostbasedAuthentication", "EnableSSHKeysign", "PubkeyAuthentication",
    "PreferredAuthentications", "RemoteCommand", "LocalCommand", "PermitLocalCommand",
    "ProxyUseFdpass", "AddressFamily", "BindAddress", "BindInterface", "Ciphers", "MACs",
    "KexAlgorithms", "HostKeyAlgorithms", "PubkeyAcceptedAlgorithms", "CASignatureAlgorithms",
    "HostbasedAcceptedAlgorithms", "KnownHostsCommand", "RevokedHostKeys", "StrictHostKeyChecking",
    "GSSAPIClientIdentity", "GSSAPIServerIdentity", "ProxyCommand", "ProxyJump", "IdentityAgent", "HostKeyAlias",
)}


def display(key: str) -> str:
    return NAMES.get(key, key)


def refused(found: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(setting, value) pairs of ``found`` (what the config set, defaults left out) that the
    built-in client cannot honour."""
    out: list[tuple[str, str]] = []
    for key, values in found.items():
        value = " ".join(values)
        if key in HONOURED:
            continue
        if key not in IGNORED or _refused_value(key, value):  # unknown here: differs from the default
            out.append((display(key), value))
    return out


def _refused_value(key: str, value: str) -> bool:
    if key == "securitykeyprovider":
        return value != "internal"  # a FIDO middleware library
    if key == "preferredauthentications":
        return "publickey" not in value.split(",")  # e.g. keyboard-interactive only
    bad = _REFUSED_VALUES.get(key, set())
    return bad is None or value.lower() in bad


def expand(text: str, *, host: str, port: int, user: str, alias: str, key_alias: str | None = None,
           quote: bool = False) -> str:
    """OpenSSH's ``%`` tokens in ``text`` (ProxyCommand, IdentityFile, ...); ``~`` is left to the caller.
    ``quote``: each value shell-quoted (a command run by /bin/sh: ProxyCommand); a value of plain
    name characters is left as it is."""
    local = socket.gethostname()
    conn = hashlib.sha1(f"{local}{host}{port}{user}".encode()).hexdigest()
    tokens = {"%": "%", "h": host, "p": str(port), "r": user, "n": alias, "u": getpass.getuser(),
              "d": os.path.expanduser("~"), "l": local, "L": local.split(".")[0], "C": conn,
              "i": str(os.getuid()), "k": key_alias or host}
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "%" and index + 1 < len(text) and text[index + 1] in tokens:
            value = tokens[text[index + 1]]
            out.append(shlex.quote(value) if quote and text[index + 1] != "%" else value)
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)
