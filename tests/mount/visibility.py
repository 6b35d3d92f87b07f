#!/usr/bin/env python3
"""What other processes see: reservations, unlink under an open reader, replacement
(DESIGN.md section 3)."""
import errno
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (KiB, MiB, Mount, Peer, check, cmd, crc, expect_errno, held_elsewhere,
                     pattern, rand_id, read_fd, read_file, run, same, write_file)

# another process looking at a name: prints ENOENT, or the size and crc of what it read
PEEK = r'''
import os, sys, zlib
try:
    fd = os.open(sys.argv[1], os.O_RDONLY)
except FileNotFoundError:
    print('ENOENT'); sys.exit(0)
data = b''
while True:
    b = os.read(fd, 1 << 20)
    if not b:
        break
    data += b
os.close(fd)
print(len(data), zlib.crc32(data))
'''


def peek(path):
    """What another process reads at path: 'ENOENT' or (size, crc32)."""
    out = cmd([sys.executable, '-c', PEEK, path]).stdout.split()
    return out[0] if len(out) == 1 else (int(out[0]), int(out[1]))


def other_sees_nothing(m, bid, what):
    """Nothing of bid is visible to this process (not the writer) nor to commands."""
    expect_errno(errno.ENOENT, os.stat, m.path(bid))
    expect_errno(errno.ENOENT, os.open, m.path(bid), os.O_RDONLY)
    check(bid not in m.blocks(), '%s: listed by readdir' % what)
    r = cmd(['stat', m.path(bid)], check_rc=False)
    check(r.returncode != 0 and 'No such file' in r.stderr,
          '%s: stat(1): %r' % (what, (r.stdout + r.stderr).strip()))
    check(peek(m.path(bid)) == 'ENOENT', '%s: a third process opened it' % what)
    check(bid not in cmd(['ls', m.mnt]).stdout.split(), '%s: listed by ls' % what)


def test_reservation_invisible():
    with Mount() as m, Peer() as w:
        for n, flags in [(4 * MiB + 1, os.O_WRONLY), (64 * KiB, os.O_RDWR)]:
            bid = rand_id()
            data = pattern(n, n)
            w.open('f', m.path(bid), flags | os.O_CREAT)
            w.write('f', n, n)
            other_sees_nothing(m, bid, 'reservation with all its bytes written')
            w.do('fsync', 'f')
            other_sees_nothing(m, bid, 'reservation after fsync')
            if flags == os.O_RDWR:       # the writer reads back its own reservation
                check(w.read('f') == crc(data), 'O_RDWR writer reading its reservation')
            w.close('f')
            r = cmd(['stat', '-c', '%s', m.path(bid)], check_rc=False)
            check(r.stdout.strip() == str(n), 'after close: stat(1): %r' %
                  (r.stdout + r.stderr).strip())
            check(os.stat(m.path(bid)).st_size == n, 'after close: st_size')
            same(read_file(m.path(bid)), data, 'after close: the block')
            check(peek(m.path(bid)) == crc(data), 'after close: a third process read other bytes')
            check(bid in cmd(['ls', m.mnt]).stdout.split(), 'after close: not listed by ls')


