"""Turning library errors into one clear :class:`~trainer_cli.errors.UserError` message.

jsonargparse reports a value no type of a key accepts with every Union member's complaint;
:func:`summarize_union_error` keeps the one that matters. :func:`explain_parse_error` adds close
matches for unknown keys, options and class names (the classes a name could mean:
:mod:`trainer_cli.config.class_hints`); :func:`as_user_error` maps Lightning,
OmegaConf and constructor errors caused by the user's input to a :class:`UserError`. An exception
raised in the user's own code (their model's ``__init__``, their module's imports, ``setup``) is
shown as the user's frames and the exception (:func:`user_code_error`), not as a config error.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainer_cli.config.class_hints import (
    DOTTED,
    class_hint,
    class_options,
    config_class_paths,
    public_classes,
    user_packages,
)
from trainer_cli.config.keys import plain_key
from trainer_cli.errors import (
    Origin,
    UserCodeError,
    UserError,
    close_matches,
    did_you_mean,
    is_user_file,
    user_code_report,
)
from trainer_cli.imports import import_class

if TYPE_CHECKING:
    from trainer_cli.config.keys import Layers


def _known_keys(parser: Any) -> list[str]:
    keys = []
    for action in parser._actions:
        keys += [s.lstrip("-") for s in action.option_strings if s.startswith("--")]
    return keys


KIND_OF_KEY = {
    "model": "models",
    "data": "data",
    "optimizer": "optimizers",
    "lr_scheduler": "schedulers",
    "trainer.callbacks": "callbacks",
}
"""What kind of class (:data:`trainer_cli.config.listing.KIND_ROOTS`) a config key takes, for its hints."""


def _kind_of(message: str) -> str | None:
    """The kind of class the key an error message starts with (``model: ...``) takes; None when unknown."""
    head = re.match(r"([A-Za-z_][\w.]*): ", message)
    key = ".".join(p for p in (head.group(1) if head else "").split(".") if p != "init_args" and not p.isdigit())
    return next((kind for prefix, kind in KIND_OF_KEY.items() if key == prefix or key.startswith(prefix + ".")), None)


def explain_parse_error(
    message: str, parser: Any, known_keys: Sequence[str] | None = None, layers: Layers | None = None
) -> str:
    """Add close matches to jsonargparse's messages about unknown keys, options or class names; a
    class whose module fails to import in the user's own code is reported with the user's frames.
    ``known_keys``: the parser's option keys, where there is no parser (:mod:`trainer_cli.config.before_parse`);
    ``layers``: the command line's configs (a class name's hint draws first from the user's packages)."""
    head = re.match(r'Parser key "([\w.]+)"', message)
    for key, class_path in _given_classes(message):
        report = _import_report(class_path)
        if report:
            key = key or (head.group(1) if head else "")
            return f"{key + ': ' if key else ''}cannot import {class_path}: {report}"
    extra = ""
    message = _plain_type_error(message)
    unknown = re.findall(r"(?:[Uu]nrecognized arguments:?|Key) ['\"]?--?([\w.]+)", message)
    unknown += re.findall(r"Key ['\"]([\w.]+)['\"] is not expected", message)
    for group, option in re.findall(
        r"(?:Group ['\"]([\w.]+)['\"] )?does not accept option ['\"]([\w.]+)['\"]", message
    ):
        unknown.append(f"{group}.{option}" if group else option)  # "Group 'trainer' ... 'max_epoch'"
    known = [k for k in (_known_keys(parser) if known_keys is None else known_keys) if not k.endswith(".help")]
    for key in dict.fromkeys(unknown):
        prefix, _, leaf = key.rpartition(".")
        siblings = [k for k in known if k.rpartition(".")[0] == prefix]
        if not siblings and prefix:  # the section itself is misspelt: `optimiser.lr`
            first = key.split(".")[0]
            hint = did_you_mean(first, {k.split(".")[0] for k in known})
            extra += f"\n  unknown section {first!r}.{hint}" if hint else ""
            continue
        hint = did_you_mean(key, siblings or known)
        if hint:
            extra += f"\n  unknown key {key!r}.{hint}"
    # "Problem with given class_path 'torch.optim.AdamW': ... Option 'lrr' is not accepted" / "Key 'x' is not expected"
    # a class inside another's init_args (model.init_args.net): the option is the innermost class's before it
    seen: set[tuple[str, str]] = set()
    for outer, body in re.findall(r"class_path '([\w.]+)':\n((?:\s{6,}.*\n?)+)", message):
        for found in re.finditer(r"(?:Option|Key) '([\w.]+)' is not (?:accepted|expected)", body):
            inner = re.findall(r"class_path '([\w.]+)'", body[: found.start()])
            class_path, option = (inner[-1] if inner else outer), found.group(1)
            if (class_path, option) in seen:
                continue
            seen.add((class_path, option))
            options = class_options(class_path)
            name = class_path.rpartition(".")[2]
            takes = f" {name} takes: {', '.join(options)}." if options else f" {name} takes no options."
            hint = did_you_mean(option.rpartition(".")[2], options) or takes
            extra += f"\n  unknown option {option!r} of {class_path}.{hint}"
    for module, name in dict.fromkeys(re.findall(r"module '([\w.]+)' has no attribute '(\w+)'", message)):
        hint = did_you_mean(name, public_classes(module))
        qualified = hint.replace(": ", f": {module}.").replace(", ", f", {module}.")
        extra += f"\n  unknown class '{module}.{name}'.{qualified or ' See `train ls`.'}"
    for module in dict.fromkeys(re.findall(r"class_path '[\w.]+':\s+No module named '([\w.]+)'", message)):
        users = user_packages(config_class_paths(layers))  # the user's packages first, then any loaded
        loaded = {m.split(".")[0] for m in sys.modules if not m.startswith("_")}
        close = list(dict.fromkeys([*close_matches(module, users), *close_matches(module, loaded)]))[:3]
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        extra += f"\n  unknown module {module!r}.{hint or ' Is it installed, or on PYTHONPATH?'}"
    summary = summarize_union_error(message).rstrip()
    names = re.findall(r"Import path (\w+) does not correspond", summary)  # a short name, not a dotted path
    names += re.findall(r"Expected a dot import path string: (\w+)", summary)
    for name in dict.fromkeys(names):
        hint = class_hint(name, _kind_of(summary), layers)
        extra += f"\n  unknown class {name!r}.{hint or ' See `train ls`.'}"
    return summary + extra


