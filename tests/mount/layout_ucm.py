#!/usr/bin/env python3
"""layout=ucm (DESIGN.md section 5): byte-compatible with UCM's PosixStore, whose tree is
STORE/<hex[0:3]>/<hex> holding the raw block bytes, written to <hex>.tmp and renamed. ucmfs
mounts a tree that UCM wrote (built here by a script, as UCM would leave it) and UCM can read
what ucmfs wrote (checked here on the files themselves). No compression in this layout.
"""
import errno
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compress import kv_bytes, xattr
from ucmtest import (KiB, MiB, SLOW, Mount, case, check, cmd, daemon_bin, daemon_env,
                     expect_errno, pattern, rand_id, read_file, run, same, write_file)

SIZES = [0, 1, 4 * KiB, 4 * KiB + 1, 64 * KiB, MiB, 2 * MiB, 3 * MiB + 17, 8 * MiB + 3]


def ucm_path(store, bid):
    return os.path.join(store, bid[:3], bid)


def ucm_tree(store, seed):
    """Blocks as UCM's PosixStore leaves them, plus a stray temp file of an unfinished
    write. Returns ({id: bytes}, path of the temp file, its bytes)."""
    rng = random.Random(seed)
    blocks = {}
    for i, n in enumerate(SIZES):
        bid = rng.randbytes(16).hex()
        data = kv_bytes(n, seed + i) if i % 2 else pattern(n, seed + i)
        os.makedirs(os.path.join(store, bid[:3]), exist_ok=True)
        with open(ucm_path(store, bid), 'wb') as f:
            f.write(data)
        blocks[bid] = data
    # two blocks in one shard directory
    first = sorted(blocks)[0]
    bid = first[:3] + rng.randbytes(16).hex()[3:]
    blocks[bid] = pattern(100 * KiB + 7, seed + 99)
    with open(ucm_path(store, bid), 'wb') as f:
        f.write(blocks[bid])
    # UCM was writing this one when it stopped: <hex>.tmp, no final name
    tmp_id = rng.randbytes(16).hex()
    os.makedirs(os.path.join(store, tmp_id[:3]), exist_ok=True)
    tmp = ucm_path(store, tmp_id) + '.tmp'
    tmp_data = pattern(3 * KiB, seed + 98)
    with open(tmp, 'wb') as f:
        f.write(tmp_data)
    return blocks, tmp, tmp_data


def ls(m):
    return sorted(n for n in cmd(['ls', '-A', m.mnt]).stdout.split() if n != '.ucm')


@case(timeout=90)
def test_mount_ucm_tree():
    """A tree written by UCM: ls lists every block (not the temp file), each reads back
    byte-exact (also streamed from disk with mem_size=1M, by ranges), as raw blocks."""
    m = Mount('layout=ucm')
    os.makedirs(m.store)
    blocks, tmp, tmp_data = ucm_tree(m.store, 1000)
    with m:
        check(ls(m) == sorted(blocks), 'ls lists %d names, UCM wrote %d blocks: %s' % (
            len(ls(m)), len(blocks), sorted(set(ls(m)) ^ set(blocks))[:3]))
        tmp_id = os.path.basename(tmp)[:32]
        expect_errno(errno.ENOENT, os.stat, m.path(tmp_id))
        for bid, data in sorted(blocks.items()):
            st = os.stat(m.path(bid))
            check(st.st_size == len(data), 'st_size %d of a %d-byte UCM block' % (
                st.st_size, len(data)))
            check(xattr(m.path(bid), 'user.ucm.codec') == 'raw', 'codec of a UCM block: %s' %
                  xattr(m.path(bid), 'user.ucm.codec'))
            same(read_file(m.path(bid)), data, 'UCM block of %d bytes' % len(data))
        m.remount('layout=ucm,mem_size=1M')
        rng = random.Random(5)
        for bid, data in blocks.items():
            if len(data) < MiB:
                continue
            fd = os.open(m.path(bid), os.O_RDONLY | os.O_DIRECT)
            try:
                for _ in range(40):
                    off, ln = rng.randrange(len(data)), rng.randrange(1, 300 * KiB)
                    check(os.pread(fd, ln, off) == data[off:off + ln], 'streamed UCM block '
                          'of %d bytes: pread(len %d, off %d)' % (len(data), ln, off))
            finally:
                os.close(fd)
            same(read_file(m.path(bid)), data, 'streamed UCM block of %d bytes' % len(data))
        m.unmount()
        for bid, data in blocks.items():
            with open(ucm_path(m.store, bid), 'rb') as f:
                check(f.read() == data, 'a UCM block file changed after ucmfs mounted it')
        with open(tmp, 'rb') as f:
            check(f.read() == tmp_data, 'UCM\'s fresh temp file changed')


