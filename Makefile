# Everything a fresh machine needs: `make demo` and `make test` create .venv and install the
# project with uv (itself installed into .uv/ by pip), from the committed uv.lock.
PYTHON ?= python3
UV_VERSION := 0.13.9
UV := .uv/bin/uv
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export UV_PYTHON_DOWNLOADS := never
# The demo's sandbox keeps its state here, apart from any sandbox a user runs.
DEMO_STATE := $(CURDIR)/out/.sandbox

.PHONY: install demo test e2e lint format clean

$(UV):
	$(PYTHON) -m venv .uv
	.uv/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# --compile-bytecode: where PYTHONDONTWRITEBYTECODE is set (this machine, CI, many containers)
# nothing would ever be cached, and every process would compile what it imports
# (great-expectations alone: 8 s instead of 4 s).
$(STAMP): pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --all-extras --compile-bytecode --python $(PYTHON)
	touch $@

install: $(STAMP)

# The main job: the sample CRM export cleaned through the sandbox mail world into out/demo/.
# The sandbox runs on free ports with its own state folder and always stops afterwards; a short
# retry delay keeps the greylisted sample address quick.
demo: install
	@mkdir -p out
	@export LISTHYGIENE_SANDBOX_DIR=$(DEMO_STATE); \
	$(BIN)/listhygiene sandbox down 2>/dev/null; \
	$(BIN)/listhygiene sandbox up sample_data/world.json --dns-port 0 --smtp-port 0 \
		> out/sandbox.env || exit 1; \
	trap '$(BIN)/listhygiene sandbox down' EXIT; \
	. ./out/sandbox.env; \
	LISTHYGIENE_HELO=demo.listhygiene.test LISTHYGIENE_RETRY_DELAYS=2 \
		$(BIN)/listhygiene clean sample_data/crm_export.csv --out out/demo || exit 1; \
	echo "outputs: $(CURDIR)/out/demo (open out/demo/report.html in a browser)"

# Two pytest-xdist workers, one test module each at a time (--dist loadfile keeps a module's
# fixtures in one process): most tests wait on sandbox mail hosts, so two processes halve the time.
test: install
	$(BIN)/ruff check .
	$(BIN)/pytest -n 2 --dist loadfile

# The end-to-end tests: Airflow (LocalExecutor, then Celery with two workers), Dagster's web
# server and daemon, the sandbox and the service, each a real process (tests/e2e/). They need the
# machine's PostgreSQL and Redis, as `make test` needs PostgreSQL. --durations: where the
# time goes (keep the whole under 10 minutes on 2 cores).
e2e: install
	$(BIN)/pytest -m e2e tests/e2e --durations=12

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .uv out .pytest_cache .ruff_cache
