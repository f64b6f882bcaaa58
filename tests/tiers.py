"""Which tests run in ``make test`` and which only in the long tier (``make test-long``, run by CI after it).

``make test`` has 12 minutes on 2 cores (both venvs). The whole suite took 1146-1263 s there in December 2026
(``benchmarks/suite_cpu.py``: about 1900 CPU-s in the tests' processes, 300-370 in the Slurm jobs they submit,
~150 in the floor's subset beside them). So ``make test`` keeps every cheap test and at least one end-to-end test
of each behaviour (the Done-when of each issue at its smallest size); the long tier takes the other variants of a
behaviour already trained end to end here, matrices whose every row is one of those variants, and the docs pages
beyond the README (each command of every page still runs, in CI). A test that is long because it is long by
nature (an issue's Done-when at full size) carries ``@pytest.mark.long`` in its own file; the ones here are long
only for ``make test``'s time, and each names the test of ``make test`` that covers the same behaviour.

``conftest.pytest_collection_modifyitems`` marks them ``long``; a key here whose module or test function is gone
fails the collection (a renamed test must not quietly come back to ``make test`` or vanish).
Node ids are given without the xdist group suffix; an id ending in ``::`` takes every test of that function
(all its parameters), a path alone every test of the module. CPU-s: each test's processes, 2026-12-03 profile.
"""

from __future__ import annotations

from pathlib import Path

