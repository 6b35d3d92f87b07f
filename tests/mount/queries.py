#!/usr/bin/env python3
"""Lookup queries under /.ucm/query/ (DESIGN.md section 4), used with plain file calls:
create a file, write hex ids, read the answer from user.ucm.prefix / .hits / .last; prefetch
and TTL extension by setxattr."""
import errno
import os
import stat
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (KiB, MiB, Mount, Peer, check, expect_errno, pattern, rand_id, read_file,
                     run, same, wait_until, write_file)

QDIR = '.ucm/query'


def qpath(m, name):
    return m.path(os.path.join(QDIR, name))


def make_query(m, ids, name=None, sep='\n'):
    """A query file holding ids (joined by sep); returns its path."""
    p = qpath(m, name or 'q-' + rand_id()[:8])
    with open(p, 'w') as f:
        f.write(sep.join(ids))
    return p


def xget(p, name):
    return os.getxattr(p, 'user.ucm.' + name).decode()


def answers(p):
    """(prefix, hits, last) of a query file."""
    return int(xget(p, 'prefix')), xget(p, 'hits'), int(xget(p, 'last'))


def expect_answers(p, prefix, hits, last, what):
    got = answers(p)
    check(got == (prefix, hits, last), '%s: prefix/hits/last are %r, expected %r' % (
        what, got if len(got[1]) < 80 else (got[0], got[1][:60] + '...', got[2]),
        (prefix, hits if len(hits) < 80 else hits[:60] + '...', last)))


def put(m, n=4 * KiB, seed=1):
    bid = rand_id()
    write_file(m.path(bid), pattern(n, seed))
    return bid


def test_gaps():
    with Mount('mem_size=16M') as m:
        p1, p2, p3, p4 = (put(m, seed=i) for i in range(4))
        miss1, miss2 = rand_id(), rand_id()
        ids = [p1, p2, miss1, p3, miss2, p4]
        q = make_query(m, ids)
        expect_answers(q, 2, '110101', 5, 'hit, hit, miss, hit, miss, hit')
        # computed at each getxattr: the gap filled, then the first block removed
        write_file(m.path(miss1), b'x')
        expect_answers(q, 4, '111101', 5, 'after the first gap was written')
        os.unlink(m.path(p1))
        expect_answers(q, 0, '011101', 5, 'after the first block was removed')
        # the last id present in the middle, with a miss at the end
        q2 = make_query(m, [miss2, p2, miss2])
        expect_answers(q2, 0, '010', 1, 'miss, hit, miss')
        # separators: spaces, tabs, CR LF, no newline at the end, runs of blanks
        for sep in (' ', '\t', '\r\n', '  \n\t '):
            q3 = make_query(m, [p2, p3, miss2, p4], sep=sep)
            expect_answers(q3, 2, '1101', 3, 'ids separated by %r' % sep)
        q4 = qpath(m, 'padded')
        with open(q4, 'w') as f:
            f.write('\n\n  %s\n%s  \n\n' % (p2, p3))
        expect_answers(q4, 2, '11', 1, 'ids with leading and trailing blank lines')
        # the same id twice counts twice
        expect_answers(make_query(m, [p2, p2, p2]), 3, '111', 2, 'one id three times')
        # listxattr names the answers
        names = os.listxattr(q)
        for n in ('user.ucm.prefix', 'user.ucm.hits', 'user.ucm.last', 'user.ucm.prefetch'):
            check(n in names, 'listxattr of a query file lacks %s: %r' % (n, names))


def test_all_miss():
    with Mount('mem_size=8M') as m:
        put(m)
        ids = [rand_id() for _ in range(50)]
        expect_answers(make_query(m, ids), 0, '0' * 50, -1, '50 absent ids')
        expect_answers(make_query(m, ids[:1]), 0, '0', -1, 'one absent id')


