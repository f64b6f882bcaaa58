"""The verbs of ``train``: each verb's function, named by ``module:function`` so that nothing is imported
until a verb runs, and its one-line help (``train --help``, shell completion)."""

# verb -> (module:function, one-line help). Each function takes the argument list after the verb
# and returns an exit code.
VERBS: dict[str, tuple[str, str]] = {
    "fit": ("trainer_cli.runtime.verbs:run_subcommand", "Train a model (LightningCLI `fit`)."),
    "validate": ("trainer_cli.runtime.verbs:run_subcommand", "Run the validation loop (LightningCLI `validate`)."),
    "test": ("trainer_cli.runtime.verbs:run_subcommand", "Run the test loop (LightningCLI `test`)."),
    "predict": ("trainer_cli.runtime.verbs:run_subcommand", "Run prediction (LightningCLI `predict`)."),
    "lr-find": (
        "trainer_cli.tools.lr_find:main",
        "Find a learning rate (Lightning's LR range test); writes a plot and a config fragment.",
    ),
    "scale-batch-size": (
        "trainer_cli.tools.scale_batch_size:main",
        "Find the largest batch size that fits (power or binsearch).",
    ),
    "cv": ("trainer_cli.tools.cv:main", "Stratified k-fold cross-validation: one run per fold, a table of metrics."),
    "export": (
        "trainer_cli.tools.export:main",
        "Export a checkpoint's nn.Module: state_dict + rebuild spec (+ torch.export, ONNX).",
    ),
    "doctor": (
        "trainer_cli.launch.doctor:main",
        "Check an allocation before a run waits for it: devices, network, versions, run root, code, rendezvous, timed "
        "all-reduce (--local: here).",
    ),
    "submit": ("trainer_cli.launch.submit:main", "Queue `fit` as a Slurm job (multi-node DDP, requeue and resume)."),
    "jobs": (
        "trainer_cli.launch.jobs:main",
        "List the Slurm jobs submitted from here: state, why it waits or how it ended, restarts, progress, log (--tail "
        "RUN follows one; `train jobs RUN`: its jobs and what they cost).",
    ),
    "cancel": (
        "trainer_cli.launch.jobs:cancel",
        "Cancel the Slurm jobs of a submitted run (fit, test, cv array and aggregate).",
    ),
    "sweep-results": (
        "trainer_cli.sweeps.results:main",
        "The table of a sweep (`--sweep` on fit or submit): swept values, best metric, state; writes CSV/JSON.",
    ),
    "runs": (
        "trainer_cli.tools.runs:main",
        "The runs under a root: state, best monitored metric, only the config keys that differ (--all: every key).",
    ),
    "init": (
        "trainer_cli.launch.init:main",
        "Write a site profile read from this Slurm cluster (partitions, limits, account, QOS, environment), or copy "
        "a bundled config out by name.",
    ),
    "ls": (
        "trainer_cli.config.listing:main",
        "List what can be named: models, data, callbacks, optimizers, schedulers, configs.",
    ),
    "completion": (
        "trainer_cli.tools.completion:main",
        "Print a bash or zsh completion script (verbs, --config files, option keys, class names).",
    ),
}

# verb -> module:function of the verbs a user's script with TrainerCLI takes beside LightningCLI's
# (``python main.py submit ARGS``), resolved when the verb runs (trainer_cli.runtime.script). Each function
# takes the argument list after the verb and the script's CLI (its class, positional and keyword
# arguments), with ``script`` (the script's path) and ``fixed`` (the sections whose class it fixes), and
# returns an exit code.
SCRIPT_VERBS: dict[str, str] = {
    "submit": "trainer_cli.launch.submit:from_script",
}
