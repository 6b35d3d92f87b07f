#!/usr/bin/env python3
"""FUSE passthrough: a block in memory is read by the kernel from the memory tier's file, with
no READ request to the daemon, and every guarantee of a read through the daemon still holds:
pins, a replaced or removed block never read stale, mmap, cold blocks, and the fallback
(passthrough=off, or a kernel without it). The stats counters prove which path a read took."""
import errno
import mmap
import os
import platform
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stats import Stats
from ucmtest import (KiB, MiB, SLOW, Mount, check, cmd, daemon_bin, expect_errno, pattern,
                     rand_id, read_fd, read_file, run, same, wait_until, write_file)


def kernel_has_passthrough():
    """Linux 6.9 or later and root: where the kernel can pass reads through (CI's machines)."""
    major, minor = (int(x) for x in platform.release().split('.')[:2])
    return os.geteuid() == 0 and (major, minor) >= (6, 9)


def passthrough_on(m):
    """True if the mount passes reads through; fails where it should and does not."""
    on = Stats(m).get('ucmfs_passthrough_enabled') == 1
    check(on or not kernel_has_passthrough(), 'passthrough is off on a kernel that has it: '
          + m.log_text()[-500:])
    return on


def reads(m):
    return Stats(m).get('ucmfs_read_requests_total')


def pt_opens(m):
    return Stats(m).get('ucmfs_passthrough_opens_total')


def backing_files(m):
    return Stats(m).get('ucmfs_passthrough_backing_files')


def test_hot_read_sends_no_read():
    """A hot read: the daemon sees the open (a hit, a pin while open, a passthrough open) and
    no READ; the bytes are the block's, whole and at offsets."""
    with Mount('mem_size=64M') as m:
        if not passthrough_on(m):
            return
        bid, n = rand_id(), 4 * MiB + 3
        data = pattern(n, 1)
        write_file(m.path(bid), data)
        s0 = Stats(m)
        fd = os.open(m.path(bid), os.O_RDONLY)
        try:
            check(os.getxattr(m.path(bid), 'user.ucm.pins') == b'1', 'pins while open: %r' %
                  os.getxattr(m.path(bid), 'user.ucm.pins'))
            check(backing_files(m) == 1, 'backing files while open: %d' % backing_files(m))
            same(read_fd(fd), data, 'passthrough read')
            same(os.pread(fd, 5000, n - 4000), data[n - 4000:], 'read past the end')
            same(os.pread(fd, 100, 3 * MiB + 7), data[3 * MiB + 7:3 * MiB + 107], 'pread')
            check(os.fstat(fd).st_size == n, 'fstat size %d' % os.fstat(fd).st_size)
        finally:
            os.close(fd)
        s1 = Stats(m)
        d = lambda name, **l: s1.get(name, **l) - s0.get(name, **l)
        check(d('ucmfs_read_requests_total') == 0, '%d READ requests for a hot read' %
              d('ucmfs_read_requests_total'))
        check(d('ucmfs_passthrough_opens_total') == 1, 'passthrough opens moved by %d' %
              d('ucmfs_passthrough_opens_total'))
        check(d('ucmfs_tier_hits_total', tier='mem') == 1, 'mem hits moved by %d' %
              d('ucmfs_tier_hits_total', tier='mem'))
        check(s1.get('ucmfs_passthrough_backing_files') == 0, 'a backing file is still held')
        check(os.getxattr(m.path(bid), 'user.ucm.pins') == b'0', 'pins after close')
        check(s1.has('ucmfs_mem_buffers_info', kind='tmpfs-huge') or
              s1.has('ucmfs_mem_buffers_info', kind='tmpfs'), 'block memory is not in files')


def test_direct_and_small_reads():
    """O_DIRECT reads and reads of every size pass through too; a small block (its memory is
    not a file of its own) is read through the daemon, with the same bytes."""
    with Mount('mem_size=64M') as m:
        if not passthrough_on(m):
            return
        big, small = rand_id(), rand_id()
        write_file(m.path(big), pattern(8 * MiB, 2))
        write_file(m.path(small), pattern(10 * KiB, 3))
        r0 = reads(m)
        buf = mmap.mmap(-1, MiB)
        fd = os.open(m.path(big), os.O_RDONLY | os.O_DIRECT)
        try:
            got = []
            for off in range(0, 8 * MiB, MiB):
                check(os.preadv(fd, [buf], off) == MiB, 'short O_DIRECT read')
                got.append(bytes(buf))
        finally:
            os.close(fd)
        same(b''.join(got), pattern(8 * MiB, 2), 'O_DIRECT passthrough read')
        check(reads(m) == r0, 'O_DIRECT hot reads sent %d READs' % (reads(m) - r0))
        same(read_file(m.path(small)), pattern(10 * KiB, 3), 'small block')
        check(reads(m) > r0, 'a small block was not read through the daemon')