def _given_classes(message: str) -> list[tuple[str, str]]:
    """``(key or "", class path)`` for every class a parse error is about: ``Problem with given
    class_path 'X'``, a ``Given value: X`` that is a dotted path, or one holding ``class_path='X'``."""
    found = [
        (m.group(1) or m.group(2) or "", m.group(3))
        for m in re.finditer(
            rf'(?:Parser key "([\w.]+)":\s+|([\w.]+): )?Problem with given class_path \'({DOTTED})\'', message
        )
    ]
    if "Subtypes: [<class" not in message:  # a value given to a class-typed key only
        return list(dict.fromkeys(found))
    for line in re.findall(r"^\s*Given value: (.*)$", message, re.M):
        plain = re.fullmatch(DOTTED, line.strip())
        found += (
            [("", plain.group(0))]
            if plain
            else [("", c) for c in re.findall(rf"class_path['\"]?[=:] ?['\"]({DOTTED})['\"]", line)]
        )
    return list(dict.fromkeys(found))


def _import_report(class_path: str) -> str | None:
    """The user's frames (:func:`trainer_cli.errors.user_code_report`) of the error importing
    ``class_path``, or None when it imports or its error is not in the user's code."""
    try:
        import_class(class_path)
    except Exception as err:  # noqa: BLE001 - any error the user's module raises on import
        return user_code_report(err)
    return None


def user_code_error(err: Exception) -> UserCodeError | None:
    """A :class:`UserCodeError` showing the user's own frames when ``err`` (or what it was raised
    from) was raised in the user's code, else None (see :func:`trainer_cli.errors.user_code_report`)."""
    report = user_code_report(err)
    return UserCodeError(report) if report else None


