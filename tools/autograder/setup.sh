#!/usr/bin/env bash
# Gradescope runs this once, as root, to build the grading image; the bundle is unpacked in
# /autograder/source. The CPU build of torch comes first and pinned (a bare `torch` would pull a
# multi-GB CUDA build), then the course's own dependencies and the test runner. Then the user
# learner code runs as (run_autograder): one of its own, without a home or a shell.
set -euo pipefail
cd "$(dirname "$0")"
apt-get update -q
apt-get install -y -q python3 python3-pip python3-venv
python3 -m pip install -q --upgrade pip
python3 -m pip install -q torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
python3 -m pip install -q -e . pytest pytest-timeout
id minisgl-sandbox >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin minisgl-sandbox
chmod 700 "$PWD"  # /autograder/source: the installed course (keys, hidden tests, the real engine) is root's alone
