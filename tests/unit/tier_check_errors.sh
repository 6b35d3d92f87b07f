#!/bin/sh
# ucm-tier-check refuses what it cannot check with one line on stderr and exit status 1
# (2 for bad usage), before it runs any case.
#   tier_check_errors.sh UCM_TIER_CHECK BAD_ABI_SO NO_ENTRY_SO DIRSTORE_SO
set -u
check=$1 bad_abi=$2 no_entry=$3 dirstore=$4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ucmfs-tier-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0

# expect STATUS MESSAGE ARGS...: exit status STATUS, nothing on stdout, and stderr's first
# line matching the pattern MESSAGE (its only line, unless it is the usage)
expect() {
	want_rc=$1 want=$2
	shift 2
	"$check" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	first=$(head -n 1 "$tmp/err")
	lines=$(wc -l <"$tmp/err")
	# shellcheck disable=SC2254 # want is a pattern
	case "$first" in $want) match=1 ;; *) match=0 ;; esac
	if [ "$rc" -ne "$want_rc" ] || [ -s "$tmp/out" ] || [ "$match" -ne 1 ] ||
	   { [ "$want_rc" -eq 1 ] && [ "$lines" -ne 1 ]; }; then
		echo "FAIL: ucm-tier-check $*: exit $rc (want $want_rc), stderr:"
		cat "$tmp/err"
		echo "want: $want"
		[ -s "$tmp/out" ] && { echo "stdout:"; cat "$tmp/out"; }
		fails=$((fails + 1))
	else
		echo "ok: ucm-tier-check $*: $first"
	fi
}

expect 1 "ucm-tier-check: tier library $tmp/none.so: No such file or directory" "$tmp/none.so"
abi='tier ABI [0-9]*, this daemon has [0-9]*'
expect 1 "ucm-tier-check: tier library $bad_abi is built for $abi" "$bad_abi"
expect 1 "ucm-tier-check: tier library $no_entry has no entry point ucmfs_tier_plugin()" \
	"$no_entry"
expect 1 "ucm-tier-check: store: unknown option 'colour' (dirstore takes path and capacity)" \
	"$dirstore" colour=blue
expect 2 "ucm-tier-check: 'capacity' is not KEY=VALUE" "$dirstore" capacity
expect 2 "usage: ucm-tier-check LIB.so \\[KEY=VALUE ...\\]"
exit $((fails > 0))
