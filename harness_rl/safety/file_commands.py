"""File effects of ordinary Unix commands: which arguments a command reads, writes, edits or deletes.

Each handler gets the arguments after the program name (dynamic ones are None) and records actions in the
scope. Option tables are deliberately small: only options that take a separate value need listing, so that
the value is not mistaken for a path.
"""

from __future__ import annotations

from collections.abc import Callable

from harness_rl.safety.actions import Action, Kind
from harness_rl.safety.scope import Scope

Args = list[str | None]


def positionals(args: Args, value_opts: frozenset[str] = frozenset()) -> Args:
    """Arguments that are not options (and not the values of options listed in ``value_opts``)."""
    out: Args = []
    skip = False
    ended = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg is None or ended or arg == "-" or not arg.startswith("-"):
            out.append(arg)
            continue
        if arg == "--":
            ended = True
            continue
        if arg in value_opts:
            skip = True
    return out


def short_flags(args: Args) -> set[str]:
    """All single-letter flags, including those in clusters like ``-rfv``."""
    flags: set[str] = set()
    for arg in args:
        if arg and arg.startswith("-") and not arg.startswith("--") and len(arg) > 1:
            flags.update(arg[1:])
    return flags


def _files(kind: Kind, value_opts: frozenset[str] = frozenset(), skip_first: bool = False) -> Callable:
    def handler(args: Args, scope: Scope) -> None:
        paths = positionals(args, value_opts)
        for path in paths[1:] if skip_first else paths:
            scope.file(kind, path)

    return handler


#: Options with a separate value, per reader (``head -c 5 f``, but ``od -c f``: the same letter can differ).
_HEAD_OPTS = frozenset({"-n", "-c", "-s", "--lines", "--bytes"})
_CUT_OPTS = frozenset({"-d", "-f", "-c", "-b", "--delimiter", "--fields"})
_SORT_OPTS = frozenset({"-k", "-t", "-o", "-S", "-T", "--key", "--field-separator", "--output"})
_OD_OPTS = frozenset({"-A", "-t", "-j", "-N", "-w", "--format"})
_DIFF_OPTS = frozenset({"-U", "-C", "-x", "-X", "-I", "--label"})


def _grep(recursive_always: bool) -> Callable:
    value_opts = frozenset(
        {
            "-e",
            "-f",
            "-m",
            "-A",
            "-B",
            "-C",
            "-d",
            "-D",
            "-g",
            "-t",
            "-T",
            "--include",
            "--exclude",
            "--glob",
            "--exclude-dir",
            "--type",
            "--max-count",
            "-M",
            "-j",
        }
    )

    def handler(args: Args, scope: Scope) -> None:
        flags = short_flags(args)
        longs = {a.split("=")[0] for a in args if a and a.startswith("--")}
        recursive = (
            recursive_always or bool(flags & {"r", "R"}) or bool(longs & {"--recursive", "--dereference-recursive"})
        )
        explicit = any(a in ("-e", "-f") or (a or "").startswith(("--regexp", "--file")) for a in args)
        paths = positionals(args, value_opts)
        if not explicit:
            paths = paths[1:]
        if not paths and recursive:
            paths = ["."]
        for path in paths:
            scope.file(Kind.SEARCH if recursive else Kind.READ, path)

    return handler


def _sed(args: Args, scope: Scope) -> None:
    in_place = any(a and (a.startswith("--in-place") or (a.startswith("-i") and not a.startswith("--"))) for a in args)
    in_place = in_place or "i" in short_flags([a for a in args if a and a[1:].isalpha()])
    explicit = any(a in ("-e", "-f", "--expression", "--file") for a in args)
    paths = positionals(args, frozenset({"-e", "-f", "-l", "--expression", "--file"}))
    for path in paths if explicit else paths[1:]:
        scope.file(Kind.EDIT if in_place else Kind.READ, path)


def _awk(args: Args, scope: Scope) -> None:
    in_place = "inplace" in [a for a in args if a]
    explicit = "-f" in args
    paths = positionals(args, frozenset({"-f", "-v", "-F", "-i"}))
    for path in paths if explicit else paths[1:]:
        if path is not None and "=" in path:
            continue  # `awk '...' var=value file` assigns a variable
        scope.file(Kind.EDIT if in_place else Kind.READ, path)


def _perl_like(args: Args, scope: Scope) -> None:
    flags = short_flags([a for a in args if a and a.startswith("-") and not a.startswith("-e")])
    paths = positionals(args, frozenset({"-e", "-E", "-I", "-M", "-r"}))
    if "i" in flags:
        for path in paths if ("-e" in args or "-pe" in args or "-E" in args) else paths[1:]:
            scope.file(Kind.EDIT, path)
    elif any(a in ("-e", "-E", "-r") or (a or "").endswith("e") and (a or "").startswith("-") for a in args):
        scope.undecidable("inline code in a language the gate does not parse")


