#!/bin/sh
# Set up ucmfs on a fresh Debian machine and use it.
#
#   tools/setup.sh run    install what is missing, build, mount ./mnt over ./store, show it
#   tools/setup.sh test   install what is missing, build (-Werror, again with ASan+UBSan, and
#                         with TSan, and the fuzz targets with clang), run every test; the
#                         last line is "N passed, N failed"
#   tools/setup.sh deps   only install what is missing (packages, libfuse >= 3.17)
#
# Packages come from Debian only, installed with apt-get when missing (as root, or via sudo).
# libfuse >= 3.17 (FUSE passthrough) is the system's where it has one (Debian 13); on Debian 12
# it is built from Debian 13's own source package into deps/ (see need_libfuse below).
set -eu

cd "$(dirname "$0")/.."
top=$(pwd)

PKGS="gcc libc6-dev libfuse3-dev fuse3 dpkg-dev libzstd-dev libaio-dev libxxhash-dev check meson \
ninja-build pkg-config fio attr python3 libjansson-dev"
# the tests also check /.ucm/stats with promtool (Debian's prometheus package), fuzz the
# parsers and decoders with clang's libFuzzer (libclang-rt-dev holds its runtime), and build,
# lint and install the Debian package (tests/package), and run several hosts on one GlusterFS
# volume (tests/mount/hosts.py)
TEST_PKGS="prometheus clang libclang-rt-dev debhelper dh-python lintian systemd man-db \
glusterfs-server glusterfs-client"

say() { printf '%s\n' "== $*"; }

install_missing() {
	missing=""
	for p in $PKGS ${1:-}; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	say "installing Debian packages:$missing"
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	# shellcheck disable=SC2086
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		$missing </dev/null
}

# quiet CMD...: run CMD; its output is shown only if it fails (ninja prints errors on stdout)
quiet() {
	out=$("$@" 2>&1) || {
		status=$?
		printf '%s\n' "$out" | tail -n 60
		say "failed ($status): $*"
		return "$status"
	}
}

# libfuse >= 3.17 for the daemon. The system's when it is new enough; else Debian 13's fuse3
# source package, fetched with `apt-get source` through an apt configuration of its own under
# deps/apt (its own sources list, lists and cache: the system's apt sources, lists and packages
# are never changed) and built with meson into deps/fuse3 as a static library. meson.build
# finds it there by itself; the system's fusermount3 stays the mount helper.
FUSE_MIN=3.17
FUSE_SUITE=trixie
need_libfuse() {
	pkg-config --atleast-version=$FUSE_MIN fuse3 2>/dev/null && return 0
	pc="$top/deps/fuse3/lib/pkgconfig"
	PKG_CONFIG_PATH=$pc pkg-config --atleast-version=$FUSE_MIN fuse3 2>/dev/null && return 0
	apt="$top/deps/apt"
	mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/sources.list.d" \
		"$top/deps/src"
	echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
		"http://deb.debian.org/debian $FUSE_SUITE main" >"$apt/sources.list"
	# every path apt writes to is under deps/apt; it reads the system's dpkg status only
	set -- -o "Dir::Etc::SourceList=$apt/sources.list" \
		-o "Dir::Etc::SourceParts=$apt/sources.list.d" -o "Dir::State::Lists=$apt/lists" \
		-o "Dir::Cache=$apt/cache" -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=" \
		-o "APT::Sandbox::User=root" -q
	say "fetching libfuse >= $FUSE_MIN: Debian $FUSE_SUITE's fuse3 source package into deps/src"
	quiet apt-get "$@" update
	rm -rf "$top/deps/src"/fuse*
	(cd "$top/deps/src" && quiet apt-get "$@" source fuse3)
	src=$(find "$top/deps/src" -mindepth 1 -maxdepth 1 -type d -name 'fuse*' | head -n 1)
	[ -n "$src" ] || {
		say "apt-get source fuse3 left no source tree in deps/src"
		return 1
	}
	say "building $(basename "$src") into deps/fuse3 (static library only)"
	rm -rf "$top/deps/build-fuse3" "$top/deps/fuse3"
	quiet meson setup "$top/deps/build-fuse3" "$src" --prefix="$top/deps/fuse3" \
		--libdir=lib --default-library=static --buildtype=release -Dutils=false \
		-Dexamples=false -Dtests=false -Dinitscriptdir= -Duseroot=false
	quiet ninja -C "$top/deps/build-fuse3" install
}

