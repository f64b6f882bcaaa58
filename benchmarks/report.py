"""The results table of ``benchmarks/README.md``: each target with the measured figure beside it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

START, END = "<!-- results:start -->", "<!-- results:end -->"


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _row(target: str, measured: str, met: bool | None) -> str:
    verdict = "n/a" if met is None else ("met" if met else "**not met**")
    return f"| {target} | {measured} | {verdict} |"


def _three_sides(w: dict[str, Any], fmt: str) -> str:
    """ms/step of the plain loop / Lightning's defaults / ``train fit``, side by side."""
    return "ms/step: plain loop {} / Lightning {} / train fit {}".format(
        *(format(w[side]["ms_per_step"], fmt) for side in ("plain_loop", "lightning", "train_fit"))
    )


def rows(results: Path) -> list[str]:
    """Markdown table rows for every benchmark whose JSON is in ``results``."""
    out: list[str] = []
    if (o := _load(results, "overhead")) is not None:
        d, r = o["result"]["digits_mlp"], o["result"]["resnet18"]
        out.append(_row(
            "digits MLP: `train fit` within 1.3x of the plain loop's step time",
            f"{_three_sides(d, '.2f')}; train fit {d['fit_over_loop']:.2f}x, Lightning's defaults {d['lightning_over_loop']:.2f}x",
            d["fit_over_loop"] <= 1.3,
        ))
        out.append(_row(
            "ResNet-18, CIFAR-shaped tensors: throughput ratio >= 0.98",
            f"{r['throughput_ratio']:.3f} ({_three_sides(r, '.1f')}; Lightning's defaults {1 / r['lightning_over_loop']:.3f})",
            r["throughput_ratio"] >= 0.98,
        ))
    if (s := _load(results, "startup")) is not None:
        for verb, v in s["result"]["launcher_verbs"].items():
            target = f"`{verb}` < 0.5 s, no torch import" if verb in ("train --help", "train ls", "train fit --help (cached)") else f"`{verb}` (no target)"
            if not v["available"]:
                out.append(_row(target, "verb not on this branch when measured", None))
                continue
            ok = v["wall_s"] < 0.5 and not v["imports_torch"] if "<" in target else None
            out.append(_row(target, f"{v['wall_s']:.3f} s, imports torch: {v['imports_torch']}", ok))
        for verb, ratio in s["result"].get("over_import_lightning", {}).items():
            out.append(_row(
                f"`{verb}` within 1.2x of `import lightning.pytorch` (same run)",
                f"{ratio:.2f}x ({s['result']['launcher_verbs'][verb]['wall_s']:.2f} s vs {s['result']['import_lightning_s']:.2f} s)",
                ratio <= 1.2,
            ))
        for name, v in s["result"].get("errors", {}).items():
            out.append(_row(
                f"`{name.split(':')[0]}` error ({name.split(': ', 1)[1]}) < 1 s, no torch import",
                f"{v['wall_s']:.3f} s, exit {v['exit_code']:.0f}, imports torch: {v['imports_torch']}",
                v["wall_s"] < 1 and not v["imports_torch"] and v["exit_code"] == 2,
            ))
        f = s["result"]["first_step"]
        out.append(_row(
            "`train fit` digits: time to first optimizer step <= 1.5x the plain script",
            f"{f['ratio']:.2f}x ({f['train_fit']['first_step_s']:.2f} s vs {f['plain_script']['first_step_s']:.2f} s)",
            f["ratio"] <= 1.5,
        ))
    if (d := _load(results, "datapath")) is not None:
        r = d["result"]
        out.append(_row(
            "CIFAR-10 augmentation: batched >= 10x per-sample (CPU)",
            f"{r['speedup_over_best_per_sample']:.1f}x ({r['batched']['images_per_s']:,.0f} img/s vs "
            f"{r['per_sample_0_workers']['images_per_s']:,.0f} (0 workers) / {r['per_sample_2_workers']['images_per_s']:,.0f} (2 workers) img/s)",
            r["speedup_over_best_per_sample"] >= 10,
        ))
    if (g := _load(results, "gpu")) is not None:
        r = g["result"]
        reduced = r["settings"]["mode"] != "gpu"
        note = " (reduced CPU mode: proves it runs, not a GPU figure)" if reduced else ""
        for key, v in r.items():
            if isinstance(v, dict) and "ratio" in v:
                out.append(_row(
                    f"recipe `{key}`: train fit / plain loop >= 0.95{note}",
                    f"{v['ratio']:.3f} ({v['train_fit']['images_per_s']:,.1f} vs {v['plain_loop']['images_per_s']:,.1f} img/s)",
                    None if reduced else v["ratio"] >= 0.95,
                ))
        for key, v in r.items():
            if key.endswith("_real_over_synthetic"):
                out.append(_row(
                    f"recipe `{key.removesuffix('_real_over_synthetic')}`: real data path within 10% of synthetic{note}",
                    f"{v:.3f} of synthetic", None if reduced else v >= 0.9,
                ))
    if (w := _load(results, "sweep_overhead")) is not None:
        r = w["result"]
        sizes = sorted(r["sizes"].items(), key=lambda item: int(item[0]))
        per_size = ", ".join(
            f"{v['commands_s']['launcher total']:.1f} s ({v['commands_s']['launcher total cpu']:.1f} s CPU) at "
            f"{size} told (next, which tells the last trial: {v['commands_s']['next']:.1f})"
            for size, v in sizes
        )
        first = r["first_trial_s"]
        out.append(_row(
            "sweep worker's own commands per trial, wall (journal study, TPE; no target)",
            f"{per_size}; {r['overhead_over_training']:.0%} of one digits trial's `train fit` "
            f"({r['train_epochs']} epochs, {first['train fit']:.1f} s, {first['train fit cpu']:.1f} s CPU; "
            f"CPU: {r['overhead_over_training_cpu']:.0%})",
            None,
        ))
    if (li := _load(results, "listing")) is not None:
        r = li["result"]
        out.append(_row(
            f"`train runs` over {r['runs']} runs (config.yaml and event file each) < {r['target_s']:.0f} s",
            f"{r['collect_s']:.2f} s", r["collect_s"] < r["target_s"] if r["runs"] >= 100 else None,
        ))
    if (sc := _load(results, "scale")) is not None:
        out += _scale_rows(sc["result"])
    if (gp := _load(results, "goodput")) is not None:
        out += _goodput_rows(gp["result"])
    return out