_SIMPLE_TYPE_ERROR = re.compile(r"""Parser key "([\w.]+)":\s+Expected an? <class '([\w.]+)'>\. Got value: (.*)""")
_NESTED = re.compile(r"^([\w.]+): Problem with given class_path '([\w.]+)': (\w+): (expected .*)$")


def _plain_type_error(message: str) -> str:
    """``Parser key "batch_size": Expected a <class 'int'>. Got value: big`` -> ``batch_size: expected int, got
    'big'``."""
    return _SIMPLE_TYPE_ERROR.sub(lambda m: f"{m.group(1)}: expected {m.group(2)}, got {m.group(3)!r}", message)


def message_keys(message: str) -> list[str]:
    """The dotted config keys an explained parse error is about, the most specific first
    (``optimizer.init_args.lr`` before ``optimizer``); for a class that can't be found its
    ``class_path`` key first. An unknown option or a wrong value of a class nested in another's
    ``init_args`` (``model: ... Parser key "net": ... class_path 'pkg.Net': Option 'lin1_sise' ...``,
    ``... class_path 'pkg.Net': lin1_size: expected int``) is the key through those ``Parser key``
    levels (``model.net.lin1_sise``), so that where it was written (a file's line, or a flag) is
    found for that key, not for the section around it."""
    keys: list[str] = []
    head = re.match(r"([A-Za-z_][\w.]*): ", message)
    keys += re.findall(r"unknown key '([\w.]+)'", message)
    keys += re.findall(r"unknown section '([\w.]+)'", message)
    keys += re.findall(r"does not accept option '([\w.]+)'", message)
    if head:
        options = re.findall(rf"unknown option '([\w.]+)' of ({DOTTED})", message)
        options += [(o, c) for c, o in re.findall(rf"class_path '({DOTTED})': (\w+): expected ", message)]
        for option, class_path in options:
            at = message.find(f"class_path '{class_path}'")
            levels = re.findall(r'Parser key "([\w.]+)"', message[:at]) if at >= 0 else []
            keys += [".".join([head.group(1), *levels, option]), f"{head.group(1)}.{option}"]
        if re.search(r"unknown (?:class|module) '|has no attribute|No module named", message):
            keys.append(f"{head.group(1)}.class_path")
        keys.append(head.group(1))
    return list(dict.fromkeys(keys))


def locate(message: str, layers: Layers | None) -> tuple[str | None, Origin | None]:
    """The key an explained parse error is about and where its value was written in the command
    line's ``layers`` (:meth:`trainer_cli.config.keys.Layers.origin`; None for a default), or
    ``(None, None)`` when the message names no key."""
    keys = message_keys(message)
    if not keys:
        return None, None
    found = layers.origin_of(keys) if layers else None
    if not found or not layers:
        return keys[0], None
    origin = layers.origin(keys)
    if origin is not None and origin.flag and _names_flag(message, origin.flag):
        origin = None  # the message says the flag itself: not said twice
    return found[1], origin


def _names_flag(message: str, flag: str) -> bool:
    """Whether ``message`` names ``flag`` itself: the flag as written (``unrecognized arguments:
    --trainer.max_epoch``), or its key as the message's first word (``trainer.max_epochs: expected
    int``; spelt either way: :func:`~trainer_cli.config.keys.plain_key`)."""
    if re.search(rf"{re.escape(flag)}(?![\w.])", message):
        return True
    head = re.match(r"([A-Za-z_][\w.]*): ", message)
    return head is not None and plain_key(head.group(1)) == plain_key(flag.lstrip("-"))


_NOT_ERRORS = (
    "Does not validate against any",
    "Expected a <class 'NoneType'>",
    "a class path (str)",
    "a dict with",
    "a dict without",
)
_PATH_NOISE = re.compile(r"Expected a path but .* either not accessible or invalid$")
_TYPE_ERROR = re.compile(r"Expected an? (?:<class '([\w.]+)'>|typing\.Literal\[(.*)\])")