def test_reservation_invisible_across_fork():
    """A writer that starts a child process while it writes (fork + exec: the child's
    copy of the descriptor is closed at exec) has not closed its file: the half-written
    block stays invisible until the writer's own close."""
    with Mount() as m, Peer() as w:
        for declared in (True, False):
            n = 2 * MiB + 1
            bid = rand_id()
            w.open('f', m.path(bid), os.O_WRONLY | os.O_CREAT)
            if declared:
                w.do('ftruncate', 'f', n)
            w.write_part('f', 3, n, 0, n // 2)
            check(w.do('spawn', 'true') == '0', 'the writer could not run true(1)')
            what = 'half-written block (%s) after the writer ran a child' % (
                'size declared' if declared else 'no size declared')
            other_sees_nothing(m, bid, what)
            w.write_part('f', 3, n, n // 2, n - n // 2)
            w.close('f')
            same(read_file(m.path(bid)), pattern(n, 3), 'after the writer\'s close')


def unlink_under_reader(m, bid, data):
    fd = os.open(m.path(bid), os.O_RDONLY)
    try:
        same(os.pread(fd, 256 * KiB, 0), data[:256 * KiB], 'first read before unlink')
        os.unlink(m.path(bid))
        expect_errno(errno.ENOENT, os.stat, m.path(bid))
        r = cmd(['stat', m.path(bid)], check_rc=False)
        check(r.returncode != 0, 'stat(1) finds the unlinked block')
        check(bid not in cmd(['ls', m.mnt]).stdout.split(), 'ls lists the unlinked block')
        check(peek(m.path(bid)) == 'ENOENT', 'another process opens the unlinked block')
        same(read_fd(fd), data, 'the open reader after unlink (from offset 0)')
        same(read_fd(fd, off=len(data) // 3), data[len(data) // 3:],
             'the open reader after unlink (from the middle)')
        check(os.fstat(fd).st_size in (0, len(data)), 'fstat of the unlinked open block')
    finally:
        os.close(fd)
    expect_errno(errno.ENOENT, os.stat, m.path(bid))
    expect_errno(errno.ENOENT, os.unlink, m.path(bid))


def test_unlink_while_reading():
    with Mount() as m:
        a, b, c = rand_id(), rand_id(), rand_id()
        da, db, dc = pattern(6 * MiB + 11, 1), pattern(4 * MiB + 3, 2), pattern(2 * MiB, 3)
        for bid, d in ((a, da), (b, db), (c, dc)):
            write_file(m.path(bid), d)
        unlink_under_reader(m, a, da)               # in memory
        m.remount('mem_size=1M')                      # b is on disk and does not fit
        unlink_under_reader(m, b, db)
        m.remount('mem_size=64M')                     # c is on disk, loaded on open
        unlink_under_reader(m, c, dc)
        check(m.blocks() == [], 'blocks left: %s' % m.blocks())
        m.remount()
        check(m.blocks() == [], 'unlinked blocks came back after remount: %s' % m.blocks())


def test_unlink_then_recreate_while_reading():
    with Mount() as m:
        bid = rand_id()
        old, new = pattern(3 * MiB + 1, 4), pattern(2 * MiB + 5, 5)
        write_file(m.path(bid), old)
        fd = os.open(m.path(bid), os.O_RDONLY)
        try:
            same(os.pread(fd, MiB, 0), old[:MiB], 'reader before unlink')
            os.unlink(m.path(bid))
            write_file(m.path(bid), new)
            same(read_file(m.path(bid)), new, 'a new open after unlink + rewrite')
            same(read_fd(fd), old, 'the reader opened before the unlink')
            same(read_file(m.path(bid)), new, 'a new open after the old reader read again')
        finally:
            os.close(fd)
        same(read_file(m.path(bid)), new, 'after the old reader closed')


def test_replace():
    with Mount() as m, Peer() as w:
        bid = rand_id()
        old, new = pattern(3 * MiB + 5, 6), pattern(2 * MiB + 77, 7)
        write_file(m.path(bid), old)
        r1 = os.open(m.path(bid), os.O_RDONLY)
        try:
            same(os.pread(r1, 64 * KiB, 0), old[:64 * KiB], 'reader before the replacement')
            w.open('w', m.path(bid), os.O_WRONLY | os.O_TRUNC)
            w.write('w', 7, len(new))
            same(read_fd(r1), old, 'old reader while the replacement is written')
            same(read_file(m.path(bid)), old, 'a new open during the replacement')
            check(peek(m.path(bid)) == crc(old), 'a third process during the replacement')
            check(os.stat(m.path(bid)).st_size == len(old),
                  'st_size during the replacement: %d' % os.stat(m.path(bid)).st_size)
            w.close('w')
            check(os.stat(m.path(bid)).st_size == len(new), 'size after the replacement')
            same(read_file(m.path(bid)), new, 'a new open after the writer closed')
            check(peek(m.path(bid)) == crc(new), 'a third process after the replacement')
            same(read_fd(r1), old, 'the reader opened before the replacement, still open')
        finally:
            os.close(r1)
        same(read_file(m.path(bid)), new, 'after the old reader closed')

        # without O_TRUNC the writer starts from the old content
        bid = rand_id()
        old = pattern(2 * MiB + 9, 8)
        write_file(m.path(bid), old)
        w.open('w', m.path(bid), os.O_RDWR)
        check(w.read('w') == crc(old), 'an O_RDWR replacement reads the old content')
        w.write('w', 99, 4096, MiB)
        w.close('w')
        want = old[:MiB] + pattern(4096, 99) + old[MiB + 4096:]
        same(read_file(m.path(bid)), want, 'partial overwrite of a committed block')


def test_replace_interleaved_readers():
    """Once replaced, new opens read the new bytes even while an old reader goes on
    reading the old version."""
    with Mount() as m:
        bid = rand_id()
        old, new = pattern(2 * MiB, 9), pattern(2 * MiB, 10)
        write_file(m.path(bid), old)
        r1 = os.open(m.path(bid), os.O_RDONLY)
        try:
            same(read_fd(r1), old, 'old reader')
            with Peer() as w:
                w.open('w', m.path(bid), os.O_WRONLY | os.O_TRUNC)
                w.write('w', 10, len(new))
                w.close('w')
            r2 = os.open(m.path(bid), os.O_RDONLY)
            try:
                same(read_fd(r1), old, 'old reader after the replacement')
                same(read_fd(r2), new, 'new reader after the old one read again')
                same(read_fd(r1), old, 'old reader after the new one read')
            finally:
                os.close(r2)
        finally:
            os.close(r1)
        check(peek(m.path(bid)) == crc(new), 'another process after both closed')


def test_replace_reader_fstat():
    """fstat of a reader opened before a replacement shows the version it reads, while the
    writer is at work and after its close committed (the writer's open file still held
    by another process, so the kernel has not released it)."""
    with Mount() as m:
        bid = rand_id()
        old, new = pattern(300 * KiB + 3, 11), pattern(700 * KiB + 1, 12)
        write_file(m.path(bid), old)
        r1 = os.open(m.path(bid), os.O_RDONLY)
        try:
            same(read_fd(r1), old, 'reader before the replacement')
            w = os.open(m.path(bid), os.O_RDWR | os.O_TRUNC)
            os.write(w, new)
            with held_elsewhere(w):
                check(os.fstat(r1).st_size == len(old),
                      'fstat of the old reader while the replacement is written: %d' %
                      os.fstat(r1).st_size)
                same(read_fd(r1), old, 'the old reader while the replacement is written')
                os.close(w)
                check(os.fstat(r1).st_size == len(old),
                      'fstat of the old reader after the replacement committed: %d' %
                      os.fstat(r1).st_size)
                same(read_fd(r1), old, 'the old reader after the replacement committed')
                check(os.stat(m.path(bid)).st_size == len(new), 'stat of the name after it')
            check(os.fstat(r1).st_size == len(old), 'fstat of the old reader at the end')
            same(read_fd(r1), old, 'the old reader at the end')
        finally:
            os.close(r1)
        same(read_file(m.path(bid)), new, 'the new version')


if __name__ == '__main__':
    run([test_reservation_invisible, test_reservation_invisible_across_fork,
         test_unlink_while_reading,
         test_unlink_then_recreate_while_reading, test_replace,
         test_replace_interleaved_readers, test_replace_reader_fstat])