def test_ten_thousand():
    with Mount('mem_size=16M') as m:
        present = {0, 1, 2, 7, 500, 4999, 9998}
        ids = [rand_id() for _ in range(10000)]
        for i in sorted(present):
            write_file(m.path(ids[i]), b'')   # empty blocks are blocks
        want = ''.join('1' if i in present else '0' for i in range(10000))
        q = make_query(m, ids)
        check(os.stat(q).st_size == 10000 * 33 - 1, 'query file size %d' % os.stat(q).st_size)
        t = time.monotonic()
        expect_answers(q, 3, want, 9998, '10,000 ids')
        dt = time.monotonic() - t
        # one round trip per attribute, whatever the number of ids: well under a second
        check(dt < 5, 'three answers over 10,000 ids took %.1fs' % dt)
        # rewritten in place (O_TRUNC): the answer follows the new content
        with open(q, 'w') as f:
            f.write('\n'.join(ids[::-1]))
        expect_answers(q, 0, want[::-1], 9999, '10,000 ids reversed')
        # and truncated to its first three ids: 9999 (miss), 9998 (hit), 9997 (miss)
        os.truncate(q, 33 * 3 - 1)
        expect_answers(q, 0, '010', 1, 'truncated to 3 ids')


def test_expired_and_reserved():
    with Mount('mem_size=16M') as m:
        live = put(m)
        short = put(m)
        os.setxattr(m.path(short), 'user.ucm.ttl', b'300')
        q = make_query(m, [live, short])
        h = xget(q, 'hits')
        check(h in ('11', '10'), 'hits before the TTL: %r' % h)
        check(wait_until(lambda: xget(q, 'hits') == '10', 5),
              'a block past its TTL still counts as a hit: %r' % xget(q, 'hits'))
        expect_answers(q, 1, '10', 0, 'expired second block')
        # an expired first block: no prefix at all
        os.setxattr(m.path(live), 'user.ucm.ttl', b'1')
        check(wait_until(lambda: xget(q, 'hits') == '00', 5), 'expired first block')
        expect_answers(q, 0, '00', -1, 'both expired')

        # a reservation (being written by another process) is a miss until it commits
        with Peer() as w:
            bid = rand_id()
            done = put(m)
            w.open('f', m.path(bid), os.O_WRONLY | os.O_CREAT)
            w.write('f', 5, 64 * KiB)
            q2 = make_query(m, [done, bid])
            expect_answers(q2, 1, '10', 0, 'a block being written')
            # the writer's own ftruncate declaring more: still a miss
            w.do('ftruncate', 'f', 128 * KiB)
            expect_answers(q2, 1, '10', 0, 'a block being written, size declared')
            w.write('f', 5, 128 * KiB)
            w.close('f')
            expect_answers(q2, 2, '11', 1, 'after the writer closed it')
        # a replacement in progress: the old version still counts
        with Peer() as w:
            w.open('r', m.path(done), os.O_WRONLY | os.O_TRUNC)
            w.write('r', 6, 4 * KiB)
            expect_answers(q2, 2, '11', 1, 'a block being replaced')
            w.close('r')
        # an unlinked block is a miss at once
        os.unlink(m.path(done))
        expect_answers(q2, 0, '01', 1, 'after unlink')


def test_bad_ids():
    with Mount('mem_size=8M') as m:
        good = put(m)
        for bad in (good.upper(), good[:31], good + '0', 'g' * 32, good[:16] + '-' + good[17:],
                    '0x' + good[2:], good + ',' + good):
            q = make_query(m, [good, bad])
            for a in ('prefix', 'hits', 'last'):
                expect_errno(errno.EINVAL, os.getxattr, q, 'user.ucm.' + a)
        # NUL bytes are not separators
        q = qpath(m, 'nul')
        with open(q, 'wb') as f:
            f.write(good.encode() + b'\0' + good.encode())
        expect_errno(errno.EINVAL, os.getxattr, q, 'user.ucm.hits')
        # an empty file, or only blanks: no ids
        for content in ('', ' \n\t\n'):
            q = qpath(m, 'empty')
            with open(q, 'w') as f:
                f.write(content)
            expect_answers(q, 0, '', -1, 'query file holding %r' % content)
        # answers are read-only; other names are unknown
        for a in ('prefix', 'hits', 'last'):
            expect_errno((errno.EPERM, errno.EACCES), os.setxattr, q, 'user.ucm.' + a, b'1')
        expect_errno(errno.ENODATA, os.getxattr, q, 'user.ucm.nothing')
        expect_errno(errno.ENODATA, os.getxattr, q, 'user.ucm.ttl')
        expect_errno(errno.ENOTSUP, os.setxattr, q, 'user.ucm.nothing', b'1')
        # a bad TTL value
        for v in (b'', b'abc', b'-5', b'none'):
            expect_errno(errno.EINVAL, os.setxattr, q, 'user.ucm.ttl', v)
        # only regular files in the query directory
        expect_errno((errno.EPERM, errno.EACCES), os.mkdir, qpath(m, 'sub'))
        check(xget(qpath(m, 'empty'), 'prefetch') == 'none', 'prefetch state of a new query')