def _scale_rows(r: dict[str, Any]) -> list[str]:
    """``train runs`` at each N: wall (CPU) seconds and peak MB of each case, and the target at the largest N."""
    out = []
    for n, cases in r["sizes"].items():
        figures = "; ".join(f"{case} {c['wall_s']:.2f} s ({c['cpu_s']:.2f} s CPU, {c['peak_mb']:.0f} MB)" for case, c in cases.items())
        largest = int(n) >= 10_000
        target = f" < {r['target_s']:.0f} s (warm and cold)" if largest else " (no target)"
        met = all(cases[c]["wall_s"] < r["target_s"] for c in ("index", "cold") if c in cases) if largest else None
        out.append(_row(f"`train runs` over {int(n):,} copied digits runs{target}", figures, met))
    for n, cases in (r.get("sweep_results") or {}).items():
        largest = int(n) >= 10_000
        met = all(c["wall_s"] < r["target_s"] for case, c in cases.items() if case != "no summary") if largest else None
        target = f" < {r['target_s']:.0f} s" if largest else " (no target)"
        out.append(_row(f"`sweep-results` over {int(n):,} trials{target}", _cases(cases), met))
    if ask_tell := r.get("ask_tell") or {}:
        smallest, largest_n = min(ask_tell, key=int), max(ask_tell, key=int)
        ratio = ask_tell[largest_n]["wall_s"] / ask_tell[smallest]["wall_s"]
        told = "; ".join(f"{int(n):,} told {c['wall_s']:.2f} s ({c['cpu_s']:.2f} s CPU)" for n, c in ask_tell.items())
        met = ratio < 1.5 if int(largest_n) >= 10_000 else None
        out.append(_row("sweep worker's tell + ask at 10,000 trials told < 1.5x at 100", f"{told}; {ratio:.2f}x", met))
    for n, cases in (r.get("jobs") or {}).items():
        met = all(c["wall_s"] < 2.0 for c in cases.values()) if int(n) >= 1_000 else None
        calls = "; ".join(f"{case}: {c['slurm_calls']}" for case, c in cases.items())
        target = f"`train jobs` with {int(n):,} registered jobs < 2 s"
        out.append(_row(target, f"{_cases(cases)}; calls {calls}", met))
    return out


