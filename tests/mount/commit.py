#!/usr/bin/env python3
"""Commit rules: block_size, max_block, declared sizes and writers killed mid-way
(DESIGN.md section 3, "Writing")."""
import errno
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (KiB, MiB, SLOW, Mount, check, expect_errno, held_elsewhere, pattern,
                     popen, rand_id, read_file, run, same, wait_until, write_file)

CREATE = os.O_WRONLY | os.O_CREAT


def absent(m, bid, what):
    expect_errno(errno.ENOENT, os.stat, m.path(bid))
    expect_errno(errno.ENOENT, os.open, m.path(bid), os.O_RDONLY)
    check(bid not in m.blocks(), '%s: listed by readdir' % what)


def test_block_size_short_write():
    with Mount('block_size=1M') as m:
        bid = rand_id()
        fd = os.open(m.path(bid), CREATE)
        try:
            check(os.write(fd, pattern(512 * KiB, 1)) == 512 * KiB, 'short write')
        except BaseException:
            os.close(fd)
            raise
        expect_errno(errno.EIO, os.close, fd)
        absent(m, bid, '512 KiB block with block_size=1M')
        # the same through Python's file object: close() raises
        bid2 = rand_id()
        f = open(m.path(bid2), 'wb', buffering=0)
        f.write(pattern(MiB - 1, 2))
        expect_errno(errno.EIO, f.close)
        absent(m, bid2, '1M-1 block with block_size=1M')
        # an empty block is not a 1M block either
        bid3 = rand_id()
        fd = os.open(m.path(bid3), CREATE)
        expect_errno(errno.EIO, os.close, fd)
        absent(m, bid3, 'empty block with block_size=1M')
        # a failed commit leaves the id free for a complete write
        write_file(m.path(bid), pattern(MiB, 3))
        same(read_file(m.path(bid)), pattern(MiB, 3), 'complete write after a failed one')


def test_block_size_full_write():
    with Mount('block_size=1M') as m:
        ids = [rand_id() for _ in range(3)]
        write_file(m.path(ids[0]), pattern(MiB, 4))                 # one 1M write
        write_file(m.path(ids[1]), pattern(MiB, 5), chunk=4 * KiB)   # many small ones
        # out of order, by pwrite
        fd = os.open(m.path(ids[2]), CREATE)
        data = pattern(MiB, 6)
        for off in range(MiB - 64 * KiB, -1, -64 * KiB):
            os.pwrite(fd, data[off:off + 64 * KiB], off)
        os.close(fd)
        for i, bid in enumerate(ids):
            check(os.stat(m.path(bid)).st_size == MiB, 'size of a full 1M block')
            same(read_file(m.path(bid)), pattern(MiB, 4 + i), 'full 1M block %d' % i)
        check(m.blocks() == sorted(ids), 'listing: %s' % m.blocks())


def crossing_write(fd, data, off, limit):
    """pwrite across the size limit: EFBIG, or (as for RLIMIT_FSIZE) a count cut short
    exactly at the limit, after which a write at the limit fails EFBIG. Returns the count."""
    try:
        n = os.pwrite(fd, data, off)
    except OSError as e:
        check(e.errno == errno.EFBIG, 'write across the limit: %s, expected EFBIG' % e)
        return 0
    check(off + n == limit, 'a write across the limit at %d wrote %d of %d bytes' % (
        off, n, len(data)))
    expect_errno(errno.EFBIG, os.pwrite, fd, data[n:], limit)
    return n


def test_block_size_efbig():
    with Mount('block_size=1M') as m:
        bid = rand_id()
        data = pattern(MiB, 7)
        fd = os.open(m.path(bid), CREATE)
        try:
            check(os.write(fd, data) == MiB, 'the first 1M')
            expect_errno(errno.EFBIG, os.write, fd, b'x')
            crossing_write(fd, data[-100:] + b'y' * 3996, MiB - 100, MiB)
            expect_errno(errno.EFBIG, os.pwrite, fd, b'z', 5 * MiB)
        finally:
            os.close(fd)
        # the refused writes changed nothing: the 1M block is whole
        same(read_file(m.path(bid)), data, 'block after EFBIG writes')
    with Mount('max_block=1M') as m:
        bid = rand_id()
        fd = os.open(m.path(bid), CREATE)
        try:
            check(os.write(fd, pattern(MiB - 10, 8)) == MiB - 10, 'below max_block')
            # a write that crosses the limit fails EFBIG, or (as for RLIMIT_FSIZE) is cut
            # short exactly at the limit, and the next one fails EFBIG
            n = crossing_write(fd, b'q' * 20, MiB - 10, MiB)
            tail = b'q' * n
            os.lseek(fd, MiB, os.SEEK_SET)
            expect_errno(errno.EFBIG, os.write, fd, b'r' * 20)
            expect_errno(errno.EFBIG, os.ftruncate, fd, MiB + 1)
        finally:
            os.close(fd)
        same(read_file(m.path(bid)), pattern(MiB - 10, 8) + tail, 'max_block block after EFBIG')