def test_limits():
    with Mount('mem_size=8M') as m:
        good = put(m)
        # 1 MiB of ids is accepted, one byte more is not
        n = MiB // 33
        text = ('\n'.join([good] * n)).encode()
        text += b' ' * (MiB - len(text))
        q = qpath(m, 'big')
        fd = os.open(q, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            check(os.write(fd, text) == MiB, 'a 1 MiB query file was not written whole')
            expect_errno(errno.EFBIG, os.pwrite, fd, b'x', MiB)
            expect_errno(errno.EFBIG, os.ftruncate, fd, MiB + 1)
        finally:
            os.close(fd)
        check(os.stat(q).st_size == MiB, 'size after the refused writes: %d' % os.stat(q).st_size)
        expect_answers(q, n, '1' * n, n - 1, 'a query of 1 MiB (%d ids)' % n)
        # many query files: at least 1,024, and a limit past which create fails ENOSPC
        made = []
        err = None
        for i in range(20000):
            try:
                fd = os.open(qpath(m, 'f%d' % i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except OSError as e:
                err = e
                break
            os.close(fd)
            made.append(i)
        check(len(made) >= 1024, 'only %d query files could be created' % len(made))
        check(err is not None and err.errno == errno.ENOSPC,
              'no limit on query files after %d (error: %r)' % (len(made), err))
        # freeing one makes room again
        os.unlink(qpath(m, 'f0'))
        fd = os.open(qpath(m, 'again'), os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        # the directory lists them
        names = os.listdir(m.path(QDIR))
        check('again' in names and 'big' in names and 'f0' not in names,
              'listing of %s: %d names, again/big missing or f0 present' % (QDIR, len(names)))
        for i in made[1:]:
            os.unlink(qpath(m, 'f%d' % i))


def test_query_files():
    with Mount('mem_size=8M') as m:
        a, b = put(m, seed=1), put(m, seed=2)
        q = make_query(m, [a, b], name='mine')
        st = os.stat(q)
        check(stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid(),
              'query file mode %o owner %d' % (stat.S_IMODE(st.st_mode), st.st_uid))
        d = os.stat(m.path(QDIR))
        check(stat.S_IMODE(d.st_mode) == 0o1777, 'query directory mode %o' % d.st_mode)
        # content reads back; getxattr through an open descriptor works too
        with open(q) as f:
            check(f.read() == a + '\n' + b, 'query file content differs')
        fd = os.open(q, os.O_RDONLY)
        try:
            check(os.getxattr(fd, 'user.ucm.hits') == b'11', 'getxattr on a descriptor')
            # unlinked while open: still answers through the descriptor, gone from the dir
            os.unlink(q)
            check(not os.path.exists(q), 'an unlinked query file is still there')
            check(os.getxattr(fd, 'user.ucm.prefix') == b'2', 'unlinked query answers')
        finally:
            os.close(fd)
        expect_errno(errno.ENOENT, os.unlink, q)
        # query files are not blocks: not in the root listing, no effect on statfs' blocks
        check(m.blocks() == sorted([a, b]), 'root listing: %r' % m.blocks())
        # appending ids
        q = make_query(m, [a], name='append')
        with open(q, 'a') as f:
            f.write('\n' + rand_id() + '\n' + b)
        expect_answers(q, 1, '101', 2, 'ids appended')
        # a query's TTL extension: only blocks that have a TTL, never shortened
        os.setxattr(m.path(a), 'user.ucm.ttl', b'5000')
        os.setxattr(q, 'user.ucm.ttl', b'60000')
        left = int(os.getxattr(m.path(a), 'user.ucm.ttl'))
        check(50000 < left <= 60000, 'TTL after an extension by query: %d' % left)
        check(os.getxattr(m.path(b), 'user.ucm.ttl') == b'none',
              'a block without TTL got one from a query')
        os.setxattr(q, 'user.ucm.ttl', b'1000')
        left = int(os.getxattr(m.path(a), 'user.ucm.ttl'))
        check(left > 50000, 'a shorter extension shortened the TTL to %d' % left)
        os.setxattr(q, 'user.ucm.ttl', b'2m')
        left = int(os.getxattr(m.path(a), 'user.ucm.ttl'))
        check(100000 < left <= 120000, 'TTL after an extension by 2m: %d' % left)


def test_prefetch():
    with Mount('mem_size=32M') as m:
        ids = [rand_id() for _ in range(4)]
        data = [pattern(2 * MiB, i) for i in range(4)]
        for bid, d in zip(ids, data):
            write_file(m.path(bid), d)
        hot = ids[3]
        m.remount()   # memory is empty again: every block is on disk only
        for bid in ids:
            t = os.getxattr(m.path(bid), 'user.ucm.tier')
            check(t == b'disk', 'after a remount block is in %r' % t)
        read_file(m.path(hot))
        check(os.getxattr(m.path(hot), 'user.ucm.tier') == b'mem,disk', 'a read loads it')
        missing = rand_id()
        q = make_query(m, ids[:2] + [missing, hot])
        check(xget(q, 'prefetch') == 'none', 'prefetch state before: %r' % xget(q, 'prefetch'))
        os.setxattr(q, 'user.ucm.prefetch', b'1')
        check(xget(q, 'prefetch') in ('pending', 'done'), 'state after the set')
        check(wait_until(lambda: xget(q, 'prefetch') == 'done', 20),
              'prefetch still %r after 20s' % xget(q, 'prefetch'))
        for bid in ids[:2] + [hot]:
            t = os.getxattr(m.path(bid), 'user.ucm.tier')
            check(t == b'mem,disk', 'a disk-only block after prefetch done: %r' % t)
        check(os.getxattr(m.path(ids[2]), 'user.ucm.tier') == b'disk',
              'a block not in the query was loaded too')
        # the data is right, and read from memory now
        for bid, d in zip(ids, data):
            same(read_file(m.path(bid)), d, 'block after prefetch')
        # prefetch does not pin: the blocks can still be removed
        check(os.getxattr(m.path(ids[0]), 'user.ucm.pins') == b'0', 'a prefetched block pinned')
        os.unlink(m.path(ids[0]))
        # a second prefetch on the same file, and one on a file of bad ids
        os.setxattr(q, 'user.ucm.prefetch', b'again')
        check(wait_until(lambda: xget(q, 'prefetch') == 'done', 20), 'second prefetch')
        bad = make_query(m, ['nothex'])
        expect_errno(errno.EINVAL, os.setxattr, bad, 'user.ucm.prefetch', b'1')


def test_memory_only():
    with Mount('mem_size=8M', store='none') as m:
        a = put(m)
        q = make_query(m, [a, rand_id()])
        expect_answers(q, 1, '10', 0, 'memory-only mount')
        os.setxattr(q, 'user.ucm.prefetch', b'1')
        check(wait_until(lambda: xget(q, 'prefetch') == 'done', 10), 'prefetch with no disk')


if __name__ == '__main__':
    run([test_gaps, test_all_miss, test_ten_thousand, test_expired_and_reserved, test_bad_ids,
         test_limits, test_query_files, test_prefetch, test_memory_only])
