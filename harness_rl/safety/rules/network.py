"""Network egress: HTTP clients, raw sockets, remote shells, package installs from a registry, git remotes."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from harness_rl.safety.actions import Action, Kind
from harness_rl.safety.rules.base import Rule, RuleContext, argv_words

_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "[::1]", "ip6-localhost"})
_CLIENTS = frozenset({"curl", "wget", "http", "https", "httpie", "aria2c", "lynx", "w3m", "links", "xh", "nc", "ncat",
                      "netcat", "socat", "telnet"})  # fmt: skip
_REMOTE_SHELLS = frozenset({"ssh", "scp", "sftp", "ftp", "mosh", "sshpass"})
_INSTALL = {
    "npm": {"install", "i", "ci", "add", "update", "upgrade", "publish"},
    "pnpm": {"install", "i", "add", "update", "up"},
    "yarn": {"add", "install", "upgrade", ""},
    "bun": {"install", "i", "add"},
    "gem": {"install", "update"},
    "cargo": {"install", "add"},
    "go": {"get", "install"},
    "apt": {"install", "update", "upgrade"},
    "apt-get": {"install", "update", "upgrade", "source"},
    "yum": {"install", "update"},
    "dnf": {"install", "update"},
    "apk": {"add", "update"},
    "brew": {"install", "update"},
    "pacman": {"-S", "-Sy", "-Syu"},
    "conda": {"install", "create", "update"},
    "mamba": {"install", "create", "update"},
    "micromamba": {"install", "create"},
    "pipx": {"install", "run"},
    "easy_install": {""},
    "poetry": {"add", "install", "update"},
    "uv": {"add", "sync", "tool"},
}
_PIP = re.compile(r"^pip[0-9.]*$")
_GIT_REMOTE = frozenset({"clone", "ls-remote", "push", "fetch", "pull"})


def is_loopback(url: str) -> bool:
    """Whether a URL or host names this machine."""
    text = url.strip()
    host = urlsplit(text if "://" in text else "//" + text).hostname or ""
    return host in _LOOPBACK or host.startswith("127.")


class NetworkEgress(Rule):
    name = "network_egress"
    explanation = (
        "the sandbox has no internet access and the task must be solved offline: downloads, remote shells, "
        "package installs from a registry and git remotes are blocked. Nothing was run; use what is installed."
    )

    def check(self, action: Action, ctx: RuleContext) -> str | None:
        if action.kind is Kind.NET:
            url = action.url or "?"
            return None if ctx.config.allow_loopback and is_loopback(url) else f"connects to {url}"[:200]
        if action.kind is not Kind.EXEC or not action.argv:
            return None
        words = argv_words(action)
        program, rest = words[0] if words else "", words[1:]
        if program in _CLIENTS:
            if "-l" in rest or "--listen" in rest:
                return None
            targets = [w for w in _client_positionals(program, rest) if "." in w or ":" in w or w.isalpha()]
            remote = [t for t in targets if not t.startswith("file://") and not is_loopback(t) and not t.isdigit()]
            return f"{program} {' '.join(remote)}"[:200] if remote else None
        if program in _REMOTE_SHELLS:
            return program
        if program == "rsync" and any(re.match(r"^[\w.@-]+::?", w) and ":" in w for w in rest):
            return "rsync to a remote host"
        if program == "git":
            sub = next((w for w in rest if not w.startswith("-")), "")
            if sub in _GIT_REMOTE or (sub == "submodule" and ("update" in rest or "add" in rest)):
                return f"git {sub}"
            return None
        if _PIP.match(program) or (program.startswith("python") and rest[:2] == ["-m", "pip"]):
            return _pip(rest[2:] if rest[:2] == ["-m", "pip"] else rest)
        if program == "uv" and rest[:1] == ["pip"]:
            return _pip(rest[1:])
        subs = _INSTALL.get(program)
        if subs is not None:
            sub = next((w for w in rest if not w.startswith("-") or program == "pacman"), "")
            if sub in subs:
                return f"{program} {sub}".strip()
        return None


#: curl/wget/nc options whose value is the next word (data, headers, output...): not a host to connect to.
_CLIENT_VALUE_OPTS = frozenset(
    {"-d", "--data", "--data-raw", "--data-binary", "--data-urlencode", "--json", "-H", "--header", "-X", "--request",
     "-o", "--output", "-O", "-u", "--user", "-A", "--user-agent", "-e", "--referer", "-F", "--form", "-b", "--cookie",
     "-c", "--cookie-jar", "-w", "--write-out", "-m", "--max-time", "--connect-timeout", "-T", "--upload-file",
     "-K", "--config", "-P", "--directory-prefix"}
)  # fmt: skip


_NETCAT_VALUE_OPTS = frozenset({"-p", "-s", "-i", "-q", "-w", "-e", "-c", "-x", "-X"})
_NETCATS = frozenset({"nc", "ncat", "netcat", "socat", "telnet"})


def _client_positionals(program: str, rest: list[str]) -> list[str]:
    value_opts = _NETCAT_VALUE_OPTS if program in _NETCATS else _CLIENT_VALUE_OPTS
    out: list[str] = []
    skip = False
    for word in rest:
        if skip:
            skip = False
        elif word in value_opts:
            skip = True
        elif not word.startswith("-"):
            out.append(word)
    return out


def _pip(rest: list[str]) -> str | None:
    sub = next((w for w in rest if not w.startswith("-")), "")
    if sub not in ("install", "download", "wheel"):
        return None
    args = rest[rest.index(sub) + 1 :]
    if any(a in ("-r", "--requirement", "-i", "--index-url", "--extra-index-url") for a in args):
        return f"pip {sub} from a requirements file or index"
    value_opts = {"-c", "--constraint", "-t", "--target", "--prefix", "--root", "-f", "--find-links"}
    packages = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in value_opts:
            skip = True
            continue
        if not arg.startswith("-"):
            packages.append(arg)
    local = all(p.startswith((".", "/", "~")) or p.endswith((".whl", ".tar.gz", ".zip")) for p in packages)
    return None if packages and local else f"pip {sub} {' '.join(packages)}"[:200]
