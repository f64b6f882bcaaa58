"""``train fit --help`` (and validate / test / predict) from a cache, without importing Lightning.

The help of a Lightning verb is built by LightningCLI from the signatures of Lightning's and the
project's classes: it needs ``import lightning.pytorch``, which imports torch, and torchmetrics
with torchvision's model zoo, scipy and matplotlib (several seconds and about 1 GB, see
``benchmarks/README.md``). The text only changes when one of its inputs does, so the first
``train <verb> --help`` stores it and later ones print it at once. The cache key holds everything
the text depends on: the verb, the program name, the terminal width, the Python executable and
version, the versions of the libraries that shape it, jsonargparse's environment settings, and
the size and modification time of every source file of this package. Only the bare
``train <verb> --help`` is cached; with any other argument (``--config``) the help is built.
Set ``TRAINER_CLI_HELP_CACHE=0`` to never use the cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from trainer_cli.atomic import write_atomic
from trainer_cli.config.request import Request, command_line

ENV_SWITCH = "TRAINER_CLI_HELP_CACHE"
# distributions whose code shapes the text of a Lightning verb's help
SHAPING_DISTRIBUTIONS = (
    "lightning",
    "jsonargparse",
    "torch",
    "torchvision",
    "torchmetrics",
    "omegaconf",
    "docstring-parser",
)
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # trainer_cli/
KEEP_PER_VERB = 8  # texts kept per verb (older ones are from edited sources or other environments)


def cacheable(request: Request) -> bool:
    """Whether ``train <verb> ARGS`` is a bare help request whose text may come from the cache."""
    return os.environ.get(ENV_SWITCH, "1") != "0" and request.only_help


def cache_dir() -> Path:
    """Where help texts are kept: ``$XDG_CACHE_HOME/trainer-cli/help`` (default ``~/.cache/...``)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "trainer-cli" / "help"


def cache_key(verb: str) -> str:
    """A hash of every input of the help text of ``train <verb> --help``."""
    parts = [
        verb,
        os.path.basename((command_line() or [""])[0]),
        str(shutil.get_terminal_size().columns),
        sys.executable,
        sys.version,
    ]
    for dist in SHAPING_DISTRIBUTIONS:
        try:
            parts.append(f"{dist}=={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} missing")
    parts += sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith("JSONARGPARSE"))
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        stat = path.stat()
        parts.append(f"{path.relative_to(PACKAGE_DIR)} {stat.st_size} {stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def print_help(verb: str, build: Callable[[], object]) -> int:
    """Print the help of ``verb``: from the cache, or from ``build()`` (which prints it and exits 0),
    stored for next time. Returns the exit code."""
    path = cache_dir() / f"{verb}-{cache_key(verb)}.txt"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = None
    if text is None:
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            try:
                build()
            except SystemExit as done:
                if done.code not in (None, 0):
                    sys.stdout.write(captured.getvalue())
                    raise
        text = captured.getvalue()
        if text:
            _store(path, text)
    sys.stdout.write(text)
    return 0


def _store(path: Path, text: str) -> None:
    """Write atomically (a concurrent reader sees the old or the whole new file), keeping the verb's
    ``KEEP_PER_VERB`` newest texts (several venvs or terminal widths); a read-only or full disk
    only costs the next call its speed."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
        verb = path.name.split("-", 1)[0]
        texts = sorted(path.parent.glob(f"{verb}-*.txt"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in texts[KEEP_PER_VERB:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
