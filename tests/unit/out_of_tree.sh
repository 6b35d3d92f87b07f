#!/bin/sh
# The example store built as a tier outside the tree is: the project installed into a
# temporary DESTDIR, tiers/example/dirstore.c copied alone and compiled with the flags of the
# installed ucmfs-tier.pc (so the installed tier.h is the one header of the project it can
# find), then checked with ucm-tier-check.
#   out_of_tree.sh BUILD_DIR DIRSTORE_C UCM_TIER_CHECK
set -eu
build=$1 src=$2 check=$(realpath "$3")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ucmfs-out-of-tree.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if ! meson install -C "$build" --destdir "$tmp/root" --no-rebuild >"$tmp/install.log" 2>&1
then
	cat "$tmp/install.log"
	echo "meson install --destdir failed"
	exit 1
fi
pc=$(find "$tmp/root" -name ucmfs-tier.pc)
hdr=$(find "$tmp/root" -path '*/include/ucmfs/tier.h')
if [ -z "$pc" ] || [ -z "$hdr" ]; then
	echo "not installed: ucmfs-tier.pc '$pc', ucmfs/tier.h '$hdr'"
	exit 1
fi

# the .pc names its installed prefix: the sysroot puts its -I under DESTDIR
PKG_CONFIG_LIBDIR=$(dirname "$pc")
PKG_CONFIG_SYSROOT_DIR=$tmp/root
export PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR
cflags=$(pkg-config --cflags ucmfs-tier | sed 's/ *$//')
libs=$(pkg-config --libs ucmfs-tier | sed 's/ *$//')
echo "pkg-config --cflags ucmfs-tier: $cflags"
if [ "$cflags" != "-I$(dirname "$hdr")" ] || [ -n "$libs" ]; then
	echo "ucmfs-tier.pc should give -I$(dirname "$hdr") and no libraries (libs: '$libs')"
	exit 1
fi

mkdir "$tmp/src"
cp "$src" "$tmp/src/dirstore.c"
cd "$tmp/src"
# shellcheck disable=SC2086 # the flags are words
${CC:-cc} -shared -fPIC -pthread -O2 -Wall -Wextra -Werror $cflags -o ucmfs-dirstore.so \
	dirstore.c
"$check" "$tmp/src/ucmfs-dirstore.so"
