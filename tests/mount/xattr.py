#!/usr/bin/env python3
"""Extended attributes of blocks and TTLs (DESIGN.md sections 2 and 4)."""
import errno
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (KiB, MiB, Mount, check, cmd, expect_errno, pattern, rand_id, read_file,
                     run, same, write_file)

TTL = 'user.ucm.ttl'
TIER = 'user.ucm.tier'
NAMES = ['user.ucm.ttl', 'user.ucm.tier', 'user.ucm.stored', 'user.ucm.codec', 'user.ucm.pins']


def get(path, name):
    return os.getxattr(path, name).decode().strip()


def ttl_left(path):
    """The remaining TTL in ms, or None for 'none'."""
    v = get(path, TTL)
    return None if v == 'none' else int(v)


def gone(m, bid, what):
    expect_errno(errno.ENOENT, os.stat, m.path(bid))
    expect_errno(errno.ENOENT, os.open, m.path(bid), os.O_RDONLY)
    check(bid not in m.blocks(), '%s: still listed' % what)
    check(bid not in cmd(['ls', m.mnt]).stdout.split(), '%s: still listed by ls' % what)


def new_block(m, n=MiB, seed=1):
    bid = rand_id()
    write_file(m.path(bid), pattern(n, seed))
    return bid


def expiring(m, bid, set_at, ms, what):
    """bid was given a TTL of ms at time set_at: present now (unless already past), gone
    once twice the TTL has passed."""
    try:
        left = ttl_left(m.path(bid))
        check(left is not None and 0 <= left <= ms, '%s: ttl reads %r right after %d' % (
            what, left, ms))
        check(os.path.exists(m.path(bid)), '%s: gone before its TTL' % what)
    except FileNotFoundError:
        check(time.monotonic() - set_at >= ms / 1000, '%s: gone before its TTL' % what)
    time.sleep(max(0, set_at + 2 * ms / 1000 - time.monotonic()))
    gone(m, bid, what)


def test_ttl():
    with Mount() as m:
        bid = new_block(m)
        check(get(m.path(bid), TTL) == 'none', 'a new block has ttl %r' % get(m.path(bid), TTL))
        t = time.monotonic()
        os.setxattr(m.path(bid), TTL, b'300')
        expiring(m, bid, t, 300, 'ttl 300 set by setxattr')

        # set with setfattr(1), as an operator would
        bid = new_block(m)
        t = time.monotonic()
        cmd(['setfattr', '-n', TTL, '-v', '300', m.path(bid)])
        expiring(m, bid, t, 300, 'ttl 300 set by setfattr')

        # a long TTL: present, counting down
        bid = new_block(m)
        os.setxattr(m.path(bid), TTL, b'60000')
        left = ttl_left(m.path(bid))
        check(left is not None and 50000 < left <= 60000, 'ttl 60000 reads %r' % left)
        out = cmd(['getfattr', '--only-values', '-n', TTL, m.path(bid)]).stdout.strip()
        check(out.isdigit() and int(out) <= 60000, 'getfattr(1) says %r' % out)

        # 0 and none clear a TTL
        for clear in (b'none', b'0'):
            bid = new_block(m)
            os.setxattr(m.path(bid), TTL, b'300')
            os.setxattr(m.path(bid), TTL, clear)
            left = get(m.path(bid), TTL)
            check(left == 'none', 'ttl after %r: %r' % (clear, left))
            time.sleep(0.6)
            check(os.path.exists(m.path(bid)),
                  'a block whose TTL was cleared with %r expired' % clear)

        # set by the writer before close: applies to the block it commits
        bid = rand_id()
        fd = os.open(m.path(bid), os.O_WRONLY | os.O_CREAT)
        try:
            os.write(fd, pattern(64 * KiB, 2))
            os.setxattr(fd, TTL, b'60000')
        finally:
            os.close(fd)
        left = ttl_left(m.path(bid))
        check(left is not None and 50000 < left <= 60000, 'ttl set before close reads %r' % left)
        bid = rand_id()
        fd = os.open(m.path(bid), os.O_WRONLY | os.O_CREAT)
        try:
            os.write(fd, pattern(64 * KiB, 3))
            t = time.monotonic()
            os.setxattr(fd, TTL, b'300')
        finally:
            os.close(fd)
        expiring(m, bid, t, 300, 'ttl 300 set before close')


