"""User errors: one clear message, exit code 2, no traceback."""

from __future__ import annotations

import difflib
import errno
import functools
import sys
import sysconfig
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

EXIT_USER_ERROR = 2


class UserError(Exception):
    """A mistake in the user's input (config, flag, file, data): reported without a traceback."""


@dataclass(frozen=True)
class Origin:
    """Where a value was written: a file and the 1-based line of its key (for a composed layer,
    also the file with the ``defaults:`` list it came from), or the command-line ``flag`` that set it."""

    file: Path | None = None
    line: int | None = None
    composed_from: Path | None = None
    flag: str | None = None

    def __str__(self) -> str:
        """``in FILE line N`` (``in FILE, from group file G line N`` for a composed file); empty for a flag."""
        if self.file is None:
            return ""
        where = f" line {self.line}" if self.line else ""
        if self.composed_from is not None and self.file != self.composed_from:
            return f"in {self.composed_from}, from group file {self.file}{where}"
        return f"in {self.file}{where}"


class ConfigError(UserError):
    """A config key or value the parser refused: the ``key`` it is about, where the value was
    written (``origin``: a file and line, a flag, or None for a default), the parser's explained
    ``message`` with any ``hint``, and where to look next (``help_line``). Raised where the mistake
    is found, rendered once where the command started (:func:`report_user_error`)."""

    def __init__(
        self, message: str, key: str | None = None, origin: Origin | None = None, hint: str = "", help_line: str = ""
    ) -> None:
        self.message, self.key, self.origin, self.hint, self.help_line = message, key, origin, hint, help_line
        super().__init__(self.brief() + (f"\n  ({help_line})" if help_line else ""))

    def brief(self) -> str:
        """``[in FILE line N: ]message[hint]``, without the pointer to ``--help``; a value set by a
        flag (``model: ... Option 'lin1_sise' is not accepted`` for ``--model.init_args.net.init_args.lin1_sise``)
        is ``from the command-line flag --KEY: message``."""
        where = str(self.origin or "")
        flag = self.origin.flag if self.origin else None
        if not where and flag:  # (an origin names a flag only where the message does not name it itself)
            where = f"from the command-line flag {flag}"
        return f"{where + ': ' if where else ''}{self.message}{self.hint}"


class UserCodeError(UserError):
    """An exception raised by the user's own code (their model, data module, callback) while it was
    imported or built: reported with the user's frames only (:func:`user_code_report`), exit code 2
    as for any other mistake the user fixes (a traceback of this project's or a library's frames
    alone is a bug: exit code 1)."""


def close_matches(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Names among ``candidates`` that look like ``name`` (case-insensitive), best first."""
    candidates = list(candidates)
    lowered = {c.lower(): c for c in candidates}
    found = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.6)
    return [lowered[f] for f in found]


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` Did you mean: a, b?`` or an empty string."""
    found = close_matches(name, candidates)
    return f" Did you mean: {', '.join(found)}?" if found else ""


def is_disk_full(err: BaseException) -> bool:
    """Whether ``err`` is a write refused for want of space: ENOSPC, or EDQUOT (a quota)."""
    return isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)


def disk_full_error(err: BaseException, where: Path | str | None = None) -> UserError:
    """The one-line error for a full disk (:func:`is_disk_full`) met while writing the run's files
    (the records, logs, metrics) under ``where``; checkpoints have their own, which names the file
    kept (:class:`trainer_cli.runtime.checkpointing.AtomicCheckpointIO`)."""
    filename = getattr(err, "filename", None)
    what = f"while writing {filename}" if filename else f"while writing under {where}" if where else "while writing"
    return UserError(
        f"no space left on the device {what}: free space (or choose another --trainer.default_root_dir) and run "
        f"again; --ckpt_path last resumes from the run's newest complete checkpoint, if it saved one"
    )


def quiet_disk_full_in_threads() -> None:
    """A full disk met by a library's writer thread (TensorBoard's event writer) prints one line
    instead of its traceback: the main thread meets the same error at its next write and reports
    it (:func:`disk_full_error`). Any other exception in a thread goes to the previous hook."""
    import threading

    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None and is_disk_full(args.exc_value):
            name = args.thread.name if args.thread is not None else "a thread"
            # one write of the whole line: print's two writes (text, newline) interleave with the main
            # thread's error line ("...devicerror: ...")
            kind = type(args.thread).__name__
            sys.stderr.write(f"trainer-cli: {name} ({kind}) stopped: no space left on the device\n")
            sys.stderr.flush()
            return
        previous(args)

    threading.excepthook = hook


def report_user_error(err: BaseException) -> int:
    """Print ``err`` as one ``error:`` message on stderr and return the user-error exit code."""
    sys.stderr.write(f"error: {err}\n")  # one write: no writer thread's line splits it (quiet_disk_full_in_threads)
    sys.stderr.flush()
    return EXIT_USER_ERROR


@functools.cache
def _library_dirs() -> list[Path]:
    """Where Python, the installed packages and this project live: no frame there is the user's. Installed
    packages are this interpreter's and those of every ``site-packages``/``dist-packages`` folder on
    ``sys.path`` (a ``.pth``'s ``addsitedir``, ``--system-site-packages``, the user's site folder)."""
    paths = sysconfig.get_paths()
    dirs = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib", "scripts") if k in paths]
    dirs += [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    return [Path(d).resolve() for d in dict.fromkeys(dirs)] + [Path(__file__).resolve().parent]


def is_user_file(filename: str) -> bool:
    """Whether ``filename`` (of a traceback frame) is the user's code, not Python's, a package's or this project's."""
    if not filename or filename.startswith("<"):
        return False
    path = Path(filename).resolve()
    return not any(path.is_relative_to(d) for d in _library_dirs())


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and the exceptions it was raised from or during, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)


def user_code_report(err: BaseException) -> str | None:
    """The exception of ``err``'s chain raised in the user's own code (the innermost with a frame in
    a user file, :func:`is_user_file`) as the user's frames and the exception, or None when no
    frame is the user's (a library's or this project's own error)."""
    for exc in reversed(list(_chain(err))):
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if is_user_file(f.filename)]
        if isinstance(exc, SyntaxError) and exc.filename and is_user_file(exc.filename):
            frames.append(
                traceback.FrameSummary(exc.filename, exc.lineno or 0, "<module>", line=(exc.text or "").strip())
            )
        if not frames:
            continue
        shown = "".join(traceback.format_list(frames)).rstrip()
        message = (
            f"{type(exc).__name__}: {exc.msg}"
            if isinstance(exc, SyntaxError)
            else traceback.format_exception_only(type(exc), exc)[-1].strip()
        )
        return f"exception in your code: {message}\n  Traceback (your code only, most recent call last):\n{shown}"
    return None
