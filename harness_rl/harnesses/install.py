"""Install Python harnesses at pinned versions into their own venvs under the project-local tools folder.

``<repo>/tools/venvs/<name>`` (or ``$HARNESS_RL_TOOLS/venvs/<name>``). A stamp file records the pinned
requirement and is written last, so an interrupted install is rebuilt from scratch on the next call, and a
call with the stamp in place is a no-op. Venvs cannot be moved after creation (scripts carry absolute
shebangs), so "atomic" here means stamp-after-success rather than build-then-rename. A lock file serializes
concurrent installs of the same harness.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

STAMP_NAME = ".harness_rl_install.json"


@dataclass(frozen=True)
class PythonToolSpec:
    """A Python harness installed with pip into its own venv.

    Attributes:
        name: Install target name (folder under ``venvs/``).
        requirement: The pinned pip requirement.
        binary: The console script that runs the harness.
        python: The interpreter that creates the venv.
    """

    name: str
    requirement: str
    binary: str
    python: str = "python3.11"


PYTHON_TOOLS: dict[str, PythonToolSpec] = {
    "mini_swe_agent": PythonToolSpec("mini_swe_agent", "mini-swe-agent==2.4.6", "mini"),
}


def tools_dir() -> Path:
    """The project-local tools folder: ``$HARNESS_RL_TOOLS`` or ``<repo>/tools``."""
    if env := os.environ.get("HARNESS_RL_TOOLS"):
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parents[2] / "tools"


def venv_dir(spec: PythonToolSpec, tools: Path | None = None) -> Path:
    """Where the harness's venv lives."""
    return (tools or tools_dir()) / "venvs" / spec.name


def install_command(name: str) -> str:
    """The exact command a user runs to install this harness (quoted in error messages)."""
    return f"python -m harness_rl.harnesses install {name}"


def read_stamp(spec: PythonToolSpec, tools: Path | None = None) -> dict | None:
    """The install stamp, or None when the harness is not (completely) installed at the pinned version."""
    venv = venv_dir(spec, tools)
    try:
        stamp = json.loads((venv / STAMP_NAME).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    if stamp.get("requirement") != spec.requirement or not (venv / "bin" / spec.binary).exists():
        return None
    return stamp


def install_python_tool(spec: PythonToolSpec, tools: Path | None = None, *, force: bool = False) -> Path:
    """Install ``spec`` into its venv unless the stamp says it is there; returns the binary's path.

    Raises:
        RuntimeError: The interpreter is missing or pip failed (with pip's output tail).
    """
    venv = venv_dir(spec, tools)
    binary = venv / "bin" / spec.binary
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{spec.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and read_stamp(spec, tools) is not None:
            logger.info("%s already installed at %s", spec.requirement, venv)
            return binary
        python = shutil.which(spec.python)
        if python is None:
            raise RuntimeError(f"{spec.python} not found on PATH; it is needed to create the {spec.name} venv")
        if venv.exists():  # a partial or outdated install: start clean
            shutil.rmtree(venv)
        start = time.monotonic()
        logger.info("installing %s into %s", spec.requirement, venv)
        _check([python, "-m", "venv", str(venv)])
        pip = [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--no-input",
            "--disable-pip-version-check",
        ]
        _check([*pip, "-q", spec.requirement])
        if not binary.exists():
            raise RuntimeError(f"{spec.requirement} installed but {binary} is missing")
        stamp = {"requirement": spec.requirement, "seconds": round(time.monotonic() - start, 1),
                 "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}  # fmt: skip
        tmp = venv / f"{STAMP_NAME}.tmp"
        tmp.write_text(json.dumps(stamp))
        tmp.replace(venv / STAMP_NAME)
        logger.info("installed %s in %.1f s", spec.requirement, stamp["seconds"])
        return binary


def _check(cmd: list[str]) -> None:
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise RuntimeError(f"command failed ({done.returncode}): {' '.join(cmd)}\n{tail}")
