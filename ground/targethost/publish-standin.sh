#!/usr/bin/env bash
# Publishes the SwarmUI stand-in and the stand-in extensions as bare git repositories under $G/git,
# which the ground's git daemon serves (git://$EXT_GW/<name>.git). start.sh runs it; run it again by
# hand to re-publish the working copy to a running ground, no restart needed (the daemon reads the
# repositories on every request). Other bare repositories under $G/git (a test's) are left alone.
#
# - SwarmUI.git: the working copy of ground/swarmui-standin (uncommitted changes included, ignored
#   files not) as one commit on master, tagged 0.9.8.2-standin; tag broken-build-standin is a commit on
#   top whose tree adds src/standin-build-error, so the stand-in dotnet fails the core build with
#   that file's line (launchtools/standin-dotnet.py).
# - StandinExtension.git: an extension that builds (one .cs file, no .csproj: ExtensionsManager
#   writes its reference project, as for most real extensions).
# - StandinBrokenExtension.git: one commit with a .cs file and standin-build-error: its build fails.
# Commits carry fixed dates, so publishing an unchanged tree gives the same commit ids again.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

export GIT_AUTHOR_NAME=ground GIT_AUTHOR_EMAIL=ground@localhost GIT_COMMITTER_NAME=ground
export GIT_COMMITTER_EMAIL=ground@localhost
# upstream 062407c7's date, the commit the stand-in imitates
export GIT_AUTHOR_DATE="2026-08-21T00:00:00Z" GIT_COMMITTER_DATE="2026-08-21T00:00:00Z"
mkdir -p "$G/git"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

commit_all() {  # dir message : one commit of every file in dir (ignored or not: only wanted files are there)
  git -C "$1" add -f -A .
  git -C "$1" -c commit.gpgsign=false commit -q -m "$2"
}

publish() {  # dir name : force the dir's master and tags into $G/git/name.git
  local bare=$G/git/$2.git
  [ -d "$bare" ] || git init -q --bare --initial-branch=master "$bare"
  git -C "$1" push -q --force "$bare" refs/heads/master:refs/heads/master 'refs/tags/*:refs/tags/*'
}

# SwarmUI.git: the files git would commit in the working copy (tracked, or untracked and not ignored,
# by the project's and the stand-in's own .gitignore), which keeps src/bin, venv/, __pycache__ out.
src=$GROUND_SRC/swarmui-standin
swarm=$work/SwarmUI
mkdir -p "$swarm"
git -C "$REPO" ls-files -z -co --exclude-standard -- "$src" | while IFS= read -r -d '' f; do
  [ -e "$REPO/$f" ] || continue  # deleted in the working copy
  rel=${f#ground/swarmui-standin/}
  mkdir -p "$swarm/$(dirname "$rel")"
  cp -p "$REPO/$f" "$swarm/$rel"
done
git -C "$swarm" init -q -b master
commit_all "$swarm" "SwarmUI stand-in (imitates SwarmUI 062407c7, version 0.9.8.2)"
git -C "$swarm" tag -f 0.9.8.2-standin >/dev/null
git -C "$swarm" checkout -q --detach
echo '/opt/swarmui/src/Core/Program.cs(12,5): error CS1002: ; expected' > "$swarm/src/standin-build-error"
commit_all "$swarm" "Stand-in: a core build that fails (src/standin-build-error)"
git -C "$swarm" tag -f broken-build-standin >/dev/null
publish "$swarm" SwarmUI

ext=$work/StandinExtension
mkdir -p "$ext"
cat > "$ext/StandinExtension.cs" <<'CS'
using SwarmUI.Core;

namespace StandinExtensions;

/// <summary>A SwarmUI extension that builds: the test ground's seed extension.</summary>
public class StandinExtension : Extension
{
    public override void OnInit()
    {
    }
}
CS
git -C "$ext" init -q -b master
commit_all "$ext" "Stand-in extension that builds"
publish "$ext" StandinExtension

broken=$work/StandinBrokenExtension
mkdir -p "$broken"
cat > "$broken/StandinBrokenExtension.cs" <<'CS'
using SwarmUI.Core;

namespace StandinExtensions;

public class StandinBrokenExtension : Extension
{
    public override void OnInit()
    {
}
CS
echo '/opt/swarmui/src/Extensions/StandinBrokenExtension/StandinBrokenExtension.cs(9,2): error CS1513: } expected' \
  > "$broken/standin-build-error"
git -C "$broken" init -q -b master
commit_all "$broken" "Stand-in extension whose build fails (standin-build-error)"
publish "$broken" StandinBrokenExtension

log "published to $G/git: SwarmUI.git (master, 0.9.8.2-standin $(git -C "$G/git/SwarmUI.git" rev-parse --short 0.9.8.2-standin), broken-build-standin), StandinExtension.git, StandinBrokenExtension.git"
