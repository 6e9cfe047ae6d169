"""OpenSSH's % tokens and the sorting of ssh_config settings into honoured, ignored and refused."""

from __future__ import annotations

import getpass
import os

from launcher.transport import sshoptions


def test_tokens_are_expanded_as_openssh_does() -> None:
    text = sshoptions.expand("ssh -W %h:%p %r@jump %n %% %u %d %q",
                             host="10.0.0.5", port=2222, user="alice", alias="gpu1")
    assert text == f"ssh -W 10.0.0.5:2222 alice@jump gpu1 % {getpass.getuser()} {os.path.expanduser('~')} %q"
    assert sshoptions.expand("%k", host="h", port=22, user="u", alias="a", key_alias="pool") == "pool"
    assert sshoptions.expand("100%", host="h", port=22, user="u", alias="a") == "100%"


def test_settings_are_honoured_ignored_or_refused_by_name() -> None:
    found = {"proxycommand": ["ssh -W %h:%p b"], "controlmaster": ["auto"], "forwardagent": ["yes"],
             "pkcs11provider": ["/usr/lib/opensc-pkcs11.so"], "gssapiauthentication": ["yes"],
             "pubkeyauthentication": ["false"], "preferredauthentications": ["publickey,password"],
             "securitykeyprovider": ["/usr/lib/libsk.so"], "somefutureoption": ["1"]}
    assert sshoptions.refused(found) == [
        ("PKCS11Provider", "/usr/lib/opensc-pkcs11.so"), ("GSSAPIAuthentication", "yes"),
        ("PubkeyAuthentication", "false"), ("SecurityKeyProvider", "/usr/lib/libsk.so"),
        ("somefutureoption", "1")]
    assert sshoptions.refused({"gssapiauthentication": ["no"], "securitykeyprovider": ["internal"]}) == []