def _tee(args: Args, scope: Scope) -> None:
    kind = Kind.EDIT if short_flags(args) & {"a"} or "--append" in args else Kind.WRITE
    for path in positionals(args):
        scope.file(kind, path)


def _copy(move: bool, value_opts: frozenset[str] = frozenset()) -> Callable:
    def handler(args: Args, scope: Scope) -> None:
        target_dir = None
        for i, arg in enumerate(args):
            if arg in ("-t", "--target-directory") and i + 1 < len(args):
                target_dir = args[i + 1]
        paths = positionals(args, frozenset({"-t", "--target-directory", "-S", "--suffix"}) | value_opts)
        paths = [p for p in paths if p is None or not _is_remote(p)]
        if target_dir is not None or len(paths) >= 2:
            sources = paths if target_dir is not None else paths[:-1]
            dest = target_dir if target_dir is not None else paths[-1]
            for src in sources:
                scope.file(Kind.DELETE if move else Kind.READ, src)
            scope.file(Kind.WRITE, dest)
            for src in sources:
                if dest is not None and src is not None and not src.endswith("/"):
                    scope.file(Kind.WRITE, dest.rstrip("/") + "/" + src.rstrip("/").rsplit("/", 1)[-1])

    return handler


def _is_remote(path: str) -> bool:
    """``host:path`` / ``user@host:path`` / ``host::module`` (rsync, scp): not a local file."""
    head = path.split("/", 1)[0]
    return ":" in head and not path.startswith(("/", ".", "~"))


def _ln(args: Args, scope: Scope) -> None:
    paths = positionals(args, frozenset({"-t", "-S"}))
    symbolic = "s" in short_flags(args) or "--symbolic" in args
    if not paths:
        return
    target = paths[0]
    link = paths[1] if len(paths) > 1 else (target.rstrip("/").rsplit("/", 1)[-1] if target else None)
    if symbolic:
        scope.link(link, target)
    else:
        scope.file(Kind.READ, target)
        scope.file(Kind.WRITE, link)


def _dd(args: Args, scope: Scope) -> None:
    for arg in args:
        if arg is None:
            continue
        if arg.startswith("if="):
            scope.file(Kind.READ, arg[3:])
        elif arg.startswith("of="):
            scope.file(Kind.WRITE, arg[3:])


def _tar(args: Args, scope: Scope) -> None:
    first = next((a for a in args if a), "")
    create = "c" in first.lstrip("-") and not first.startswith("--") or "--create" in args or "-c" in args
    archive = None
    for i, arg in enumerate(args):
        if arg in ("-f", "--file") and i + 1 < len(args):
            archive = args[i + 1]
    paths = positionals(args[1:] if first and not first.startswith("-") else args, frozenset({"-f", "--file", "-C"}))
    if create:
        for path in paths:
            if path != archive:
                scope.file(Kind.READ, path)
        if archive is not None:
            scope.file(Kind.WRITE, archive)


def _zip(args: Args, scope: Scope) -> None:
    paths = positionals(args)
    if paths:
        scope.file(Kind.WRITE, paths[0])
        for path in paths[1:]:
            scope.file(Kind.READ, path)


def _curl_files(args: Args, scope: Scope) -> None:
    for i, arg in enumerate(args):
        if arg is None:
            continue
        nxt = args[i + 1] if i + 1 < len(args) else None
        if arg in ("-o", "--output") or arg == "-O" and nxt and not nxt.startswith(("-", "http")):
            scope.file(Kind.WRITE, nxt)
        elif arg.startswith("file://"):
            scope.file(Kind.READ, arg)
        elif arg in ("-d", "--data", "--data-binary", "-T", "--upload-file", "-F") and nxt and "@" in nxt:
            scope.file(Kind.READ, nxt.split("@", 1)[1])


def _list(args: Args, scope: Scope) -> None:
    for path in positionals(args, frozenset({"-I", "-L", "-P", "--max-depth", "-d"})) or ["."]:
        if path is not None:
            scope.file(Kind.LIST, path)