def test_mmap_reads_committed_bytes():
    """mmap(PROT_READ) of a block reads its bytes with no READ; the mapping keeps them after
    the file is closed, the block removed and memory filled with other blocks (the memory
    tier never writes into a file it handed to the kernel)."""
    with Mount('mem_size=24M', store='none') as m:
        if not passthrough_on(m):
            return
        bid, n = rand_id(), 4 * MiB + 100
        data = pattern(n, 4)
        write_file(m.path(bid), data)
        r0 = reads(m)
        fd = os.open(m.path(bid), os.O_RDONLY)
        mp = mmap.mmap(fd, n, prot=mmap.PROT_READ)
        os.close(fd)
        same(mp[:], data, 'mmap read')
        check(reads(m) == r0, 'mmap sent %d READs' % (reads(m) - r0))
        os.unlink(m.path(bid))
        for i in range(12):
            write_file(m.path(rand_id()), pattern(4 * MiB, 50 + i))
        same(mp[:], data, 'mmap read after rm and 48 MiB of other blocks')
        mp.close()
        # a writer's reservation cannot be mapped: its writes must reach the daemon
        fd = os.open(m.path(rand_id()), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, MiB)
            expect_errno(errno.ENODEV, mmap.mmap, fd, MiB)
            os.write(fd, pattern(MiB, 5))
        finally:
            os.close(fd)


