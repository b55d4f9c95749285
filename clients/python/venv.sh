# Sourced by generate.sh and test.sh: makes sure clients/python/.venv exists and
# holds exactly requirements.txt plus the package (editable), then sets $PY to its
# python. Needs only python3 (>= 3.11) with pip and network to PyPI; reinstalls
# only when requirements.txt or pyproject.toml change. KEYCAP_PY_VENV overrides
# the venv's location; PYTHON the interpreter it is made from.
PY_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${KEYCAP_PY_VENV:-$PY_DIR/.venv}"
BASE_PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
  rm -rf "$VENV"
  if ! "$BASE_PY" -m venv "$VENV" >/dev/null 2>&1; then
    # Debian/Ubuntu without python3-venv: bootstrap virtualenv with pip into a
    # private directory (--target is allowed even under PEP 668).
    echo "python: '$BASE_PY -m venv' unavailable; bootstrapping virtualenv" >&2
    rm -rf "$VENV"
    "$BASE_PY" -m pip install --quiet --disable-pip-version-check --target "$PY_DIR/.venv-bootstrap" virtualenv==21.15.11
    PYTHONPATH="$PY_DIR/.venv-bootstrap" "$BASE_PY" -m virtualenv --quiet "$VENV"
  fi
fi
PY="$VENV/bin/python"

_want="$(cat "$PY_DIR/requirements.txt" "$PY_DIR/pyproject.toml" | "$PY" -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')"
if [ "$(cat "$VENV/.keycap-installed" 2>/dev/null)" != "$_want" ]; then
  "$PY" -m pip install --quiet --disable-pip-version-check -r "$PY_DIR/requirements.txt"
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$PY_DIR"
  echo "$_want" >"$VENV/.keycap-installed"
fi
unset _want
