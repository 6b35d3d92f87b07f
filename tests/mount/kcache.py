#!/usr/bin/env python3
"""What the kernel keeps between calls is never stale: a block's pages across opens
(keep_cache), the directories' attributes (fs/fs.c). Each case makes the kernel hold a
block's name, attributes and pages (stat, two whole reads), changes the block through one
path, and looks again at once."""
import errno
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (KiB, MiB, Mount, check, expect_errno, pattern, rand_id, read_fd,
                     read_file, run, same, wait_until, write_file)


def known(m, bid, n, seed):
    """Make the kernel hold bid's name and pages: stat it and read it whole twice."""
    check(os.stat(m.path(bid)).st_size == n, 'stat before the change')
    same(read_file(m.path(bid)), pattern(n, seed), 'first read')
    same(read_file(m.path(bid)), pattern(n, seed), 're-read')


def gone(m, bid, what):
    expect_errno(errno.ENOENT, os.stat, m.path(bid))
    expect_errno(errno.ENOENT, os.open, m.path(bid), os.O_RDONLY)
    check(not os.path.exists(m.path(bid)), '%s: the name still exists' % what)
    check(bid not in m.blocks(), '%s: still listed' % what)


def test_evicted_then_written_again():
    """Memory only: a block evicted for room is gone for its known name, and writing that
    name again (O_CREAT without O_EXCL) starts from nothing: fstat shows what was written,
    reads show the new bytes, not the pages the kernel had of the old ones."""
    with Mount('mem_size=4M', store='none') as m:
        bid = rand_id()
        write_file(m.path(bid), pattern(MiB, 1))
        known(m, bid, MiB, 1)
        for i in range(12):
            write_file(m.path(rand_id()), pattern(MiB, 100 + i))
        check(wait_until(lambda: bid not in m.blocks(), 10), 'the block was never evicted')
        gone(m, bid, 'evicted')
        fd = os.open(m.path(bid), os.O_WRONLY | os.O_CREAT)
        try:
            os.write(fd, pattern(300 * KiB + 5, 2)[:100])
            check(os.fstat(fd).st_size == 100, 'the writer of a name whose block was '
                  'evicted sees size %d, not 100' % os.fstat(fd).st_size)
            os.pwrite(fd, pattern(300 * KiB + 5, 2)[100:], 100)
        finally:
            os.close(fd)
        check(os.stat(m.path(bid)).st_size == 300 * KiB + 5, 'size after writing it again')
        same(read_file(m.path(bid)), pattern(300 * KiB + 5, 2), 'read after writing it again')


def test_expired_while_held():
    """A TTL set on a known name: once it passes, the name is gone for everyone, while a
    reader that held the block open keeps reading it and its fstat still answers."""
    with Mount() as m:
        bid = rand_id()
        write_file(m.path(bid), pattern(2 * MiB, 3))
        known(m, bid, 2 * MiB, 3)
        fd = os.open(m.path(bid), os.O_RDONLY)
        try:
            os.setxattr(m.path(bid), 'user.ucm.ttl', b'300')
            time.sleep(0.5)
            gone(m, bid, 'expired while held open')
            check(os.fstat(fd).st_size == 2 * MiB, 'fstat of the holder after expiry')
            same(read_fd(fd), pattern(2 * MiB, 3), 'the holder reads after expiry')
        finally:
            os.close(fd)
        gone(m, bid, 'expired, then closed')


def test_expired_unheld():
    """A TTL given at write time, and a shorter one set later on a known name: both go."""
    with Mount('ttl=1500ms') as m:
        a, b = rand_id(), rand_id()
        write_file(m.path(a), pattern(64 * KiB, 4))
        write_file(m.path(b), pattern(64 * KiB, 5))
        known(m, a, 64 * KiB, 4)
        known(m, b, 64 * KiB, 5)
        os.setxattr(m.path(b), 'user.ucm.ttl', b'200')
        time.sleep(0.4)
        gone(m, b, 'expired at a TTL set later')
        check(os.stat(m.path(a)).st_size == 64 * KiB, 'a block before its TTL')
        time.sleep(1.3)
        gone(m, a, 'expired at the TTL it was written with')


def test_replaced():
    """A replacement through the mount: the known name shows the new version at once."""
    with Mount() as m:
        bid = rand_id()
        write_file(m.path(bid), pattern(MiB + 7, 6))
        known(m, bid, MiB + 7, 6)
        write_file(m.path(bid), pattern(200 * KiB, 7), flags=os.O_WRONLY | os.O_TRUNC)
        check(os.stat(m.path(bid)).st_size == 200 * KiB, 'stat after the replacement')
        same(read_file(m.path(bid)), pattern(200 * KiB, 7), 'read after the replacement')


def test_unlinked_then_created():
    """rm of a known name, then a new block under it."""
    with Mount() as m:
        bid = rand_id()
        write_file(m.path(bid), pattern(MiB, 8))
        known(m, bid, MiB, 8)
        os.unlink(m.path(bid))
        gone(m, bid, 'unlinked')
        write_file(m.path(bid), pattern(3 * KiB, 9), flags=os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        check(os.stat(m.path(bid)).st_size == 3 * KiB, 'stat of the new block')
        same(read_file(m.path(bid)), pattern(3 * KiB, 9), 'read of the new block')


def test_replaced_between_lookup_and_open():
    """Replacements racing readers whose lookup saw the older version: every open succeeds
    (never ESTALE), and whatever version it gets, its fstat, its bytes and the size it reads
    agree."""
    sizes = {100 * KiB + 1: 11, 300 * KiB + 3: 12, 7: 13}
    with Mount() as m:
        bid = rand_id()
        p = m.path(bid)
        write_file(p, pattern(7, 13))
        stop = time.monotonic() + 4
        bad, reads = [], [0]

        def guarded(fn):
            def run_it():
                try:
                    fn()
                except OSError as e:
                    bad.append('%s: %s' % (fn.__name__, e))
            return run_it

        @guarded
        def writer():
            while time.monotonic() < stop and not bad:
                for n, seed in sizes.items():
                    write_file(p, pattern(n, seed), flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC)

        @guarded
        def reader():
            while time.monotonic() < stop and not bad:
                os.stat(p)  # the kernel now holds the node and its attributes
                fd = os.open(p, os.O_RDONLY)
                try:
                    size = os.fstat(fd).st_size
                    data = read_fd(fd)
                    again = os.fstat(fd).st_size
                finally:
                    os.close(fd)
                reads[0] += 1
                if size not in sizes or len(data) != size or again != size or \
                        data != pattern(size, sizes[size]):
                    bad.append('fstat %d, then %d bytes read, fstat %d after' %
                               (size, len(data), again))

        threads = [threading.Thread(target=writer)] + \
            [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(not bad, 'a reader saw two versions mixed: ' + '; '.join(bad[:3]))
        check(reads[0] > 50, 'only %d reads in 4 s' % reads[0])


if __name__ == '__main__':
    run([test_evicted_then_written_again, test_expired_while_held, test_expired_unheld,
         test_replaced, test_unlinked_then_created, test_replaced_between_lookup_and_open])
