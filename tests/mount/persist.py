#!/usr/bin/env python3
"""Memory smaller than the data, persistence across remounts (with and without the index a
clean unmount saves), durability after fsync when the daemon is killed (DESIGN.md sections 3
and 5)."""
import errno
import os
import random
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (KiB, MiB, Mount, case, check, expect_errno, flip, pattern, rand_id,
                     read_fd, read_file, run, same, wait_until, write_file)
from compress import stat_sum

# 64 MiB of blocks; with mem_size=8M several are bigger than the whole memory tier
SIZES_64M = [12 * MiB, 9 * MiB + 1, 8 * MiB + 4097, 6 * MiB, 5 * MiB + 3, 4 * MiB, 3 * MiB + 7,
             3 * MiB, 2 * MiB + 1, 2 * MiB, 2 * MiB - 1, MiB + 5, MiB, MiB, 64 * KiB + 1,
             4 * KiB]
SIZES_64M.append(64 * MiB - sum(SIZES_64M))


def write_all(m, sizes, seed0=0):
    blocks = {}
    for i, n in enumerate(sizes):
        bid = rand_id()
        blocks[bid] = (n, seed0 + i)
        write_file(m.path(bid), pattern(n, seed0 + i))
    return blocks


def verify_all(m, blocks, what):
    check(m.blocks() == sorted(blocks), '%s: listing has %d names, %d blocks written' % (
        what, len(m.blocks()), len(blocks)))
    for bid, (n, seed) in sorted(blocks.items()):
        check(os.stat(m.path(bid)).st_size == n, '%s: st_size of %s' % (what, bid))
        same(read_file(m.path(bid)), pattern(n, seed), '%s: %s (%d bytes)' % (what, bid, n))


@case(timeout=180)
def test_mem_size_far_below_data():
    with Mount('mem_size=8M') as m:
        blocks = {}
        for i, n in enumerate(SIZES_64M):         # each read back right after its write
            bid = rand_id()
            blocks[bid] = (n, i)
            write_file(m.path(bid), pattern(n, i))
            same(read_file(m.path(bid)), pattern(n, i), 'read right after write (%d)' % n)
        verify_all(m, blocks, 'mem_size=8M, 64 MiB written')
        # memory full of pins: every block open at once, then read through the pins
        fds = {}
        try:
            for bid in blocks:
                fds[bid] = os.open(m.path(bid), os.O_RDONLY)
            for bid, fd in fds.items():
                n, seed = blocks[bid]
                same(read_fd(fd), pattern(n, seed), 'with every block pinned: %s' % bid)
        finally:
            for fd in fds.values():
                os.close(fd)
        verify_all(m, blocks, 'after the pins were dropped')


def test_parallel_reads_of_one_streamed_block():
    """Threads reading one descriptor of a block that does not fit in memory (streamed from
    disk) each get their own bytes, as with any file."""
    n = 3 * MiB + 5
    data = pattern(n, 77)
    with Mount() as m:
        bid = rand_id()
        write_file(m.path(bid), data)              # fits in memory, dumped to disk later
        m.remount('mem_size=1M')                   # disk only, streamed to the reader
        # O_DIRECT: every read reaches the daemon instead of the page cache
        fd = os.open(m.path(bid), os.O_RDONLY | os.O_DIRECT)
        errors = []

        def reader(k):
            rng = random.Random(k)
            try:
                for _ in range(150):
                    off = rng.randrange(0, n - 1)
                    ln = rng.randrange(1, 300 * KiB)
                    got = os.pread(fd, ln, off)
                    if got != data[off:off + ln]:
                        errors.append('thread %d: pread(%d, %d) returned other bytes' % (
                            k, ln, off))
                        return
            except OSError as e:
                errors.append('thread %d: %s' % (k, e))

        try:
            threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        finally:
            os.close(fd)
        check(not errors, '; '.join(errors[:3]))
        same(read_file(m.path(bid)), data, 'the block after the parallel reads')


@case(timeout=180)
def test_remount_persistence():
    with Mount('mem_size=16M') as m:
        # fits in memory, does not fit, and one bigger than memory written in small pieces
        blocks = write_all(m, [MiB, 2 * MiB + 3, 4 * KiB, 3 * MiB, 20 * MiB, 17 * MiB + 5,
                               5 * MiB + 1, MiB - 1, 1])
        bid = rand_id()
        blocks[bid] = (10 * MiB + 1, 99)
        write_file(m.path(bid), pattern(10 * MiB + 1, 99), chunk=64 * KiB)
        m.remount('')                              # waits for the old daemon to exit
        verify_all(m, blocks, 'after unmount + remount')
        m.remount('mem_size=4M')
        verify_all(m, blocks, 'after a remount with mem_size=4M')
        # as a user would: fusermount3 -u, then at once a new daemon on the same store
        more = write_all(m, [6 * MiB + 1, MiB, 3 * KiB], seed0=200)
        blocks.update(more)
        m.remount('', wait=False)
        verify_all(m, blocks, 'after a remount started right after fusermount3 -u')