@case(timeout=90)
def test_write_ucm_layout():
    """Blocks written through ucmfs with layout=ucm are, after unmount, raw files with
    exactly the written bytes at STORE/<hex[0:3]>/<hex>, with no temp file left over; the
    tree UCM wrote is untouched; a remount reads everything back."""
    for opts in ('layout=ucm', 'layout=ucm,mem_size=1M', 'layout=ucm,durable'):
        m = Mount(opts)
        os.makedirs(m.store)
        old, tmp, _ = ucm_tree(m.store, 2000)
        with m:
            new = {}
            for i, n in enumerate(SIZES + [5 * MiB + 1]):
                bid = rand_id()
                new[bid] = kv_bytes(n, 3000 + i) if i % 2 else pattern(n, 3000 + i)
                write_file(m.path(bid), new[bid])
            check(ls(m) == sorted(set(old) | set(new)), '-o %s: ls after the writes' % opts)
            m.unmount()
            for bid, data in sorted(new.items()):
                p = ucm_path(m.store, bid)
                check(os.path.isfile(p), '-o %s: no file %s/%s for a block of %d bytes' % (
                    opts, bid[:3], bid, len(data)))
                check(os.path.getsize(p) == len(data), '-o %s: %s has %d bytes, %d written' % (
                    opts, bid, os.path.getsize(p), len(data)))
                with open(p, 'rb') as f:
                    check(f.read() == data, '-o %s: %s: the file holds other bytes than '
                          'were written' % (opts, bid))
            for bid, data in old.items():
                with open(ucm_path(m.store, bid), 'rb') as f:
                    check(f.read() == data, '-o %s: a UCM block changed' % opts)
            check(not os.path.exists(os.path.join(m.store, 'data')), '-o %s: a native data/ '
                  'directory was made' % opts)
            names = []
            for root, dirs, files in os.walk(m.store):
                if root == m.store:
                    dirs[:] = [d for d in dirs if len(d) == 3]
                    continue
                names += [os.path.join(os.path.basename(root), n) for n in files]
            stray = sorted(n for n in names if os.path.basename(n)
                           not in set(old) | set(new) and n != os.path.join(
                               os.path.basename(os.path.dirname(tmp)), os.path.basename(tmp)))
            check(not stray, '-o %s: other files in the shard directories: %s' % (
                opts, stray[:4]))
            m.start()
            check(ls(m) == sorted(set(old) | set(new)), '-o %s: ls after remount' % opts)
            for bid, data in list(new.items()) + list(old.items()):
                same(read_file(m.path(bid)), data, '-o %s: after remount' % opts)


def start_rejected(opts):
    """ucmfs -f -o opts on fresh dirs: returns (exit status, output); unmounts if it did."""
    with tempfile.TemporaryDirectory(prefix='ucmfs-rej-') as d:
        store, mnt = os.path.join(d, 'store'), os.path.join(d, 'mnt')
        os.mkdir(mnt)
        try:
            r = subprocess.run([daemon_bin(), '-f', '-o', opts, store, mnt],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=10 * SLOW, env=daemon_env(), stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            subprocess.run(['fusermount3', '-u', '-z', mnt], stderr=subprocess.DEVNULL)
            raise AssertionError('ucmfs -o %s started and kept running' % opts)
        if os.path.ismount(mnt):
            subprocess.run(['fusermount3', '-u', '-z', mnt], stderr=subprocess.DEVNULL)
        return r.returncode, r.stdout


@case(timeout=60)
def test_ucm_layout_rejects_compression():
    for opts, word in (('layout=ucm,compress=zstd', 'compress'),
                       ('layout=ucm,compress=zstd:3', 'compress'),
                       ('compress=zstd,layout=ucm', 'compress'),
                       ('layout=ucm,pipeline=compress:posix', 'compress'),
                       ('layout=ucmx', 'layout')):
        rc, out = start_rejected(opts)
        lines = [l for l in out.split('\n') if l.strip()]
        check(rc == 2, '-o %s: exit status %d, not 2: %s' % (opts, rc, out.strip()[:300]))
        check(len(lines) == 1, '-o %s: %d lines of output, not one: %r' % (
            opts, len(lines), out[:300]))
        check(word in lines[0], '-o %s: the message does not name %r: %s' % (
            opts, word, lines[0]))


if __name__ == '__main__':
    run([test_mount_ucm_tree, test_write_ucm_layout, test_ucm_layout_rejects_compression])