def summarize_union_error(message: str) -> str:
    """jsonargparse's report for a value no type of a key accepts, in one or two lines.

    ``Parser key "trainer.max_epochs": Does not validate against any of the Union subtypes ...
    Given value: ten`` becomes ``trainer.max_epochs: expected int, got 'ten'``; for a class it keeps
    only the class's own complaint (``Option 'lrr' is not accepted``, ``Import path os.system does
    not correspond to a subclass of LightningModule``). Other messages are returned unchanged.
    """
    head = re.match(r'Parser key "([^"]+)":', message)
    if head is None or "Does not validate against any of the Union subtypes" not in message:
        return message
    body = message.split("Given value type:")[0]
    items: list[str] = []
    for line in body.splitlines()[1:]:
        text = line.strip()
        if not text or text.startswith(("Subtypes:", "Errors:")):
            continue
        if text.startswith("- "):
            items.append(text[2:])
        elif items:
            items[-1] += " " + text
    items = [i for i in items if not i.startswith(_NOT_ERRORS) and not _PATH_NOISE.match(i)]
    if any(_TYPE_ERROR.fullmatch(i) for i in items):  # Union[float, Tensor] given 'abc': a float was meant
        items = [i for i in items if not i.startswith("Expected a dot import path string")]
    subclass = [i.split(" Subclass types expect")[0] for i in items if "does not correspond to a subclass" in i]
    items = subclass or [i.split(" Subclass types expect")[0] for i in items]
    if not items:
        return message
    key = head.group(1)
    given = re.search(r"^\s*Given value: (.*)$", message, re.M)
    types = [_TYPE_ERROR.fullmatch(i) for i in items]
    if all(types) and given:
        expected = " or ".join(m.group(1) or f"one of {m.group(2)}" for m in types if m)
        return f"{key}: expected {expected}, got {given.group(1)!r}"
    summary = f"{key}: " + "; ".join(dict.fromkeys(items))
    # a class's own key of the wrong type: "optimizer.init_args.lr: expected float, got 'abc' (torch.optim.AdamW)"
    return _NESTED.sub(lambda m: f"{m.group(1)}.init_args.{m.group(3)}: {m.group(4)} ({m.group(2)})", summary)


def as_user_error(err: Exception, ckpt_path: str | None = None, layers: Layers | None = None) -> UserError | None:
    """The :class:`UserError` a library exception stands for, or None when it is a bug.

    ``ckpt_path`` names the checkpoint in the message when its weights do not fit the model;
    ``layers`` (the command line's) name the file and line of a value.
    """
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from omegaconf.errors import OmegaConfBaseException

    cause = err.__cause__  # jsonargparse wraps a constructor's own error while instantiating
    if isinstance(err, ValueError) and isinstance(cause, Exception) and str(err).startswith("Does not validate"):
        if isinstance(cause, UserError):
            return cause
        return as_user_error(cause, ckpt_path, layers) or _library_refused(str(err), cause)
    if isinstance(err, MisconfigurationException):
        return UserError(str(err).strip().splitlines()[0])
    if isinstance(err, OmegaConfBaseException):
        key = getattr(err, "full_key", None)
        where = layers.describe_origin([without_verb(key)]) if key and layers else ""
        return UserError(f"{where + ': ' if where else ''}config interpolation: {omegaconf_message(err)}")
    if isinstance(err, RuntimeError) and str(err).startswith("Early stopping conditioned on metric"):
        # Lightning's EarlyStopping (strict) after a validation: the config's monitor names a metric the model
        # does not log (a preset written for val/loss on a model that logs val_loss); its message lists them
        return UserError(f"{str(err).strip()} (set the EarlyStopping callback's monitor in the config)")
    port_in_use = _rendezvous_port_in_use(err)
    if port_in_use is not None:
        return port_in_use
    if isinstance(err, RuntimeError) and "Error(s) in loading state_dict" in str(err):
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        return UserError(
            f"checkpoint {ckpt_path} does not fit the model (from another model?): {' '.join(lines[1:3])[:400]}"
        )
    if isinstance(err, (ValueError, TypeError)) and _raised_by_user_config(err):
        where = locate_named_key(str(err), layers)  # a constructor's check of a value from a config file
        if not where and (
            not _raised_in_user_file(err) or _CALL_MISMATCH.search(str(err))
        ):  # the user's code calls wrongly
            return user_code_error(err) or UserError(str(err))
        report = user_code_report(err) if _raised_in_user_file(err) else None
        if report:  # the user's own check: its type and frame, and where the value was written
            return UserCodeError(f"{where}: {report}" if where else report)
        return UserError(f"{where}: {err}" if where else str(err))
    return None


