#!/usr/bin/env bash
# The state every page of docs/ is written from, made in a directory of your choice:
#
#   bash examples/docs-world.sh ~/forge-docs
#   export FORGE_HOME=~/forge-docs/forge-home FORGE_OWNER=alice
#   cd ~/forge-docs/work
#
# work/ is a copy of the quickstart experiment (locked) holding forge_plugins/, examples/,
# opsd-patch/ (a copy of the reference plugin to edit and publish), alice-laptop.pub (a
# public key to trust) and sigstore-js/ (a verify script with its pinned npm packages, for
# docs/signatures.md); forge-home/ holds the reference plugins published as alice and as
# starforge. The doc test (tests/test_docs_commands.py) makes its world with this script,
# so a page's commands run for you as they run there. `forge` must be on PATH.
set -euo pipefail
dest=${1:?usage: bash examples/docs-world.sh DIR}
repo="$(cd "$(dirname "$0")/.." && pwd)"
if [ -e "$dest" ] && [ -n "$(ls -A "$dest" 2>/dev/null)" ]; then
    echo "error: $dest exists and is not empty" >&2
    exit 2
fi
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"
work="$dest/work"
copy() {  # copy a folder without what runs leave behind
    mkdir -p "$2"
    (cd "$1" && tar cf - --exclude=plugins.lock.json --exclude=.forge --exclude=__pycache__ .) | (cd "$2" && tar xf -)
}
copy "$repo/examples/quickstart" "$work"
copy "$repo/examples" "$work/examples"
copy "$repo/forge_plugins" "$work/forge_plugins"
copy "$repo/forge_plugins/opsd-patch" "$work/opsd-patch"
mkdir "$work/sigstore-js"
cp "$repo"/tests/sigstore_js/{verify.js,package.json,package-lock.json} "$work/sigstore-js/"
FORGE_HOME="$dest/laptop-key" forge key generate --name alice-laptop >/dev/null
cp "$dest/laptop-key/keys/alice-laptop.pub" "$work/alice-laptop.pub"
export FORGE_HOME="$dest/forge-home"
unset FORGE_REGISTRY FORGE_JOBS_DIR
for owner in alice starforge; do
    for plugin in "$work"/forge_plugins/*/; do
        forge plugin publish "${plugin%/}" --owner "$owner" >/dev/null
    done
done
(cd "$work" && forge lock . >/dev/null)
echo "export FORGE_HOME=$dest/forge-home FORGE_OWNER=alice"
echo "cd $work"
