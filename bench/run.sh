#!/usr/bin/env bash
# make bench: every section of BENCHMARKS.md, from one run. Each program
# stamps its results files with $TW_BENCH_RUN_ID; bench/report refuses
# files of any other run. BENCH_QUICK=1 runs every section briefly (to
# check the tooling; its numbers are not for the report).
#
# BENCH_BASE is a commit whose collector kcost runs beside this tree's in
# the same rounds (its mode base), so that what a change to the programs
# saves or costs is measured within one run: by default the commit in the
# run ID of the results committed at HEAD (bench/results/RUN_ID; a dirty
# run's commit without its uncommitted changes); BENCH_BASE=none leaves it
# out.
set -euo pipefail
cd "$(dirname "$0")/.."
COLLECTOR=${COLLECTOR:-_build/tokenwire}
CONFIG=${CONFIG:-config.yaml}
R=bench/results
B=/tmp/tokenwire-bench
mkdir -p "$R" "$B"
export TW_BENCH_RUN_ID
TW_BENCH_RUN_ID=$(go run ./bench/runid)
echo "bench: run $TW_BENCH_RUN_ID"
KC_BASE=()
if [[ -n "${BENCH_BASE:-}" ]]; then
	base=$BENCH_BASE from="BENCH_BASE"
else
	prev=$(git show HEAD:bench/results/RUN_ID 2>/dev/null || true)
	base=$(sed -n 's/^[0-9TZ]*-\([0-9a-f]\{12,\}\)\(-dirty\)\{0,1\}$/\1/p' <<< "$prev")
	from="the commit of run $prev"
	[[ -n "$base" ]] || echo "bench: no commit in HEAD's bench/results/RUN_ID ('$prev'): no mode base (BENCH_BASE names one)"
fi
if [[ -n "$base" && "$base" != none ]]; then
	rev=$(git rev-parse --verify --quiet "$base^{commit}") || { echo "bench: $base ($from) is not a commit here (BENCH_BASE=none leaves the base out)" >&2; exit 1; }
	short=$(git rev-parse --short=12 "$rev")
	echo "bench: building the collector of $short ($from) for kcost's mode base ($B/base-build.log)"
	rm -rf "$B/base"
	git worktree prune
	trap 'git worktree remove --force "$B/base" 2>/dev/null || true' EXIT
	git worktree add --detach --quiet "$B/base" "$rev"
	# Its own make: nothing of this one's command line or jobs carries over.
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$B/base" build > "$B/base-build.log" 2>&1 ||
		{ echo "bench: building $short failed, see $B/base-build.log (BENCH_BASE=none leaves the base out)" >&2; exit 1; }
	cp "$B/base/_build/tokenwire" "$B/tokenwire-base"
	git worktree remove --force "$B/base"
	trap - EXIT
	"$B/tokenwire-base" validate --config "$CONFIG" || { echo "bench: the collector of $short does not take $CONFIG (BENCH_BASE=none leaves the base out)" >&2; exit 1; }
	KC_BASE=(-base-collector "$B/tokenwire-base" -base-label "$short, $from")
fi

# Results of an earlier run must not survive into this one.
rm -f "$R"/*.csv "$R"/*.meta.json "$R"/*.png "$R"/*.md "$R"/gobench.txt "$R"/RUN_ID
echo "$TW_BENCH_RUN_ID" > "$R/RUN_ID"

if [[ -n "${BENCH_QUICK:-}" ]]; then
	COUNT=2 KC="-rounds 1 -duration 3s -idle 1s" OV="-repeats 1 -duration 4s -warmup 2s -idle-conns 500"
	XN="-duration 1s -repeats 1" PL="-repeats 1 -step 300ms"
else
	COUNT=5 KC="-rounds 3 -duration 10s -idle 2s" OV="-repeats 5 -duration 12s -warmup 3s"
	XN="-duration 2s -repeats 3" PL="-repeats 3 -step 1s"
fi

go build -o "$B/kcost" ./bench/kcost
go build -o "$B/overhead" ./bench/overhead
go build -o "$B/xdpnf" ./bench/xdpnf
go build -o "$B/pipeline" ./bench/pipeline
go build -o "$B/streams" ./bench/streams

{
	echo "run_id: $TW_BENCH_RUN_ID"
	go test -run '^TestStreamRecordsDoNotAllocate$' -v ./internal/streamagg/ 2>&1 | grep -E '^(--- |ok|FAIL)'
	go test -run '^$' -bench '^BenchmarkStreamRecords$' -benchmem -count "$COUNT" ./internal/streamagg/
	go test -run '^$' -bench '^BenchmarkXDP(Empty)?$' -benchtime 1000000x -count "$COUNT" ./internal/xdp/
	go test -run '^$' -bench '^BenchmarkUprobeTrap$' -benchtime 200000x -count "$COUNT" ./bench/uprobetrap/
} > "$R/gobench.txt"

"$B/kcost" -collector "$COLLECTOR" -config "$CONFIG" $KC "${KC_BASE[@]}" -outdir "$R"
"$B/overhead" -collector "$COLLECTOR" -config "$CONFIG" -streams 200 $OV -outdir "$R"
"$B/pipeline" $PL -outdir "$R"
"$B/xdpnf" -rx napi -bpf-stats -entries 1,10000,65536 \
	-variants none,xdp-drop-all,xdp-native,xdp-lpm,iptables-legacy-raw,iptables-ipset,nft-set-ingress $XN -outdir "$R" > "$B/xdpnf.md"
"$B/streams" -streams 50 -chunks 50 -interval 20ms -think 50ms -outdir "$R"
go run ./bench/report -run-id "$TW_BENCH_RUN_ID" -out BENCHMARKS.md
echo "bench: wrote BENCHMARKS.md and $R/ (run $TW_BENCH_RUN_ID)"