_ADDRESS_IN_USE = re.compile(r"EADDRINUSE|address already in use", re.I)
_PORT = re.compile(r"\bport: (\d+)|:(\d+) \(errno")


def _rendezvous_port_in_use(err: Exception) -> UserError | None:
    """torch.distributed's rendezvous could not listen on its port, another process holds it
    (``DistNetworkError: The server socket has failed to listen on any local network address. port:
    29555, ..., name: EADDRINUSE``): which port (the message's, else ``MASTER_PORT``'s), on which
    ``MASTER_ADDR``, and how to choose another. None for any other error."""
    import torch.distributed

    network_error = getattr(torch.distributed, "DistNetworkError", RuntimeError)  # torch built without distributed
    if not isinstance(err, network_error) or not _ADDRESS_IN_USE.search(str(err)):
        return None
    named = _PORT.search(str(err))
    port = next((g for g in named.groups() if g), None) if named else os.environ.get("MASTER_PORT")
    address = os.environ.get("MASTER_ADDR")
    on = f" on {address} (MASTER_ADDR)" if address else ""
    return UserError(
        f"DDP could not start: its rendezvous port {port or '(unknown)'} (MASTER_PORT){on} is already in use by "
        f"another process; unset MASTER_PORT so that Lightning picks a free port, or set MASTER_PORT to a free one"
    )


_GIVEN_CLASS = re.compile(r"^Given value: Namespace\(class_path='([\w.]+)'", re.M)


def _library_refused(message: str, cause: Exception) -> UserError | None:
    """A class of the config that a library's own check refused to build (an MLflow file store without
    ``MLFLOW_ALLOW_FILE_STORE``, a logger whose service is missing): ``<class> could not be built: <error>``.
    None when the error was raised in the user's code (shown with its frames instead) or the launcher's."""
    given = _GIVEN_CLASS.search(message)
    frames = traceback.extract_tb(cause.__traceback__)
    if not given or not frames or is_user_file(frames[-1].filename) or "/trainer_cli/" in frames[-1].filename:
        return None
    lines = [line.strip() for line in str(cause).strip().splitlines() if line.strip()]
    return UserError(f"{given.group(1)} could not be built: {type(cause).__name__}: {' '.join(lines[:3])[:600]}")


def locate_named_key(message: str, layers: Layers | None) -> str:
    """Where a value was written when ``message`` names exactly one key set in the command line's
    ``layers`` by its last part (``label_smoothing must be in [0, 1)``): ``in FILE line N``, else empty."""
    if not layers:
        return ""
    words = set(re.findall(r"[A-Za-z_]\w*", message))
    keys = {k for layer in layers for k in layer.leaves if k.rpartition(".")[2] in words}
    return layers.describe_origin(list(keys)) if len(keys) == 1 else ""


def without_verb(key: str) -> str:
    """A parser key as the verb's own config names it: ``fit.model.lr`` -> ``model.lr``."""
    return re.sub(r"^(fit|validate|test|predict)\.", "", key)


def omegaconf_message(err: Exception) -> str:
    """OmegaConf's message with the key it concerns: ``Interpolation key 'x' not found (at optimizer.lr)``."""
    message = str(err).strip().splitlines()[0]
    key = getattr(err, "full_key", None)
    key = without_verb(key) if key else None
    return f"{message} (at {key})" if key else message


_CALL_MISMATCH = re.compile(
    r"\(\) (?:missing \d+ required|got an unexpected keyword|got multiple values|takes \d+ positional)"
)


def _raised_in_user_file(err: Exception) -> bool:
    """Whether the innermost frame of ``err`` is in the user's own code (their check of a value)."""
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and is_user_file(frames[-1].filename)


def _raised_by_user_config(err: Exception) -> bool:
    """A ValueError/TypeError raised by a constructor's own argument check counts as user input."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_name == "__init__"