# node id (or prefix, see above) -> the make-test sibling, and the CPU-s moved
LONG_FOR_TIME: dict[str, str] = {
    # the docs pages beyond the README: the README's sections stay (quick start: fit, resume, test, predict,
    # sweep, submit --dry-run), and the pages that cost under 3 CPU-s; every page runs in CI (148 CPU-s)
    "tests/test_readme_commands.py::test_docs_page_runs[getting-started]": "README quick start (test_readme_section_runs)",
    "tests/test_readme_commands.py::test_docs_page_runs[guides-sweeps]": "test_sweep_optuna pruned trial; README quick start",
    "tests/test_readme_commands.py::test_docs_page_runs[guides-workflow]": "README sections; test_lr_find, test_runs",
    "tests/test_readme_commands.py::test_docs_page_runs[guides-slurm]": "README Slurm section; test_submit_render",
    "tests/test_readme_commands.py::test_docs_page_runs[guides-training]": "test_training_practice",
    "tests/test_readme_commands.py::test_docs_page_runs[concepts-run-and-seam]": "test_run_value, test_scheduler_seam",
    "tests/test_readme_commands.py::test_docs_page_runs[guides-containers]": "test_container_render",
    "tests/test_readme_commands.py::test_docs_page_runs[guides-loggers]": "test_logger_runs",
    "tests/test_readme_commands.py::test_docs_page_runs[guides-requeue]": "test_resume, test_slurm_cluster usr1 requeue",
    # the config matrix: every group file on every experiment; make test refuses the files that meet each rule
    # on digits, layers every group file onto digits (test_training_practice) and trains every experiment elsewhere (128 CPU-s)
    "tests/test_combinations.py::test_every_shipped_config_file_on_every_experiment": "test_combinations::test_every_rule_is_met_by_a_shipped_file_on_digits; "
    "test_training_practice::test_every_group_file_has_header_and_layers_onto_digits",
    "tests/test_combinations.py::test_process_starting_strategies_on_digits::": "test_stop_signals DDP, test_training_practice_ddp",
    # local sweeps and their listing (issue 48's cost guards) beyond one pruned Optuna sweep (115 + 23 CPU-s)
    "tests/test_sweep_optuna.py::test_tpe_sweep_asks_trials_one_after_another": "test_sweep_optuna pruned trial; test_hw_metrics",
    "tests/test_sweep_optuna.py::test_sweep_results_listed_again_with_the_journal_unchanged_opens_no_study": "test_sweep_optuna::test_sweep_results_from_the_trials_index_equal_those_read_from_the_trials",
    "tests/test_sweep_optuna.py::test_sweep_results_from_the_trials_summaries_equal_those_read_from_their_files": "test_sweep_optuna::test_sweep_results_from_the_trials_index_equal_those_read_from_the_trials",
    "tests/test_sweep_optuna.py::test_sweep_results_listed_again_draws_nothing_and_imports_no_plotting_until_a_trial_is_told": "test_sweep_optuna pruned trial (its plots)",
    "tests/test_sweep.py::test_fit_sweep_runs_trials_here_then_the_table": "test_sweep_optuna pruned trial (a local grid and its table)",
    # second and third variants of a path trained end to end in make test
    "tests/test_stop_signals.py::test_sigterm_to_a_ddp_run_ends_it_with_a_checkpoint[1-one]": "the same test, [0-all]",
    "tests/test_logger_runs.py::test_mlflow_sqlite_store_first_opened_by_several_ranks_at_once": "test_mlflow_run_continued_after_a_kill",
    "tests/test_corpus.py::test_lightning_example_run_false_fits_resumes_and_loads": "test_corpus hydra main; test_foreign_stock",
    "tests/test_corpus.py::test_plain_trainer_scripts_classes_under_train": "test_corpus hydra main; test_dropin",
    "tests/test_export_predict.py::test_a_crafted_checkpoint_is_refused_in_one_line_and_nothing_runs[cv]": "the same test, [fit] and [predict]",
    "tests/test_export_predict.py::test_a_crafted_checkpoint_is_refused_in_one_line_and_nothing_runs[validate]": "the same test, [fit] and [predict]",
    "tests/test_export_predict.py::test_a_crafted_checkpoint_is_refused_in_one_line_and_nothing_runs[test]": "the same test, [fit] and [predict]",
    "tests/test_export_predict.py::test_a_crafted_checkpoint_is_refused_in_one_line_and_nothing_runs[lr-find]": "the same test, [fit] and [predict]",
    "tests/test_export_predict.py::test_a_crafted_checkpoint_is_refused_in_one_line_and_nothing_runs[export]": "the same test, [fit] and [predict]",
    "tests/test_export_predict.py::test_a_submission_of_its_shape_is_sized_from_this_run": "test_submit_render sizing",
    "tests/test_hw_record.py::test_a_sweep_trial_records_the_link_value_it_built": "test_hw_record submitted run",
    "tests/test_hw_record.py::test_print_config_of_the_script_is_what_the_stock_script_prints": "test_layering print_config",
    "tests/test_hw_run_dir.py::test_script_runs_with_wandb_default_save_dir_get_one_folder_each": "test_hw_run_dir without a logger",
    "tests/test_hw_metrics.py::test_a_tpe_sweep_with_a_csv_logger_tells_each_trial_its_value": "test_hw_metrics trial without its metric",
    "tests/test_hw_metrics.py::test_train_runs_finds_a_scripts_wandb_run_and_reads_its_progress": "test_runs; test_logger_runs wandb script",
    "tests/test_lr_find.py::test_lr_find_run_dir_takes_the_runs_config_and_writes_a_new_run": "test_lr_find plot and fragment",
    "tests/test_lr_find.py::test_lr_find_writes_no_progress_bar_or_trial_noise_into_a_log_file": "test_scale_batch_size log file",
    "tests/test_sync_count.py::test_cifar10_fast_with_its_tensorboard_logger_syncs_only_at_intervals": "the digits presets test beside it",
    "tests/test_shipped_presets.py::test_every_scheduler_preset_layers_onto_the_experiment[cifar10_resnet18]": "the same test, [digits]",
    # cost guards measured in counts: the run's YAML crossings, the fast-error key list, the logged points, the
    # jobs listing's two calls for a dozen jobs (45 s of the cluster group's chain)
    "tests/test_yaml_crossings.py": "test_record (what the record holds); benchmarks/startup.py",
    "tests/test_fast_errors.py::test_key_list_and_messages_match_the_verbs_parsers": "test_fast_errors bundled configs pass",
    "tests/test_step_overhead.py::test_logged_points_and_progress_bar_of_a_digits_run": "test_output one line per epoch",
    "tests/test_jobs_explain.py::test_held_job_explained_and_a_dozen_jobs_and_an_array_in_two_calls": "test_jobs_explain reasons; test_slurm_cluster train jobs",
    # the cluster group's chain (one worker, one test after another): a sweep's array task requeued alone (44 s) is
    # the requeue of test_slurm_cluster's USR1 test and test_site_user's, on a task of test_sweep_workers' array
    "tests/test_sweep.py::test_one_array_task_requeues_alone_and_resumes": "test_slurm_cluster usr1 requeue; test_sweep_workers",
}


def long_for_time(nodeid: str) -> bool:
    """Whether ``nodeid`` (an xdist group suffix ``@...`` allowed) is one of :data:`LONG_FOR_TIME`'s."""
    plain = nodeid.split("@", 1)[0]
    return any(_matches(plain, key) for key in LONG_FOR_TIME)


def _matches(plain: str, key: str) -> bool:
    if key.endswith(".py"):
        return plain.split("::", 1)[0] == key
    if key.endswith("::"):
        return plain == key[:-2] or plain.startswith(key[:-2] + "[")
    return plain == key


def unmatched(root: Path) -> list[str]:
    """The keys of :data:`LONG_FOR_TIME` that name a module or test function no longer in the suite under ``root``
    (the repository): a renamed test must not quietly come back to ``make test`` or vanish from the table."""
    gone = []
    for key in LONG_FOR_TIME:
        path, _, rest = key.partition("::")
        module = root / path
        function = rest.split("[", 1)[0].rstrip(":")
        if not module.is_file() or (function and f"def {function}(" not in module.read_text()):
            gone.append(key)
    return gone
