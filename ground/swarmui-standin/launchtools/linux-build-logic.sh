# Stand-in for SwarmUI's build logic: "rebuild" when HEAD moved since the last
# build or src/bin/must_rebuild exists (an extension was added or updated).
mkdir -p src/bin
head=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ ! -f src/bin/last_build ] || [ "$(cat src/bin/last_build)" != "$head" ] || [ -f src/bin/must_rebuild ]; then
  mkdir -p src/bin/live_release
  { date -u +%FT%TZ; echo "head $head"; ls src/Extensions 2>/dev/null | sed 's/^/extension /'; } > src/bin/live_release/BUILD
  echo "$(date -u +%FT%TZ) build $head" >> src/bin/build.log
  echo "$head" > src/bin/last_build
  rm -f src/bin/must_rebuild
fi
