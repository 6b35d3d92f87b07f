#!/usr/bin/env python3
"""What other processes see: reservations, unlink under an open reader, replacement
(DESIGN.md section 3)."""
import errno
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (KiB, MiB, Mount, check, cmd, expect_errno, pattern, rand_id, read_fd,
                     read_file, run, same, write_file)

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
    r = cmd(['stat', m.path(bid)], check_rc=False)
    check(r.returncode != 0 and 'No such file' in r.stderr,
          '%s: stat(1) in another process: %r' % (what, (r.stdout + r.stderr).strip()))
    check(peek(m.path(bid)) == 'ENOENT', '%s: another process opened it' % what)
    check(bid not in cmd(['ls', m.mnt]).stdout.split(), '%s: listed by ls' % what)


def crc(data):
    import zlib
    return (len(data), zlib.crc32(data))


def test_reservation_invisible():
    with Mount() as m:
        for n, flags in [(4 * MiB + 1, os.O_WRONLY), (64 * KiB, os.O_RDWR)]:
            bid = rand_id()
            data = pattern(n, n)
            fd = os.open(m.path(bid), flags | os.O_CREAT)
            try:
                os.write(fd, data)
                other_sees_nothing(m, bid, 'reservation with all its bytes written')
                os.fsync(fd)
                other_sees_nothing(m, bid, 'reservation after fsync')
                if flags == os.O_RDWR:       # the writer reads back its own reservation
                    same(read_fd(fd), data, 'O_RDWR writer reading its reservation')
            finally:
                os.close(fd)
            r = cmd(['stat', '-c', '%s', m.path(bid)], check_rc=False)
            check(r.stdout.strip() == str(n), 'after close: stat(1) in another process: %r' %
                  (r.stdout + r.stderr).strip())
            check(peek(m.path(bid)) == crc(data), 'after close: another process read other bytes')
            check(bid in cmd(['ls', m.mnt]).stdout.split(), 'after close: not listed by ls')


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
    with Mount() as m:
        bid = rand_id()
        old, new = pattern(3 * MiB + 5, 6), pattern(2 * MiB + 77, 7)
        write_file(m.path(bid), old)
        r1 = os.open(m.path(bid), os.O_RDONLY)
        try:
            same(os.pread(r1, 64 * KiB, 0), old[:64 * KiB], 'reader before the replacement')
            w = os.open(m.path(bid), os.O_WRONLY | os.O_TRUNC)
            try:
                off = 0
                while off < len(new):
                    off += os.write(w, new[off:off + MiB])
                same(read_fd(r1), old, 'old reader while the replacement is written')
                check(peek(m.path(bid)) == crc(old),
                      'another process opening during the replacement did not read the old bytes')
                r = cmd(['stat', '-c', '%s', m.path(bid)])
                check(r.stdout.strip() == str(len(old)),
                      'stat(1) during the replacement: %s' % r.stdout.strip())
            finally:
                os.close(w)
            check(os.stat(m.path(bid)).st_size == len(new), 'size after the replacement')
            same(read_file(m.path(bid)), new, 'a new open after the writer closed')
            check(peek(m.path(bid)) == crc(new), 'another process after the replacement')
            same(read_fd(r1), old, 'the reader opened before the replacement, still open')
        finally:
            os.close(r1)
        same(read_file(m.path(bid)), new, 'after the old reader closed')

        # without O_TRUNC the writer starts from the old content
        bid = rand_id()
        old = pattern(2 * MiB + 9, 8)
        write_file(m.path(bid), old)
        w = os.open(m.path(bid), os.O_RDWR)
        try:
            same(read_fd(w), old, 'O_RDWR replacement reads the old content')
            os.pwrite(w, b'\xab' * 4096, MiB)
        finally:
            os.close(w)
        want = old[:MiB] + b'\xab' * 4096 + old[MiB + 4096:]
        same(read_file(m.path(bid)), want, 'partial overwrite of a committed block')


def test_replace_interleaved_readers():
    """An old reader reading after the replacement must not make new readers see old bytes
    (nor the reverse)."""
    with Mount() as m:
        bid = rand_id()
        old, new = pattern(2 * MiB, 9), pattern(2 * MiB, 10)
        write_file(m.path(bid), old)
        r1 = os.open(m.path(bid), os.O_RDONLY)
        try:
            same(read_fd(r1), old, 'old reader')
            write_file(m.path(bid), new, flags=os.O_WRONLY | os.O_TRUNC)
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


if __name__ == '__main__':
    run([test_reservation_invisible, test_unlink_while_reading,
         test_unlink_then_recreate_while_reading, test_replace,
         test_replace_interleaved_readers])