KILLER = r'''
import os, random, signal, sys
path, size, mode, wait = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == 'wait'
data = random.Random(9).randbytes(size)
fd = os.open(path, os.O_RDWR | os.O_CREAT)
if mode == 'ftruncate':
    os.ftruncate(fd, size)
elif mode == 'fallocate':
    os.posix_fallocate(fd, 0, size)
half = size // 2
off = 0
while off < half:
    off += os.write(fd, data[off:min(half, off + (1 << 20))])
if wait:
    sys.stdout.write('ready\n')
    sys.stdout.flush()
    sys.stdin.read()
os.kill(os.getpid(), signal.SIGKILL)
'''


def killed_writer(m, size, mode, wait=False):
    """A writer that declares its size (mode: ftruncate, fallocate; none with block_size),
    writes half and is SIGKILLed: by itself, or by us (wait) once it is parked."""
    bid = rand_id()
    p = popen([sys.executable, '-c', KILLER, m.path(bid), str(size), mode,
               'wait' if wait else 'self'],
              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if wait:
        check(p.stdout.readline() == 'ready\n', 'the writer did not get going')
        absent(m, bid, 'reservation of a live writer')
        p.kill()
    rc = p.wait(timeout=60 * SLOW)
    check(rc == -signal.SIGKILL, 'writer exit status %d' % rc)
    absent(m, bid, 'half-written block (%s) of a SIGKILLed writer' % mode)
    # its reservation is gone: the id can be written whole, exclusively
    def excl_ok():
        try:
            fd = os.open(m.path(bid), CREATE | os.O_EXCL)
        except FileExistsError:
            return False
        os.write(fd, pattern(size, 10))
        os.close(fd)
        return True
    check(wait_until(excl_ok, 5), 'the dead writer\'s reservation still blocks O_EXCL')
    same(read_file(m.path(bid)), pattern(size, 10), 'block written after the dead writer')
    os.unlink(m.path(bid))
    return bid


def test_killed_writer_leaves_nothing():
    with Mount() as m:
        ids = [killed_writer(m, 4 * MiB + 3, 'ftruncate'),
               killed_writer(m, 2 * MiB, 'fallocate'),
               killed_writer(m, 6 * MiB + 1, 'ftruncate', wait=True)]
        # not on disk either: a new daemon on the same store does not find them
        m.remount()
        for bid in ids:
            absent(m, bid, 'after remount')
        check(m.blocks() == [], 'blocks after remount: %s' % m.blocks())
    with Mount('block_size=1M') as m:
        killed_writer(m, MiB, 'none')


def test_refused_close_frees_the_id():
    """A close refused with EIO ends that writer's part even while another process still
    holds the open file (the kernel releases it only when the last holder closes): a new
    open starts a new reservation, and its complete close publishes at once."""
    with Mount() as m:
        bid = rand_id()
        fd = os.open(m.path(bid), CREATE)
        os.ftruncate(fd, 64 * KiB)
        os.write(fd, pattern(16 * KiB, 1))
        with held_elsewhere(fd):
            expect_errno(errno.EIO, os.close, fd)
            absent(m, bid, 'a declared block closed with a quarter written')
            write_file(m.path(bid), pattern(32 * KiB, 2))
            same(read_file(m.path(bid)), pattern(32 * KiB, 2),
                 'a block written whole after a refused close, while the old file is held')
        same(read_file(m.path(bid)), pattern(32 * KiB, 2), 'the block once the holder is gone')


if __name__ == '__main__':
    run([test_block_size_short_write, test_block_size_full_write, test_block_size_efbig,
         test_killed_writer_leaves_nothing, test_refused_close_frees_the_id])