def test_expired_replacement():
    """A replacement that expires before it reaches the disk takes the version it replaced
    with it: the old bytes never come back, now or after a remount."""
    with Mount() as m:
        bid = new_block(m, seed=6)
        fd = os.open(m.path(bid), os.O_RDONLY)
        os.fsync(fd)                        # the old version is on disk
        os.close(fd)
        for i in range(32):                 # a queue of disk writes ahead of the new one
            new_block(m, 4 * MiB, seed=10 + i)
        fd = os.open(m.path(bid), os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, pattern(MiB, 7))
            t = time.monotonic()
            os.setxattr(fd, TTL, b'1')
        finally:
            os.close(fd)
        time.sleep(max(0, t + 0.05 - time.monotonic()))
        gone(m, bid, 'a replacement with ttl 1 ms, 50 ms later')
        m.remount()
        gone(m, bid, 'a replacement with ttl 1 ms, after a remount')


def test_default_ttl_option():
    with Mount('ttl=300ms') as m:
        t = time.monotonic()
        bid = new_block(m)
        expiring(m, bid, t, 300, 'block under -o ttl=300ms')
        # an explicit TTL wins over the default
        bid = rand_id()
        fd = os.open(m.path(bid), os.O_WRONLY | os.O_CREAT)
        try:
            os.write(fd, pattern(4 * KiB, 4))
            os.setxattr(fd, TTL, b'60000')
        finally:
            os.close(fd)
        keep = new_block(m, seed=5)
        os.setxattr(m.path(keep), TTL, b'none')
        time.sleep(0.6)
        check(os.path.exists(m.path(bid)), 'ttl 60000 set before close lost to the default')
        check(os.path.exists(m.path(keep)), 'ttl cleared after commit lost to the default')
        same(read_file(m.path(keep)), pattern(MiB, 5), 'block whose ttl was cleared')


def test_tier_and_other_attrs():
    with Mount(store='none') as m:
        bid = new_block(m)
        check(get(m.path(bid), TIER) == 'mem', 'memory only: tier %r' % get(m.path(bid), TIER))
        check(get(m.path(bid), 'user.ucm.stored') == '0', 'memory only: stored %r' %
              get(m.path(bid), 'user.ucm.stored'))
    with Mount() as m:
        n = 2 * MiB + 1
        bid = new_block(m, n)
        check(get(m.path(bid), TIER) in ('mem', 'mem,disk'), 'tier right after the write: %r' %
              get(m.path(bid), TIER))
        fd = os.open(m.path(bid), os.O_RDONLY)
        try:
            os.fsync(fd)
            check(get(m.path(bid), TIER) == 'mem,disk', 'tier after fsync: %r' %
                  get(m.path(bid), TIER))
            check(get(m.path(bid), 'user.ucm.pins') == '1', 'pins with one reader: %r' %
                  get(m.path(bid), 'user.ucm.pins'))
        finally:
            os.close(fd)
        check(get(m.path(bid), 'user.ucm.pins') == '0', 'pins with no reader: %r' %
              get(m.path(bid), 'user.ucm.pins'))
        stored = int(get(m.path(bid), 'user.ucm.stored'))
        check(stored > 0, 'user.ucm.stored %d after fsync' % stored)
        check(get(m.path(bid), 'user.ucm.codec') in ('raw', 'zstd', 'zstd+shuffle2',
                                                     'zstd+shuffle4'),
              'user.ucm.codec %r' % get(m.path(bid), 'user.ucm.codec'))
        names = os.listxattr(m.path(bid))
        for name in NAMES:
            check(name in names, 'listxattr lacks %s: %s' % (name, names))
        m.remount()
        check(get(m.path(bid), TIER) == 'disk', 'tier after remount: %r' % get(m.path(bid), TIER))
        same(read_file(m.path(bid)), pattern(n, 1), 'block after remount')
        check(get(m.path(bid), TIER) in ('mem,disk', 'disk'), 'tier after a read: %r' %
              get(m.path(bid), TIER))


def test_xattr_errors():
    with Mount() as m:
        bid = new_block(m)
        p = m.path(bid)
        for name in ('user.foo', 'user.ucm.bogus', 'user.ucm'):
            expect_errno(errno.ENODATA, os.getxattr, p, name)
            expect_errno(errno.ENOTSUP, os.setxattr, p, name, b'1')
        for name in NAMES[1:]:
            expect_errno(errno.EPERM, os.setxattr, p, name, b'mem')
        for bad in (b'abc', b'-5', b'12x', b'', b'1.5', b'300 ms'):
            expect_errno(errno.EINVAL, os.setxattr, p, TTL, bad)
        check(get(p, TTL) == 'none', 'a bad ttl value changed the ttl to %r' % get(p, TTL))
        r = cmd(['getfattr', '-n', 'user.foo', p], check_rc=False)
        check(r.returncode != 0 and 'No such attribute' in r.stderr,
              'getfattr of an unknown name: %r' % r.stderr.strip())
        same(read_file(p), pattern(MiB, 1), 'block after the refused xattr calls')


if __name__ == '__main__':
    run([test_ttl, test_expired_replacement, test_default_ttl_option, test_tier_and_other_attrs, test_xattr_errors])