def _find(args: Args, scope: Scope) -> None:
    from harness_rl.safety.commands import run_argv  # commands dispatches here; -exec goes back to it

    roots: Args = []
    i = 0
    while i < len(args) and (args[i] is None or not args[i].startswith(("-", "(", "!"))):  # type: ignore[union-attr]
        roots.append(args[i])
        i += 1
    roots = roots or ["."]
    names: list[str] = []
    rest = args[i:]
    j = 0
    while j < len(rest):
        arg = rest[j]
        if arg in ("-name", "-iname", "-path", "-ipath", "-wholename", "-regex", "-iregex") and j + 1 < len(rest):
            if rest[j + 1] is not None:
                names.append(rest[j + 1])  # type: ignore[arg-type]
            j += 2
            continue
        if arg == "-delete":
            for root in roots:
                scope.file(Kind.DELETE, None if root is None else _under(root, names))
        elif arg in ("-exec", "-execdir", "-ok", "-okdir"):
            end = j + 1
            while end < len(rest) and rest[end] not in (";", "+", "\\;"):
                end += 1
            for root in roots[:4]:
                placeholder = None if root is None else _under(root, names)
                inner = [placeholder if a == "{}" else a for a in rest[j + 1 : end]]
                if inner:
                    run_argv(inner, scope)
            j = end
        j += 1
    for root in roots:
        if root is None:
            scope.undecidable("find over a directory computed at run time")
            continue
        scope.file(Kind.LIST, root)
        for name in names:
            scope.emit(Action(Kind.LIST, raw=name, content=name, detail="find by name"))


def _under(root: str, names: list[str]) -> str:
    leaf = names[0].rsplit("/", 1)[-1] if names else "*"
    return root.rstrip("/") + "/" + leaf


#: Program base name -> handler of its file effects.
HANDLERS: dict[str, Callable[[Args, Scope], None]] = {
    **dict.fromkeys(
        (
            "cat",
            "tac",
            "less",
            "more",
            "nl",
            "bat",
            "batcat",
            "view",
            "xxd",
            "od",
            "hexdump",
            "strings",
            "base64",
            "zcat",
            "zless",
            "md5sum",
            "sha1sum",
            "sha256sum",
            "sha512sum",
            "cksum",
            "uniq",
            "rev",
            "fold",
            "column",
            "paste",
            "comm",
            "cmp",
            "diff",
            "pr",
            "iconv",
            "expand",
            "unexpand",
            "fmt",
            "gunzip",
            "bzcat",
            "xzcat",
        ),
        _files(Kind.READ, _DIFF_OPTS),
    ),
    **dict.fromkeys(("head", "tail"), _files(Kind.READ, _HEAD_OPTS)),
    "cut": _files(Kind.READ, _CUT_OPTS),
    "sort": _files(Kind.READ, _SORT_OPTS),
    **dict.fromkeys(("od", "hexdump"), _files(Kind.READ, _OD_OPTS)),
    "wc": _list,  # counts only, no contents
    **dict.fromkeys(("jq", "yq"), _files(Kind.READ, frozenset({"--arg", "--argjson", "-f"}), skip_first=True)),
    **dict.fromkeys(("grep", "egrep", "fgrep", "zgrep"), _grep(recursive_always=False)),
    **dict.fromkeys(("rg", "ag", "ack", "git-grep"), _grep(recursive_always=True)),
    **dict.fromkeys(("ls", "tree", "du", "stat", "file", "realpath", "readlink", "dir", "exa", "eza"), _list),
    "find": _find,
    "sed": _sed,
    **dict.fromkeys(("awk", "gawk", "mawk"), _awk),
    **dict.fromkeys(("perl", "ruby"), _perl_like),
    "tee": _tee,
    **dict.fromkeys(
        ("touch", "install", "mkfifo"), _files(Kind.WRITE, frozenset({"-d", "-t", "-r", "-m", "-o", "-g"}))
    ),
    "truncate": _files(Kind.EDIT, frozenset({"-s", "-r"})),
    "cp": _copy(move=False),
    "rsync": _copy(move=False, value_opts=frozenset({"-e", "--rsh", "--exclude", "--include", "--filter", "-f"})),
    "mv": _copy(move=True),
    **dict.fromkeys(("rm", "unlink", "rmdir", "shred", "srm"), _files(Kind.DELETE, frozenset({"-n", "-s"}))),
    "ln": _ln,
    **dict.fromkeys(("chmod", "chown", "chgrp", "chattr", "setfacl"), _files(Kind.EDIT, skip_first=True)),
    **dict.fromkeys(("vi", "vim", "nvim", "nano", "emacs", "ed", "ex", "pico"), _files(Kind.EDIT)),
    "dd": _dd,
    "tar": _tar,
    "zip": _zip,
    "unzip": _files(Kind.READ, frozenset({"-d", "-x"})),
    **dict.fromkeys(("curl", "wget"), _curl_files),
    **dict.fromkeys(("source", "."), _files(Kind.READ)),
}