def test_replaced_never_stale():
    """A reader that holds version 1 open keeps reading it while version 2 is written over it
    (the writer's open does not fail), and every open after the commit reads version 2."""
    with Mount('mem_size=64M') as m:
        if not passthrough_on(m):
            return
        bid = rand_id()
        v1, v2 = pattern(3 * MiB, 5), pattern(2 * MiB + 9, 6)
        write_file(m.path(bid), v1)
        fd = os.open(m.path(bid), os.O_RDONLY)
        try:
            same(os.pread(fd, MiB, 0), v1[:MiB], 'v1 before the replacement')
            write_file(m.path(bid), v2, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            same(read_file(m.path(bid)), v2, 'a new open after the replacement')
            same(read_fd(fd), v1, 'the old reader after the replacement')
            check(os.fstat(fd).st_size == len(v1), 'the old reader fstat: %d' %
                  os.fstat(fd).st_size)
        finally:
            os.close(fd)
        same(read_file(m.path(bid)), v2, 'after the old reader closed')
        check(os.stat(m.path(bid)).st_size == len(v2), 'stat size')
        check(pt_opens(m) >= 3, 'only %d opens passed through' % pt_opens(m))


def test_removed_never_stale():
    """rm while a passthrough reader holds the block: new opens fail ENOENT, the reader keeps
    its bytes; a new block of the same name reads as itself."""
    with Mount('mem_size=64M') as m:
        if not passthrough_on(m):
            return
        bid = rand_id()
        write_file(m.path(bid), pattern(2 * MiB, 7))
        fd = os.open(m.path(bid), os.O_RDONLY)
        try:
            os.unlink(m.path(bid))
            expect_errno(errno.ENOENT, os.open, m.path(bid), os.O_RDONLY)
            write_file(m.path(bid), pattern(MiB, 8))
            same(read_file(m.path(bid)), pattern(MiB, 8), 'the new block')
            same(read_fd(fd), pattern(2 * MiB, 7), 'the removed block, still open')
        finally:
            os.close(fd)
        same(read_file(m.path(bid)), pattern(MiB, 8), 'the new block, once the old is closed')


def test_readers_share_one_backing():
    """Threads opening, reading and closing one block at once: every read is right, one
    backing file serves them all, and none is left when they are done."""
    with Mount('mem_size=64M') as m:
        if not passthrough_on(m):
            return
        bid = rand_id()
        data = pattern(2 * MiB, 9)
        write_file(m.path(bid), data)
        errors, peak = [], [0]

        def reader():
            try:
                for _ in range(40):
                    fd = os.open(m.path(bid), os.O_RDONLY)
                    try:
                        if read_fd(fd) != data:
                            errors.append('wrong bytes')
                    finally:
                        os.close(fd)
            except OSError as e:
                errors.append(str(e))

        def watch():
            while any(t.is_alive() for t in ts):
                peak[0] = max(peak[0], backing_files(m))
                time.sleep(0.01)

        ts = [threading.Thread(target=reader) for _ in range(6)]
        for t in ts:
            t.start()
        w = threading.Thread(target=watch)
        w.start()
        for t in ts:
            t.join()
        w.join()
        check(not errors, 'readers failed: %s' % errors[:3])
        check(peak[0] <= 1, '%d backing files for one block' % peak[0])
        check(wait_until(lambda: backing_files(m) == 0, 5), 'backing files left: %d' %
              backing_files(m))


def test_cold_block_then_hot():
    """A block only on disk: its first open reads through the daemon as it loads (the bytes
    come as they arrive); once it is in memory, the next open passes through."""
    with Mount('mem_size=64M') as m:
        bid, n = rand_id(), 6 * MiB + 11
        write_file(m.path(bid), pattern(n, 10))
        m.remount()
        if not passthrough_on(m):
            return
        p0, r0 = pt_opens(m), reads(m)
        same(read_file(m.path(bid)), pattern(n, 10), 'cold read')
        check(reads(m) > r0, 'the cold read sent no READ')
        check(wait_until(lambda: os.getxattr(m.path(bid), 'user.ucm.tier').startswith(b'mem'),
                         10), 'the block never reached memory')
        r1 = reads(m)
        same(read_file(m.path(bid)), pattern(n, 10), 'hot read')
        check(reads(m) == r1 and pt_opens(m) == p0 + 1, 'the hot read did not pass through')


def test_passthrough_off():
    """passthrough=off: reads go through the daemon (READ requests), nothing passes through,
    and the configuration says so."""
    with Mount('mem_size=64M,passthrough=off') as m:
        bid = rand_id()
        write_file(m.path(bid), pattern(2 * MiB, 11))
        r0 = reads(m)
        same(read_file(m.path(bid)), pattern(2 * MiB, 11), 'read')
        check(reads(m) > r0, 'no READ request with passthrough=off')
        s = Stats(m)
        check(s.get('ucmfs_passthrough_opens_total') == 0, 'an open passed through')
        check(s.get('ucmfs_passthrough_enabled') == 0, 'passthrough enabled with =off')
        check(s.has('ucmfs_mem_buffers_info', kind='anon'), 'block memory is not anonymous')
        with open(m.path('.ucm/config')) as f:
            check('passthrough=off\n' in f.read(), '.ucm/config does not say passthrough=off')
    with Mount('mem_size=64M') as m:
        with open(m.path('.ucm/config')) as f:
            check('passthrough=auto\n' in f.read(), '.ucm/config lacks passthrough=auto')


def test_bad_value():
    """A malformed passthrough= exits 2 with one line naming the option."""
    r = cmd([daemon_bin(), '-f', '-o', 'passthrough=sometimes', 'none', '/nonexistent'],
            check_rc=False)
    check(r.returncode == 2, 'exit status %d' % r.returncode)
    check('passthrough' in r.stderr and len(r.stderr.strip().splitlines()) == 1,
          'message: %r' % r.stderr)


def test_auto_unmount():
    """-o auto_unmount (through the system's fusermount3): the mount works and comes down
    cleanly with fusermount3 -u and with SIGTERM (every block kept), and a daemon killed with
    SIGKILL leaves no dead mount behind."""
    with Mount('mem_size=16M,auto_unmount') as m:
        bid = rand_id()
        write_file(m.path(bid), pattern(MiB, 12))
        same(read_file(m.path(bid)), pattern(MiB, 12), 'read')
        m.remount()
        same(read_file(m.path(bid)), pattern(MiB, 12), 'read after fusermount3 -u')
        m.terminate()
        check(not os.path.ismount(m.mnt), 'mounted after SIGTERM')
        m.start()
        same(read_file(m.path(bid)), pattern(MiB, 12), 'read after SIGTERM')
        m.proc.kill()
        m.proc.wait(timeout=30)
        m.proc = None
        check(wait_until(lambda: not os.path.ismount(m.mnt), 10),
              'the mount of a killed daemon is still there with auto_unmount')


if __name__ == '__main__':
    run([test_hot_read_sends_no_read, test_direct_and_small_reads,
         test_mmap_reads_committed_bytes, test_replaced_never_stale, test_removed_never_stale,
         test_readers_share_one_backing, test_cold_block_then_hot, test_passthrough_off,
         test_bad_value, test_auto_unmount])
