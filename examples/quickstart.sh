#!/usr/bin/env bash
# StarForge quickstart: publish the reference plugins, lock the example experiment and run
# it on the local backend with one hyperparameter overridden.
#
#   bash examples/quickstart.sh
#
# Safe to re-run: publishing the same plugin again is a no-op and the lock stays as it is.
# All StarForge state goes to .forge-home/ in this checkout (FORGE_HOME), never to your own
# ~/.config, ~/.local/share or ~/.cache. Set QUICKSTART_PYTHON to an interpreter that already has
# starforge-core installed to skip creating .venv.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"

if [ -n "${QUICKSTART_PYTHON:-}" ]; then
    py="$QUICKSTART_PYTHON"
else
    if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import starforge" 2>/dev/null; then
        echo "== creating .venv and installing starforge-core from this checkout (once)"
        "${PYTHON:-python3}" -m venv .venv
        .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
        # (pip's notice about a configured local index folder that does not exist is dropped)
        .venv/bin/python -m pip install -q . 2>&1 | { grep -v "^WARNING: Location '.*' is ignored: it is neither a file nor a directory\.$" || true; }
    fi
    py="$repo/.venv/bin/python"
fi
forge() { "$py" -m starforge "$@"; }

export FORGE_HOME="$repo/.forge-home"
export FORGE_OWNER=starforge
unset FORGE_REGISTRY FORGE_JOBS_DIR
experiment=examples/quickstart

echo "== 1. publish forge_plugins/* to the embedded directory registry in .forge-home/"
for plugin in forge_plugins/*/; do
    forge plugin publish "${plugin%/}"
done

echo
echo "== 2. lock $experiment (plugins.lock.json pins every plugin by tree digest)"
forge lock "$experiment"

echo
echo "== 3. submit it with --set opsd.scale=0.5"
forge submit "$experiment" --set opsd.scale=0.5 | tee "$FORGE_HOME/quickstart-scaled.log"

echo
echo "== 4. what the --set changed: the same job with the default opsd.scale=1.0"
forge submit "$experiment" > "$FORGE_HOME/quickstart-default.log" 2>&1
grep -h '^advantages\[step 0\]' "$FORGE_HOME/quickstart-default.log" | sed 's/^/opsd.scale=1.0  /'
grep -h '^advantages\[step 0\]' "$FORGE_HOME/quickstart-scaled.log" | sed 's/^/opsd.scale=0.5  /'

# The commands below work as written in a new shell: forge by its path, with this FORGE_HOME.
if [ -x "$(dirname "$py")/forge" ]; then forge_cmd="$(dirname "$py")/forge"; else forge_cmd="$py -m starforge"; fi
echo
echo "== done. Next (from any shell; docs/quickstart.md walks through each step):"
echo "   export FORGE_HOME=$FORGE_HOME"
echo "   $forge_cmd jobs list"
echo "   $forge_cmd jobs show $(sed -n 's/^job *: //p' "$FORGE_HOME/quickstart-scaled.log" | head -n 1)"
