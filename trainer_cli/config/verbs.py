"""The verbs of ``train`` and their one-line help (``train --help``, shell completion, the hint for a
misspelt verb). The function each verb runs is the entry's to name (:data:`trainer_cli.__main__.TARGETS`):
the verbs run modules of every layer, and only the top may name them."""

# verb -> one-line help
VERBS: dict[str, str] = {
    "fit": "Train a model (LightningCLI `fit`).",
    "validate": "Run the validation loop (LightningCLI `validate`).",
    "test": "Run the test loop (LightningCLI `test`).",
    "predict": "Run prediction (LightningCLI `predict`).",
    "lr-find": "Find a learning rate (Lightning's LR range test); writes a plot and a config fragment.",
    "scale-batch-size": "Find the largest batch size that fits (power or binsearch).",
    "cv": "Stratified k-fold cross-validation: one run per fold, a table of metrics.",
    "export": "Export a checkpoint's nn.Module: state_dict + rebuild spec (+ torch.export, ONNX).",
    "doctor": (
        "Check an allocation before a run waits for it: devices, network, versions, run root, code, rendezvous, timed "
        "all-reduce (--local: here)."
    ),
    "submit": "Queue `fit` as a job: multi-node DDP on Slurm (the default) or Ray (--scheduler ray), requeue, resume.",
    "jobs": (
        "List the jobs submitted from here (every engine's): state, why it waits or how it ended, restarts, progress, "
        "log (--tail RUN follows one; `train jobs RUN`: its jobs and what they cost)."
    ),
    "cancel": "Cancel the jobs of a submitted run (fit, test, cv array and aggregate).",
    "sweep-results": (
        "The table of a sweep (`--sweep` on fit or submit): swept values, best metric, state; writes CSV/JSON."
    ),
    "runs": (
        "The runs under a root: state, best monitored metric, only the config keys that differ (--all: every key)."
    ),
    "init": (
        "Write a site profile read from this Slurm cluster (partitions, limits, account, QOS, environment), or copy "
        "a bundled config out by name."
    ),
    "ls": "List what can be named: models, data, callbacks, optimizers, schedulers, configs.",
    "completion": "Print a bash or zsh completion script (verbs, --config files, option keys, class names).",
}