def test_sigterm_publishes_no_open_writer():
    """SIGTERM while writers hold blocks open: what no close published stays unpublished (a
    new block is absent after the restart, a replacement leaves the old version), while the
    committed blocks are all there."""
    with Mount('mem_size=16M') as m:
        old, data = rand_id(), pattern(MiB, 5)
        write_file(m.path(old), data)
        new = rand_id()
        fds = [os.open(m.path(new), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644),
               os.open(m.path(old), os.O_WRONLY | os.O_TRUNC)]
        os.write(fds[0], pattern(64 * KiB, 6))      # no size declared: any prefix could pass
        os.write(fds[1], pattern(4 * KiB, 7))
        m.terminate()
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass                                 # ENOTCONN: the daemon is gone
        m.start()
        listed = m.blocks()
        check(new not in listed, 'a block being written when the daemon stopped was '
              'published (%d bytes)' % (os.stat(m.path(new)).st_size if new in listed else 0))
        same(read_file(m.path(old)), data, 'a block whose replacement was being written')


def wait_stopped(pid):
    """Wait until every thread of process pid has stopped (SIGSTOP reaches each in turn)."""
    end = time.monotonic() + 10
    while True:
        states = []
        for t in os.listdir('/proc/%d/task' % pid):
            with open('/proc/%d/task/%s/stat' % (pid, t)) as f:
                states.append(f.read().rsplit(')', 1)[1].split()[0])
        if all(s in 'tT' for s in states):
            return
        check(time.monotonic() < end, 'the daemon did not stop: thread states %s' % states)
        time.sleep(0.01)


