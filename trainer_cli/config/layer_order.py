"""Where a composed group file layered after others puts the values its own ``defaults:`` entries bring:
over or under the values earlier layers wrote, in the order Hydra merges them where a root config
(``train.yaml``) lists the groups (:func:`under_earlier`, :func:`hydra_order`).

Hydra's merge order is read from Hydra's defaults list (``ConfigLoader.compute_defaults_list``, the
loader the compose API itself uses): the compose API returns the merged config, not the order of its files.
Where that call fails or Hydra cannot compose the choices together, :func:`hydra_order` answers None and
the launcher's own rule applies (a group file's defaults come under what was written before it)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer_cli.config.hydra_roots import (
    HYDRA_LOGGING,
    config_root_of,
    files_of,
    root_config_of,
    search_roots,
    searchpath,
)
from trainer_cli.config.keys import Layer, Layers, plain_key


@dataclass(frozen=True)
class HydraOrder:
    """Where Hydra merges the files of the layers that are options of one root config's groups (:func:`hydra_order`).

    ``positions``: each file Hydra loads -> its place in the merge order; ``layers``: the earlier layers of that
    root config (its options, or the root config itself): a file of theirs that ``positions`` lacks is one
    Hydra does not load once the options are chosen together (its group's option replaced by an ``override``)."""

    root_config: Path
    choices: tuple[str, ...]  # ``group=option``, in --config order
    positions: dict[Path, int]
    layers: tuple[Layer, ...]

    def placed(self, layer: Layer) -> bool:
        """Whether ``layer`` is one of :attr:`layers` (its files have their place in Hydra's order)."""
        return any(layer is mine for mine in self.layers)


def _layer_file(layer: Layer) -> Path | None:
    """The file a ``--config`` layer came from (None for a flag)."""
    if layer.composed_from is not None:
        return layer.composed_from.resolve()
    files = {f for f, _ in layer.keys.values() if f is not None}
    return next(iter(files)).resolve() if len(files) == 1 else None


def _group_option(file: Path, root: Path, groups: Collection[str]) -> tuple[str, str] | None:
    """``(group, option)`` of a file of config root ``root`` in one of ``groups`` (``experiment/digits.yaml`` ->
    ``("experiment", "digits")``), else None."""
    if not file.is_relative_to(root):
        return None
    parts = file.relative_to(root).with_suffix("").parts
    return (parts[0], "/".join(parts[1:])) if len(parts) > 1 and parts[0] in groups else None


def hydra_order(own: Path, layers: Sequence[Layer], roots: Sequence[Path] = ()) -> HydraOrder | None:
    """Hydra's merge order for a composed layer from file ``own`` given after ``layers``, where Hydra has one:
    ``own`` is an option of a group that a root config of its config root lists (:func:`root_config_of`:
    ``debug/fdr.yaml`` of ``train.yaml``'s ``- debug: null``). The files are ordered as Hydra's compose orders
    them with every option of that root config's groups given so far chosen together (``python train.py
    experiment=digits debug=fdr``): ``train.yaml``'s ``defaults:`` list order, each ``override`` at its group's
    place, a plain entry (``- default``) at the place of the file that lists it, ``_self_`` where written.

    None (no Hydra order: :func:`under_earlier` keeps the launcher's layering) when ``own`` is no such option,
    one group is chosen twice, or Hydra cannot compose the choices together."""
    own = own.resolve()
    root = config_root_of(own)
    parts = own.relative_to(root).parts if own.is_relative_to(root) else ()
    found = root_config_of(root, parts[0]) if len(parts) > 1 else None
    if found is None:
        return None
    name, groups = found
    root_config = (root / f"{name}.yaml").resolve()
    chosen: list[tuple[str, str]] = []
    placed: list[Layer] = []
    for layer in layers:
        file = _layer_file(layer)
        picked = _group_option(file, root, groups) if file is not None and config_root_of(file) == root else None
        if picked is not None:
            chosen.append(picked)
        if picked is not None or file == root_config:  # (`--config train`: the root config itself)
            placed.append(layer)
    chosen.append((parts[0], "/".join(Path(*parts[1:]).with_suffix("").parts)))
    if len({g for g, _ in chosen}) != len(chosen):  # `--config experiment/a --config experiment/b`: not Hydra's
        return None
    choices = tuple(f"{g}={o}" for g, o in chosen)
    search = search_roots(own, roots)
    merged = _defaults_list(search, name, choices)
    if merged is None:
        return None
    positions = {file.resolve(): i for i, (file, _) in enumerate(files_of(merged, search, {}))}
    return HydraOrder(root_config, choices, positions, tuple(placed))


def _defaults_list(search: Sequence[Path], primary: str, choices: Sequence[str]) -> list[Any] | None:
    """Hydra's defaults list (``ResultDefault`` entries, in merge order) of the root config ``primary`` of the
    first of ``search`` with the ``group=option`` ``choices``; None when Hydra cannot compose them."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    overrides = [*searchpath(search), *HYDRA_LOGGING, *choices]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(search[0]), version_base="1.3", job_name="train"):
            loader = GlobalHydra.instance().config_loader()
            return list(loader.compute_defaults_list(primary, overrides, RunMode.RUN).defaults)
    except (HydraException, OmegaConfBaseException, RecursionError, AttributeError, TypeError):
        return None  # (AttributeError, TypeError: a Hydra whose loader changed: the launcher's own rule)
    finally:
        GlobalHydra.instance().clear()


def under_earlier(
    composed: dict[str, Any], layer: Layer, layers: Layers, roots: Sequence[Path] = ()
) -> tuple[dict[str, Any], list[str]]:
    """A composed layer without the values its own ``defaults:`` entries would set over values written before it
    that stay, in the order Hydra merges them where it has one (:func:`hydra_order`).

    The values the file itself writes always win (its ``_self_``). A value its ``defaults:`` entries bring (a
    file they compose) replaces one an earlier layer wrote as Hydra's order says, when both files are options of
    one root config's groups (a config root with ``train.yaml``, the lightning-hydra-template's shape) or
    composed from them: ``--config experiment/example --config trainer/cpu`` keeps the experiment's
    ``trainer.max_epochs`` over ``trainer/cpu.yaml``'s ``- default`` (``train.yaml`` lists ``trainer`` before
    ``experiment``); ``--config experiment/example --config debug/fdr`` takes ``debug/default.yaml``'s
    ``max_epochs: 1`` (``debug`` is listed after ``experiment``, as in ``python train.py experiment=example
    debug=fdr``). A file Hydra does not load with the options chosen together (its group's option replaced by an
    ``override`` of the other) adds nothing, and the ``callbacks:``/``logger:`` entries it gave before are
    dropped; another key only such a file gave before stays (a layer cannot unset it). Otherwise (no such root
    config, a flag, a file outside its groups: a value Hydra would take from its command line) an earlier value
    stays: a group file's defaults come under what was written before it. Returns the layer and the note lines
    that say each kept or replaced value."""
    if not layers or layer.composed_from is None:
        return composed, []
    notes: list[str] = []
    own = layer.composed_from.resolve()
    order = hydra_order(own, layers, roots)
    earlier: dict[str, tuple[Layer, Path | None, bool]] = {}  # leaf -> the last layer setting it, its file, own
    for before in layers:
        for key in before.leaves:
            file = before.keys[key][0]
            mine = file is None or before.composed_from is None or file.resolve() == before.composed_from.resolve()
            earlier[key] = (before, file.resolve() if file is not None else None, mine)
    kept: dict[str, str] = {}  # key (or a subtree) whose earlier value stays -> the earlier leaf that set it
    over: list[str] = []  # earlier values written in a layer's own file, replaced in Hydra's order
    unloaded: dict[Path, None] = {}  # files of this layer Hydra does not load with the choices together

    def stays(dotted: str, file: Path) -> str | bool | None:
        """The earlier leaf whose value stays over this layer's value of ``dotted`` from ``file`` (``dotted``, or a
        key above it set to a value: ``callbacks: null``), else False; None: the value is dropped anyway."""
        if order is not None and file not in order.positions:  # (a file of this layer's own composition)
            return None
        parts = dotted.split(".")
        hit = next((k for k in (".".join(parts[:n]) for n in range(len(parts), 0, -1)) if k in earlier), None)
        if hit is None:
            return False
        before, written, mine = earlier[hit]
        if order is not None and written is not None and order.placed(before):  # both in Hydra's order
            later = written in order.positions and order.positions[written] > order.positions.get(file, -1)
            return hit if later else False
        return hit if mine and hit == dotted else False

    def walk(node: Any, prefix: str) -> Any:
        if not isinstance(node, dict):
            return node
        out = {}
        for key, value in node.items():
            dotted = plain_key(f"{prefix}.{key}" if prefix else str(key))
            file = layer.keys.get(dotted, (None, None))[0]
            if not isinstance(value, dict) and file is not None and file.resolve() != own:
                verdict = stays(dotted, file.resolve())
                if verdict is None or verdict:
                    if verdict is None:
                        unloaded[file.resolve()] = None
                    else:
                        kept[dotted] = str(verdict)
                    layer.keys.pop(dotted, None)
                    layer.leaves.discard(dotted)
                    continue
                if dotted in earlier and earlier[dotted][2]:
                    over.append(dotted)
            before = list(kept)
            out[key] = walk(value, dotted)
            if isinstance(value, dict) and value and not out[key]:  # all of it dropped
                del out[key]
                layer.keys.pop(dotted, None)
                below = [k for k in kept if k not in before]
                hits = {kept[k] for k in below}
                hit = hits.pop() if len(hits) == 1 else ""
                if hit == dotted or dotted.startswith(f"{hit}."):  # under one earlier value (`callbacks: null`)
                    for k in below:
                        del kept[k]
                    kept[dotted] = hit
        return out

    result = walk(composed, "")
    dropped = _drop_unloaded_entries(result, layer, earlier, order) if order is not None else []
    hydra = f"as Hydra composes {order.root_config.name} with {' '.join(order.choices)}" if order else ""
    if kept:
        labels = ", ".join(dict.fromkeys(earlier[hit][0].label for hit in kept.values()))
        why = f"{hydra}, those defaults come first" if order else "its defaults come under what was written before it"
        notes.append(f"{own}: its defaults: list does not reset {', '.join(kept)}, set before it by {labels} ({why})")
    if over and order is not None:
        labels = ", ".join(dict.fromkeys(earlier[k][0].label for k in over))
        notes.append(
            f"{own}: its defaults: list sets {', '.join(over)} over the values of {labels} ({hydra}, they come after)"
        )
    if (unloaded or dropped) and order is not None:
        files = [*unloaded, *(f for _, f in dropped if f not in unloaded)]
        names = ", ".join(dict.fromkeys(_relative(f, order.root_config.parent) for f in files))
        gone = f"; {', '.join(e for e, _ in dropped)}, set before it, dropped" if dropped else ""
        notes.append(
            f"{own}: with {' '.join(order.choices)} Hydra does not load {names} (an override replaces their group's "
            f"option in {order.root_config.name}'s defaults: list): their values are left out{gone}"
        )
    return result, notes


def _relative(file: Path, root: Path) -> str:
    """``file`` relative to ``root`` where it is under it, else as it is."""
    return str(file.relative_to(root)) if file.is_relative_to(root) else str(file)


def _drop_unloaded_entries(
    result: dict[str, Any], layer: Layer, earlier: dict[str, tuple[Layer, Path | None, bool]], order: HydraOrder
) -> list[tuple[str, Path]]:
    """Set to ``None`` (dropped, as the template's ``instantiate_callbacks`` drops it) each ``callbacks:``/``logger:``
    entry of an earlier layer whose ``_target_`` came from a file Hydra does not load with this layer's choices
    (``override /callbacks: none`` after an experiment's callbacks), unless this layer gives it one. Returns them,
    each with that file."""
    from trainer_cli.config.hydra_style import NAMED, TARGET

    dropped: list[tuple[str, Path]] = []
    for key, (before, written, _) in earlier.items():
        parts = key.split(".")
        if len(parts) != 3 or parts[0] not in NAMED or parts[2] != TARGET:
            continue
        if written is None or not order.placed(before) or written in order.positions:
            continue
        group, entry = parts[0], parts[1]
        section = result.get(group, {})
        if section is None or (
            isinstance(section, dict) and isinstance(section.get(entry), dict) and TARGET in section[entry]
        ):
            continue  # `callbacks: null` here, or the entry given again
        if not isinstance(section, dict):
            continue
        result[group] = {**section, entry: None}
        layer.keys[f"{group}.{entry}"] = (layer.composed_from, None)
        layer.leaves.add(f"{group}.{entry}")
        dropped.append((f"{group}.{entry}", written))
    return dropped