def _cases(cases: dict[str, Any]) -> str:
    """``CASE wall s (CPU s, peak MB)`` of each case, joined."""
    shown = [f"{case} {c['wall_s']:.2f} s ({c['cpu_s']:.2f} s CPU, {c['peak_mb']:.0f} MB)" for case, c in cases.items()]
    return "; ".join(shown)


def _goodput_rows(r: dict[str, Any]) -> list[str]:
    """The local cluster's 2-node job: steps lost per preemption, restart cost, goodput against the job left alone."""
    s, settings = r["summary"], r["settings"]
    job = f"{settings['nodes']}-node DDP digits job ({settings['steps']} steps)"
    lost = s["steps_lost_per_preemption"]
    stall = ", ".join(str(n) for n in s["steps_lost_to_the_stall"])
    ratio = s["restart_cost_ratio"]
    alone, hit = s["alone"], s["interrupted"]
    return [
        _row(
            f"{job} preempted twice (USR1): {r['goals']['steps_lost_per_preemption']} steps lost per preemption",
            f"{max(lost)} (steps redone after each of {len(lost)} preemptions: {', '.join(str(n) for n in lost)}; "
            f"after the stall, no goal: {stall}, back to the last epoch-end checkpoint)",
            max(lost) <= r["goals"]["steps_lost_per_preemption"],
        ),
        _row(
            f"{job}: restart cost (batch script start to the end of the first step) of a resume after a preemption "
            f"within {r['goals']['restart_cost_ratio']}x of a fresh start",
            f"{ratio:.2f}x ({s['resume_after_preemption_median_s']:.1f} s vs {s['fresh_start_median_s']:.1f} s; "
            f"{len(s['resume_after_preemption_s'])} resumes, {len(s['fresh_start_s'])} fresh starts)",
            ratio <= r["goals"]["restart_cost_ratio"],
        ),
        _row(
            f"{job}: goodput preempted twice and stalled once, against the same job left alone (no target)",
            f"{hit['goodput_of_allocation']:.0%} vs {alone['goodput_of_allocation']:.0%} of the allocation (sacct; "
            f"{hit['allocated_s']:.0f} s vs {alone['allocated_s']:.0f} s), {s['goodput_ratio']:.2f}x",
            None,
        ),
    ]


def machines(results: Path) -> list[str]:
    lines = []
    for path in sorted(results.glob("*.json")):
        m = json.loads(path.read_text())["machine"]
        lines.append(
            f"- `{path.stem}`: {m['date_utc']} UTC, {m['cpu']}, {m['cores']} cores (load {m['load_avg_1min_at_start']:.1f} at start), "
            f"GPU: {m['gpu'] or 'none'}, torch {m['torch']} ({m['torch_threads']} threads), lightning {m['lightning']}, python {m['python']}"
        )
    return lines


def update_readme(readme: Path, results: Path) -> None:
    """Replace the block between the results markers of ``readme`` with the current table."""
    table = ["| target | measured (median) | verdict |", "|---|---|---|", *rows(results), "", "Measured on:", *machines(results)]
    block = "\n".join([START, *table, END])
    text = readme.read_text() if readme.is_file() else f"# Benchmarks\n\n{START}\n{END}\n"
    readme.write_text(re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S))
