"""Configuration of the safety gate (the ``safety`` Hydra group: ``on``, ``off``, ``strict``).

Path patterns used below come in three forms, matched by :func:`harness_rl.safety.paths.matches`:

* ``"tests/"`` (ends with ``/``): that directory and everything below it. Relative patterns are taken from the
  workspace root, absolute ones (``"/logs/verifier/"``) as written.
* ``"conftest.py"`` (no ``/``): any file whose base name matches this glob, wherever it is.
* ``"src/*.lock"`` (a ``/`` inside): a glob on the workspace-relative or absolute path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

#: Rule names in the order they are evaluated; the first rule that objects names the block.
RULE_NAMES = (
    "destructive",
    "scoring_tampering",
    "test_tampering",
    "verifier_access",
    "history_peeking",
    "process_tampering",
    "network_egress",
    "sandbox_escape",
    "undecidable",
)


def _default_protected() -> list[str]:
    return [
        "tests/",
        "/tests/",
        "hidden_tests/",
        "verifier/",
        "/verifier/",
        "solution/",
        "solutions/",
        "/solution/",
        "/oracle/",
        "/grader/",
        "answer_key*",
        "answers.json",
        "expected_output*",
        "*.answer",
    ]


def _default_test_files() -> list[str]:
    return [
        "test_*.py",
        "*_test.py",
        "*_tests.py",
        "conftest.py",
        "pytest.ini",
        "tox.ini",
        "noxfile.py",
        "*.test.js",
        "*.test.ts",
        "*.spec.js",
        "*.spec.ts",
        "*_test.go",
    ]


def _default_test_dirs() -> list[str]:
    return ["tests", "test", "testing", "__tests__", "hidden_tests"]


def _default_scoring() -> list[str]:
    return [
        "/logs/verifier/",
        "/logs/",
        "reward.txt",
        "reward.json",
        "rewards.json*",
        "score.txt",
        "score.json",
        "grade.json",
        "grading*.json",
        "*.reward",
    ]


def _default_secrets() -> list[str]:
    return [
        "/proc/*/environ",
        "/proc/*/mem",
        "/proc/*/cmdline",
        "/proc/*/root/*",
        "/etc/shadow",
        "/etc/sudoers",
        "/run/secrets/",
        "/var/run/secrets/",
        "/var/run/docker.sock",
        "/run/docker.sock",
        "id_rsa*",
        "id_ed25519*",
        "*.pem",
        ".netrc",
        ".pypirc",
        "credentials",
        ".git-credentials",
        "/root/.ssh/",
        "/root/.aws/",
        "/root/.config/gh/",
        "/root/.docker/",
        "/home/*/.ssh/*",
        "/home/*/.aws/*",
    ]


def _default_writable_outside() -> list[str]:
    return ["/tmp/", "/var/tmp/", "/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd/", "/root/.cache/"]


@dataclass
class SafetyConfig:
    """All knobs of the gate. Field docs live in ``conf/safety/on.yaml`` (one place only).

    Attributes:
        enabled: False turns the gate off (every call allowed; the run's metadata records it).
        undecidable: ``"allow"`` or ``"block"``: what happens to a call that cannot be resolved statically.
        rules: Per-rule switches by rule name (missing names are on).
        protected_paths: Verifier, hidden tests, solutions, answer keys: never read or written.
        test_files: Base-name globs of test files and test configuration.
        test_dirs: Directory names whose contents count as tests.
        scoring_paths: Reward and log files the verifier reads.
        secret_paths: Credentials and process secrets (sandbox escape when read).
        writable_outside: Places outside the workspace a call may write to.
        allow_loopback: Network calls to localhost are not egress.
        block_penalty: Reward penalty per blocked call (applied by the trainer, not here).
        audit_log: Write one JSONL audit record per inspected call.
        max_analysis_chars: Longer commands, code or patches are undecidable instead of parsed.
        home: The home directory ``~`` stands for inside the sandbox.
    """

    enabled: bool = True
    undecidable: str = "allow"
    rules: dict[str, bool] = field(default_factory=dict)
    protected_paths: list[str] = field(default_factory=_default_protected)
    test_files: list[str] = field(default_factory=_default_test_files)
    test_dirs: list[str] = field(default_factory=_default_test_dirs)
    scoring_paths: list[str] = field(default_factory=_default_scoring)
    secret_paths: list[str] = field(default_factory=_default_secrets)
    writable_outside: list[str] = field(default_factory=_default_writable_outside)
    allow_loopback: bool = True
    block_penalty: float = 0.0
    audit_log: bool = True
    max_analysis_chars: int = 65536
    home: str = "/root"

    def __post_init__(self) -> None:
        if self.undecidable not in ("allow", "block"):
            raise ValueError(f"safety.undecidable must be 'allow' or 'block', got {self.undecidable!r}")
        unknown = set(self.rules) - set(RULE_NAMES)
        if unknown:
            raise ValueError(f"unknown safety rules {sorted(unknown)}; known: {list(RULE_NAMES)}")

    def rule_enabled(self, name: str) -> bool:
        """Whether rule ``name`` is switched on."""
        return bool(self.rules.get(name, True))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> SafetyConfig:
        """Build from a plain mapping (e.g. ``OmegaConf.to_container(cfg.safety)``); unknown keys fail."""
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown safety config keys {sorted(unknown)}")
        kwargs = {
            k: (dict(v) if k == "rules" else list(v) if isinstance(v, list | tuple) else v) for k, v in values.items()
        }
        return cls(**kwargs)
