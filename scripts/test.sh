#!/usr/bin/env bash
# Sets up ./.venv (scripts/setup.sh) and runs the whole test suite, end-to-end demo test included. The docs extra is
# installed by setup, so the suite also builds the documentation site with warnings as errors
# (tests/house/test_docs.py).
#
# The tests run on pytest-xdist workers, one per CPU core (at most 8; ITERALAB_TEST_WORKERS sets the number), with
# --dist loadfile (a module's tests on one worker, its fixtures built once); the tests that start a local Ray wait
# for one another (tests/conftest.py).
# Arguments go to pytest after these, so they override them: `-n 0` runs in this process, `-p no:xdist` without
# the plugin (then no -n is given).
#
# Without a -m of its own, the run leaves out the slow tier: the end-to-end runs on the real demo packages (e2e),
# the whole CPU self-test and the signals timed against a running pass (slow), several minutes on 2 cores, and all but one of the tests that start a local Ray (ray: the default
# run keeps test_raypass's campaign on both engines).
# `-m "e2e or slow or ray" -n 0` runs that tier alone, in one process (CI runs it after this command, .ci/run), and `-m ""`
# runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
tier=(-m "not e2e and not slow and not ray")
for arg in "$@"; do
    case "$arg" in -m | -m=* | -m?*) tier=() ;; esac
done
parallel=()
case " $* " in
    *" -p no:xdist "* | *" -pno:xdist "* | *" -p=no:xdist "*) ;;
    *)
        workers="${ITERALAB_TEST_WORKERS:-$(nproc 2>/dev/null || echo 1)}"
        if [ "$workers" -gt 8 ]; then workers=8; fi
        if [ "$workers" -ge 2 ]; then parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder); fi
        ;;
esac
ITERALAB_DOCS_BUILD=required exec .venv/bin/python -m pytest -q "${parallel[@]}" "${tier[@]}" "$@"
