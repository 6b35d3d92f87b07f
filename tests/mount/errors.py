#!/usr/bin/env python3
"""Error contract: O_EXCL, invalid names, EPERM operations, bad command lines
(DESIGN.md sections 2 and 3)."""
import errno
import os
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (MiB, SLOW, Mount, check, daemon_bin, daemon_env, expect_errno, pattern,
                     rand_id, read_file, run, same, write_file)

CREATE = os.O_WRONLY | os.O_CREAT


def test_excl():
    with Mount() as m:
        done = rand_id()
        write_file(m.path(done), pattern(MiB, 1))
        expect_errno(errno.EEXIST, os.open, m.path(done), CREATE | os.O_EXCL)
        same(read_file(m.path(done)), pattern(MiB, 1), 'block after a failed O_EXCL')

        busy = rand_id()
        fd = os.open(m.path(busy), CREATE | os.O_EXCL)   # a fresh reservation
        try:
            os.write(fd, pattern(MiB, 2))
            expect_errno(errno.EEXIST, os.open, m.path(busy), CREATE | os.O_EXCL)
            expect_errno(errno.EEXIST, os.open, m.path(busy), os.O_RDWR | os.O_CREAT | os.O_EXCL)
        finally:
            os.close(fd)
        same(read_file(m.path(busy)), pattern(MiB, 2), 'the reservation that O_EXCL refused')
        expect_errno(errno.EEXIST, os.open, m.path(busy), CREATE | os.O_EXCL)


def test_invalid_names():
    with Mount() as m:
        good = rand_id()
        write_file(m.path(good), pattern(4096, 3))
        bad = ['xyz', good.upper(), good[:16] + good[16:].upper(), good[:31], good + 'a',
               'g' * 32, good[:31] + '-', 'x' + good[1:], '0x' + good[:30], '.' + good[1:]]
        for name in bad:
            p = m.path(name)
            expect_errno(errno.EINVAL, os.open, p, CREATE)
            expect_errno(errno.EINVAL, os.open, p, CREATE | os.O_EXCL)
            expect_errno(errno.ENOENT, os.stat, p)
            expect_errno(errno.ENOENT, os.lstat, p)
            expect_errno(errno.ENOENT, os.open, p, os.O_RDONLY)
            expect_errno(errno.ENOENT, os.unlink, p)
        check(m.blocks() == [good], 'invalid names appeared in the listing: %s' % m.blocks())
        # uppercase is not an alias of the lowercase block
        expect_errno(errno.ENOENT, os.stat, m.path(good.upper()))
        same(read_file(m.path(good)), pattern(4096, 3), 'the lowercase block')


def test_eperm_at_root():
    with Mount() as m:
        a, b = rand_id(), rand_id()
        data = pattern(2 * MiB + 3, 4)
        write_file(m.path(a), data)
        root = m.mnt
        expect_errno(errno.EPERM, os.mkdir, m.path('dir'))
        expect_errno(errno.EPERM, os.mkdir, m.path(b))
        expect_errno(errno.EPERM, os.rename, m.path(a), m.path(b))
        expect_errno(errno.EPERM, os.rename, m.path(a), m.path('name'))
        expect_errno(errno.EPERM, os.link, m.path(a), m.path(b))
        expect_errno(errno.EPERM, os.symlink, m.path(a), m.path(b))
        expect_errno(errno.EPERM, os.symlink, '/etc/passwd', m.path('lnk'))
        expect_errno(errno.EPERM, os.mknod, m.path(b), stat.S_IFIFO | 0o644)
        expect_errno(errno.EPERM, os.mkfifo, m.path('fifo'))
        expect_errno(errno.EPERM, os.chmod, m.path(a), 0o600)
        expect_errno(errno.EPERM, os.chmod, m.path(a), 0o644)
        expect_errno(errno.EPERM, os.chown, m.path(a), 1, 1)
        expect_errno(errno.EPERM, os.chown, m.path(a), os.getuid(), 1)
        expect_errno(errno.EPERM, os.chmod, root, 0o777)
        expect_errno(errno.EPERM, os.truncate, m.path(a), 0)
        expect_errno(errno.EPERM, os.truncate, m.path(a), MiB)
        expect_errno(errno.EPERM, os.truncate, m.path(a), len(data) + 1)
        # a reader's descriptor cannot truncate either (EPERM, or EINVAL/EBADF: not open
        # for writing, as for any file)
        fd = os.open(m.path(a), os.O_RDONLY)
        try:
            expect_errno((errno.EPERM, errno.EINVAL, errno.EBADF), os.ftruncate, fd, 0)
        finally:
            os.close(fd)
        # nothing changed
        check(m.blocks() == [a], 'listing after the refused operations: %s' % m.blocks())
        st = os.stat(m.path(a))
        check(stat.S_IMODE(st.st_mode) == 0o644 and st.st_uid == os.getuid(),
              'mode/owner changed: %o %d' % (st.st_mode, st.st_uid))
        same(read_file(m.path(a)), data, 'block after the refused operations')


def run_bad(opts):
    """Start ucmfs with a bad -o; it must exit 2 with one line naming the option."""
    with tempfile.TemporaryDirectory(prefix='ucmfs-mt-') as tmp:
        mnt = os.path.join(tmp, 'mnt')
        os.mkdir(mnt)
        try:
            r = subprocess.run([daemon_bin(), '-f', '-o', opts, os.path.join(tmp, 'store'), mnt],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=daemon_env(),
                               timeout=10 * SLOW)
        finally:
            if os.path.ismount(mnt):
                subprocess.run(['fusermount3', '-u', '-z', mnt], timeout=30)
                raise AssertionError('-o %s: ucmfs mounted' % opts)
        return r


def test_option_errors():
    for opts, name in [('bogus_opt', 'bogus_opt'), ('mem_size=12Q', 'mem_size'),
                       ('policy=bogus', 'policy'), ('mem_size=64M,frobnicate=1', 'frobnicate'),
                       ('block_size=abc', 'block_size'), ('ttl=soon', 'ttl'),
                       ('io=fast', 'io')]:
        r = run_bad(opts)
        check(r.returncode == 2, '-o %s: exit status %d, expected 2 (stderr %r)' % (
            opts, r.returncode, r.stderr))
        lines = r.stderr.splitlines()
        check(len(lines) == 1, '-o %s: %d lines on stderr, expected one: %r' % (
            opts, len(lines), r.stderr))
        check(name in lines[0], '-o %s: the message does not name %s: %r' % (
            opts, name, lines[0]))


if __name__ == '__main__':
    run([test_excl, test_invalid_names, test_eperm_at_root, test_option_errors])