def test_files_closed_just_before_unmount():
    """Files of every kind closed right before fusermount3 -u: the kernel drops the RELEASEs
    the daemon has not read yet (here all of them: the daemon is stopped meanwhile). It still
    frees every open file (a sanitizer build reports a leak otherwise), exits 0, and the
    blocks written and read through them persist."""
    with Mount('mem_size=16M') as m:
        old, data = rand_id(), pattern(MiB + 7, 1)
        write_file(m.path(old), data)
        fds = [os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY) for _ in range(8)]
        for d in fds[:4]:
            os.listdir(d)                            # cursors that hold a shard's ids
        fds += [os.open(m.path('.ucm/stats'), os.O_RDONLY) for _ in range(4)]
        fds += [os.open(m.path('.ucm/query/q%d' % i), os.O_RDWR | os.O_CREAT, 0o600)
                for i in range(4)]
        fds += [os.open(m.path(old), os.O_RDONLY) for _ in range(4)]
        os.read(fds[-1], 4096)
        news = {}
        for i in range(4):
            bid = rand_id()
            news[bid] = pattern(64 * KiB + i, 100 + i)
            fd = os.open(m.path(bid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, news[bid])
            os.close(fd)                             # FLUSH commits; RELEASE follows
        os.kill(m.proc.pid, signal.SIGSTOP)
        try:
            wait_stopped(m.proc.pid)
            for fd in fds:
                os.close(fd)                         # RELEASEs queued, never read
            # not m.unmount(): its mount check would ask the stopped daemon
            subprocess.run(['fusermount3', '-u', m.mnt], check=True, timeout=30)
        finally:
            os.kill(m.proc.pid, signal.SIGCONT)
        m.unmount()                                  # waits for exit 0, no leak report
        m.start()
        same(read_file(m.path(old)), data, 'the block read before the unmount')
        for bid, want in news.items():
            same(read_file(m.path(bid)), want, 'a block closed just before the unmount')


def started_from_index(m):
    """ucmfs_start_blocks_from_index_total of the mount's store, from /.ucm/stats."""
    return int(stat_sum(m, 'ucmfs_start_blocks_from_index_total'))


def settled(m):
    """Every block is on disk and no dump is queued or running: the block files stay as they
    are until something new is written."""
    return (stat_sum(m, 'ucmfs_mem_dirty_blocks') == 0 and
            stat_sum(m, 'ucmfs_disk_queue_depth') == 0)


def index_files(m):
    return [n for n in os.listdir(m.store) if n.startswith('.index.')]


@case(timeout=180)
def test_remount_uses_saved_index():
    """A clean unmount saves the index; the next mount takes from it the blocks whose files
    did not change, finds the changes made behind its back, and leaves no index behind."""
    with Mount('mem_size=8M') as m:
        blocks = write_all(m, [MiB, 3 * MiB + 1, 4 * KiB, 1, 0, 2 * MiB, 64 * KiB + 3])
        ttl = [bid for bid, (n, _) in blocks.items() if n == MiB][0]
        os.setxattr(m.path(ttl), 'user.ucm.ttl', b'3600000')
        # the dumps run behind the writes: on a busy machine they can end late
        check(wait_until(lambda: settled(m), 60), 'dumps still pending after a minute')
        time.sleep(1.2)          # older than the save by more than its settling second
        m.unmount()
        check(len(index_files(m)) == 1, 'no index saved at unmount: %s' % os.listdir(m.store))
        # behind its back: one block file removed, one damaged in place
        by_size = {n: bid for bid, (n, _) in blocks.items()}
        gone, bad = by_size[4 * KiB], by_size[2 * MiB]
        os.unlink(os.path.join(m.store, 'data', gone[:3], gone))
        flip(os.path.join(m.store, 'data', bad[:3], bad), 4096 + 1)
        del blocks[gone]
        size_bad, _ = blocks.pop(bad)
        m.start()
        check(index_files(m) == [], 'the index is still there once mounted: %s' %
              index_files(m))
        check(started_from_index(m) == len(blocks), '%d blocks from the index, %d expected' % (
            started_from_index(m), len(blocks)))
        check(not os.path.exists(m.path(gone)), 'a block removed from STORE is listed')
        check(os.stat(m.path(bad)).st_size == size_bad, 'the damaged block is indexed')
        expect_errno(errno.EIO, read_file, m.path(bad))
        verify_all(m, blocks, 'after a remount from the saved index')
        left = int(os.getxattr(m.path(ttl), 'user.ucm.ttl'))
        check(3500000 < left <= 3600000, 'the TTL after a remount from the index: %d' % left)
        # killed: no index is left, the next start reads every header and finds the same
        os.setxattr(m.path(ttl), 'user.ucm.ttl', b'7200000')
        m.kill9()
        check(index_files(m) == [], 'an index appeared without a clean stop')
        m.start()
        check(started_from_index(m) == 0, 'blocks taken from an index after a SIGKILL')
        verify_all(m, blocks, 'after SIGKILL and a start without the index')
        left = int(os.getxattr(m.path(ttl), 'user.ucm.ttl'))
        check(7100000 < left <= 7200000, 'the TTL set after the start from the index: %d' % left)


def test_empty_block_persists():
    with Mount() as m:
        empty, one = rand_id(), rand_id()
        write_file(m.path(empty), b'')
        write_file(m.path(one), b'x')
        m.remount()
        check(m.blocks() == sorted([empty, one]), 'after remount: %s' % m.blocks())
        check(os.stat(m.path(empty)).st_size == 0, 'size of the empty block after remount')
        same(read_file(m.path(empty)), b'', 'the empty block after remount')
        same(read_file(m.path(one)), b'x', 'the 1-byte block after remount')


def fsync_kill9(opts, size):
    with Mount(opts) as m:
        a, b, c = rand_id(), rand_id(), rand_id()
        # a queue of other blocks still to be written to disk, so that without fsync the
        # daemon would most likely die before a, b and c reach the disk
        write_all(m, [4 * MiB] * 16, seed0=100)
        # a: committed, then fsync on a read descriptor
        write_file(m.path(a), pattern(size, 1))
        fd = os.open(m.path(a), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        # b: write -> fsync -> close on the writer's descriptor
        write_file(m.path(b), pattern(size + 1, 2), fsync=True)
        # c: fsync before the data is complete, then more writes, then close
        fd = os.open(m.path(c), os.O_WRONLY | os.O_CREAT)
        try:
            os.write(fd, pattern(size, 3)[:size // 2])
            os.fsync(fd)
            os.write(fd, pattern(size, 3)[size // 2:])
        finally:
            os.close(fd)
        m.kill9()
        m.start()
        for bid, n, seed in ((a, size, 1), (b, size + 1, 2), (c, size, 3)):
            check(os.path.exists(m.path(bid)), '%s opts, %d bytes: block %s lost after '
                  'fsync and a daemon SIGKILL' % (opts or 'default', n, 'abc'[seed - 1]))
            same(read_file(m.path(bid)), pattern(n, seed), 'after fsync + SIGKILL')


def test_fsync_then_kill9():
    fsync_kill9('', 3 * MiB + 3)
    fsync_kill9('mem_size=4M', 6 * MiB + 1)        # spilled reservations


def test_durable_then_kill9():
    with Mount('durable') as m:
        blocks = write_all(m, [4 * MiB] * 8 + [MiB, 4 * MiB + 1, 4 * KiB])
        m.kill9()
        m.start()
        verify_all(m, blocks, 'durable mount after SIGKILL')


if __name__ == '__main__':
    run([test_mem_size_far_below_data, test_parallel_reads_of_one_streamed_block,
         test_remount_persistence, test_files_closed_just_before_unmount,
         test_sigterm_publishes_no_open_writer, test_remount_uses_saved_index,
         test_empty_block_persists, test_fsync_then_kill9, test_durable_then_kill9])
