# `make run` and `make test` bootstrap .venv (newest versions) on a fresh machine; `make test`
# also bootstraps .venv-min (every direct dependency at its floor, tests/constraints-min.txt).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
MIN_VENV ?= .venv-min
MIN_PY := $(MIN_VENV)/bin/python
MIN_STAMP := $(MIN_VENV)/.installed
MIN_CONSTRAINTS := tests/constraints-min.txt
# The floor venv runs a fast subset: fit and resume (SIGKILL, then `--ckpt_path last` resumes the
# newest run bitwise-equal to an uninterrupted one; signals), config layering, bad input, submit
# dry-run and rendering, EMA (Lightning's WeightAveraging) and DeviceStatsMonitor (psutil); records
# on a file system without flock and lock files following the umask (filelock's floor). The
# cases that need the local Slurm cluster check no dependency: the sbatch --test-only ones check
# the scripts, and the job without flock takes no filelock (its lease is the standard library's).
# They run in the full suite only, as do submit_render's runs that train before they render (the launcher's
# own logic, no floor's: ~35 CPU-s of the 12 minutes).
# The suite's time and its history: benchmarks/README.md.
MIN_TESTS := tests/test_layering.py tests/test_resume.py tests/test_bad_input.py tests/test_no_flock.py \
	tests/test_submit_render.py --deselect tests/test_submit_render.py::test_sbatch_test_only_accepts_each \
	--deselect tests/test_submit_render.py::test_sbatch_test_only_accepts_the_sweep \
	--deselect tests/test_no_flock.py::test_slurm_job_without_flock_requeues_and_completes \
	--deselect tests/test_submit_render.py::test_a_submitted_runs_config_starts_a_new_run_and_only_its_own_job_goes_into_it \
	--deselect tests/test_submit_render.py::test_step_start_timeout_bounds_every_srun_of_the_tasks \
	--deselect tests/test_submit_render.py::test_resubmission_reports_and_checks_changes_before_sbatch \
	--deselect tests/test_submit_render.py::test_a_resubmitted_run_goes_on_from_its_checkpoint_not_from_where_it_started \
	tests/test_training_practice.py::test_ema_validation_checkpoints_and_final_model_carry_the_average \
	tests/test_training_practice.py::test_monitoring_callbacks_profiler_and_early_stopping \
	tests/test_atomic_records.py::test_records_and_their_locks_follow_the_umask

.PHONY: run test test-long test-min lint docs dist bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# torch and torchvision resolve together from the registry (CUDA build; it runs on CPU).
	$(PY) -m pip install -e ".[test]"
	touch $(STAMP)

$(MIN_STAMP): pyproject.toml $(MIN_CONSTRAINTS)
	test -x $(MIN_PY) || $(PYTHON) -m venv $(MIN_VENV)
	$(MIN_PY) -m pip install --upgrade pip
	# the constraints pin each direct dependency at its floor; torch and torchvision as a released pair
	$(MIN_PY) -m pip install -c $(MIN_CONSTRAINTS) -e ".[test]"
	touch $(MIN_STAMP)

run: $(STAMP)
	$(VENV)/bin/train fit --config configs/experiment/digits.yaml

# Four pytest-xdist workers on 2 cores; every test on the real Slurm cluster is in one xdist group
# (tests/conftest.py), so the cluster tests run one after another on one worker, beside the rest.
# That worker mostly waits on Slurm, so the others keep both cores busy; the cluster group is the
# suite's longest chain. Tests longer than the 12 minutes allow go to the long tier (marker long),
# each with a shorter sibling here. tests/tiers.py lists the ones moved there for make test's time alone, each
# with the sibling that stays. Figures: benchmarks/README.md ("The test suite's time").
XDIST := -n 4 --dist loadgroup

# The documentation site (mkdocs.yml, docs/), built strictly: a broken link or reference, a missing
# page or a docstring mkdocstrings cannot read fails it. Into site/ (git-ignored).
MKDOCS := NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site
docs: $(STAMP)
	$(MKDOCS)

# The wheel a user installs without a clone (dist/trainer_cli-<version>-py3-none-any.whl: the package
# with its bundled configs/ and slurm/ templates), built by hatchling (pyproject.toml's build backend)
# with the dependencies left to the pip install that takes it; tests/test_readme_commands.py runs the
# docs' commands with a wheel built the same way.
dist: $(STAMP)
	rm -f dist/trainer_cli-*.whl
	$(PY) -m pip wheel --no-deps --no-build-isolation -w dist .

# lint (ruff: pyflakes, pycodestyle, import order) and types (mypy, strict on the Slurm engine's submit library and
# trainer_cli/atomic.py) of trainer_cli/, as configured in pyproject.toml
lint: $(STAMP)
	$(PY) -m ruff check trainer_cli && $(PY) -m ruff format --check trainer_cli
	$(PY) -m mypy

# Lint (and the strict docs build), the full suite on the newest versions, and beside it the subset on the
# floors. The floor venv is built (on a fresh clone) in the background while the lint and the full
# suite run, not before them: its
# downloads and unpacking overlap the suite, whose cluster group spends much of its time waiting on
# Slurm. It builds at the lowest CPU and I/O priority (nice 19, ionice idle where there is one), so
# it takes the time the suite leaves idle instead of slowing it.
# Its build log is $(MIN_VENV).log; a failed build fails `make test` and shows the log. Once built, the floor's
# tests start at once, beside the full suite (two workers of their own, at the normal priority: they
# need no cluster, and the suite's tail is its cluster group alone, which leaves the cores mostly idle);
# their output ($(MIN_VENV).tests.log) is printed after the suite's.
FLOOR_XDIST := -n 2 --dist loadgroup
# The suite prints its 60 slowest phases (CI's log keeps them: what to move to the long tier next).
BACKGROUND := nice -n 19 $(if $(shell command -v ionice),ionice -c 3)
test: $(STAMP)
	@{ $(BACKGROUND) $(MAKE) --no-print-directory $(MIN_STAMP) >$(MIN_VENV).log 2>&1 || exit 97; \
	  $(MIN_PY) -m pytest -q $(FLOOR_XDIST) $(MIN_TESTS) >$(MIN_VENV).tests.log 2>&1; } & floor=$$!; \
	$(PY) -m ruff check trainer_cli && $(PY) -m ruff format --check trainer_cli && $(PY) -m mypy && $(MKDOCS); lint=$$?; \
	$(PY) -m pytest -q $(XDIST) --durations=60; suite=$$?; \
	wait $$floor; floor=$$?; \
	if [ $$floor -eq 97 ]; then cat $(MIN_VENV).log; echo "make test: building $(MIN_VENV) failed (log above)"; exit 1; fi; \
	echo "the floor's tests, on the lowest versions pyproject.toml allows ($(MIN_VENV)):"; cat $(MIN_VENV).tests.log; \
	test $$lint -eq 0 && test $$suite -eq 0 && test $$floor -eq 0

# The long tests (marker long): each issue's "Done when" at full size on the local cluster (issue 30's
# 12-trial study by 3 workers of 2-task DDP trials, in the journal file and in PostgreSQL), too long
# for the 12 minutes of `make test`; CI (.ci/run) runs them after it. Two workers: the tests on the
# host's cluster run one after another in their xdist group, beside the rest (the Slurm 24.11 core,
# on a cluster of its own, among them).
test-long: $(STAMP)
	$(PY) -m pytest -q -m long -n 2 --dist loadgroup

test-min: $(MIN_STAMP)
	$(MIN_PY) -m pytest -q $(XDIST) $(MIN_TESTS)

bench: $(STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf runs lightning_logs .pytest_cache site