# build DIR [meson options...]: configure once, then (re)configure the options and compile
build() {
	dir=$1
	shift
	if [ ! -f "$dir/build.ninja" ]; then
		quiet meson setup "$dir" "$@"
	else
		quiet meson configure "$dir" "$@"
	fi
	quiet ninja -C "$dir"
}

cmd_run() {
	install_missing
	need_libfuse
	say "building"
	build build
	mkdir -p store mnt
	if mountpoint -q mnt; then
		say "unmounting the previous ./mnt"
		fusermount3 -u mnt
	fi
	say "mounting ucmfs: build/ucmfs store mnt"
	build/ucmfs store mnt
	id=00112233445566778899aabbccddeeff
	head -c 2M /dev/urandom >"$top/.demo-block"
	say "cp a 2 MiB block to mnt/$id"
	cp "$top/.demo-block" "mnt/$id"
	ls -l mnt/
	cmp "$top/.demo-block" "mnt/$id" && say "read back byte-exact"
	getfattr -d -m 'user.ucm' "mnt/$id"
	say "remount: the block survives"
	fusermount3 -u mnt
	build/ucmfs store mnt
	cmp "$top/.demo-block" "mnt/$id" && say "read back byte-exact after remount"
	rm -f "$top/.demo-block"
	df -h mnt
	say "ucmfs is mounted on ./mnt over ./store (see man/ucmfs.8); unmount: fusermount3 -u mnt"
}

# meson test in DIR; prints its summary and adds to the totals
passed=0
failed=0
skipped=0
run_suites() {
	dir=$1
	shift
	log="$dir/meson-logs/setup-test.out"
	set +e
	meson test -C "$dir" --print-errorlogs "$@" >"$log" 2>&1
	set -e
	grep -E '^ *[0-9]+/[0-9]+ ' "$log" || true
	ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
	bad=0
	for k in 'Fail' 'Unexpected Pass' 'Timeout'; do
		n=$(sed -n "s/^$k: *\([0-9]*\).*/\1/p" "$log" | tail -n 1)
		bad=$((bad + ${n:-0}))
	done
	sk=$(sed -n 's/^Skipped: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
	if [ -z "$ok" ]; then
		# meson itself failed (no summary): show why and count it as a failure
		tail -n 30 "$log"
		bad=$((bad + 1))
	elif [ "$bad" -gt 0 ]; then
		sed -n '/^=* *[0-9]*\/[0-9]* .*FAIL/,$p' "$log" | tail -n 200
	fi
	passed=$((passed + ${ok:-0}))
	failed=$((failed + bad))
	skipped=$((skipped + ${sk:-0}))
}

cmd_test() {
	export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
	export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
	install_missing "$TEST_PKGS"
	need_libfuse
	say "building build/ (-Werror)"
	build build -Dwerror=true
	say "building build-asan/ (ASan+UBSan, invariant checks, -Werror)"
	build build-asan -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false \
		-Dc_args=-DUCM_CHECK_INVARIANTS
	say "building build-tsan/ (TSan, -Werror)"
	build build-tsan -Dwerror=true -Db_sanitize=thread -Db_lundef=false
	say "building build-fuzz/ (clang, libFuzzer, ASan+UBSan: the fuzz targets only)"
	if [ ! -f build-fuzz/build.ninja ]; then
		quiet env CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined \
			-Db_lundef=false
	fi
	quiet ninja -C build-fuzz fuzz-targets
	say "tests: build/"
	run_suites build --suite unit --suite mount --suite mount-off
	say "tests: the Debian package (built, linted, installed, used, purged)"
	run_suites build --suite package
	say "tests: build-asan/ (ASan+UBSan)"
	run_suites build-asan --suite unit --suite fault --suite mount --timeout-multiplier 3
	say "tests: build-tsan/ (TSan: the suites that run threads)"
	export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
	run_suites build-tsan \
		--timeout-multiplier 4 cache cache_model pipeline compress buf tier_cache tier_pipeline \
		tier_pipeline_tight tier_built tier_built_tight tier_built_stripe io tier_built_aio peer \
		tier_peer posix
	say "tests: build-fuzz/ (libFuzzer, ${UCM_FUZZ_SECONDS:-20} s per target after its corpus)"
	run_suites build-fuzz --no-rebuild --suite fuzz
	[ "$skipped" -eq 0 ] || say "$skipped skipped"
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ]
}

case "${1:-}" in
deps)
	install_missing
	need_libfuse
	;;
run) cmd_run ;;
test) cmd_test ;;
*)
	echo "usage: tools/setup.sh run|test|deps" >&2
	exit 2
	;;
esac
