#!/usr/bin/env bash
# README's test command: the Rust suite, then the Python package's. The package is built and
# installed with pip (maturin, as `pip install ./python` does on a fresh machine) into a
# virtual environment under target/ (or $CARGO_TARGET_DIR), with pytest, pandas and PyYAML for its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release
target="$(realpath -m "${CARGO_TARGET_DIR:-target}")"
venv="$target/python-venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check ./python pytest pandas pyyaml
STACKFLOW_BIN="$target/release/stackflow" "$venv/bin/python" -m pytest -q python/tests
