#!/usr/bin/env python3
"""The engine clients against a real mount: the C client (tools/client/ucmfs.h, exercised by
the client-test program built beside the daemon) and the Python client
(tools/client/ucmfs.py): round trips, shard reads, prefix lookups, TTLs, prefetch.

UCMFS_CLIENT=installed runs them against the installed copies instead (tests/package): the
module ucmfs that python3 finds by itself, and the programs named by CLIENT_TEST_BIN and
CLIENT_EXAMPLE_BIN, built against the installed library."""
import array
import errno
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
INSTALLED = os.environ.get('UCMFS_CLIENT') == 'installed'
if not INSTALLED:
    sys.path.insert(0, os.path.join(HERE, '..', '..', 'tools', 'client'))
from ucmtest import (KiB, MiB, SLOW, Mount, check, daemon_bin, expect_errno, pattern, run,
                     same, wait_until)
import ucmfs

if INSTALLED:
    check(not os.path.abspath(ucmfs.__file__).startswith(os.path.dirname(os.path.dirname(HERE))),
          'UCMFS_CLIENT=installed, but ucmfs comes from the source tree: %s' % ucmfs.__file__)


def tool(name):
    env = os.environ.get(name.upper().replace('-', '_') + '_BIN')
    path = env or os.path.join(os.path.dirname(os.path.abspath(daemon_bin())), name)
    check(os.path.exists(path), '%s not found beside the daemon: %s' % (name, path))
    return path


def fresh():
    return os.urandom(16)


# --- C -----------------------------------------------------------------------------------

def test_c_client():
    # 16M of memory: the prefetch case needs blocks that leave memory
    with Mount('mem_size=16M') as m:
        r = subprocess.run([tool('client-test'), m.mnt], capture_output=True, text=True,
                           timeout=120 * SLOW)
        lines = r.stdout.strip().splitlines()
        fails = [l for l in lines if not l.startswith('ok ')]
        check(r.returncode == 0 and not fails and len(lines) == 6,
              'client-test exited %d: %s %s' % (r.returncode, ' | '.join(fails or lines),
                                                r.stderr.strip()[-300:]))
        check(os.listdir(m.path('.ucm/query')) == [], 'the C client left query files: %r' %
              os.listdir(m.path('.ucm/query')))
        # the README's example: the first run stores the blocks, the second loads them
        for want in ('0 of 8 blocks loaded, 8 stored', '8 of 8 blocks loaded, 0 stored'):
            r = subprocess.run([tool('client-example'), m.mnt], capture_output=True, text=True,
                               timeout=60 * SLOW)
            check(r.returncode == 0 and r.stdout.strip() == want,
                  'client-example exited %d: %r (expected %r)' % (r.returncode,
                                                                  r.stdout.strip(), want))


# --- Python --------------------------------------------------------------------------------

def test_py_roundtrip():
    with Mount('mem_size=32M') as m, ucmfs.Client(m.mnt) as c:
        bid = fresh()
        data = bytearray(pattern(3 * MiB + 1, 1))
        check(c.put(bid, memoryview(data)) is True, 'put of a new block')
        check(c.exists(bid) and c.size(bid) == len(data), 'size after put')
        same(c.get(bid), bytes(data), 'get')
        # into a caller buffer, in place: a view into the middle of a larger buffer
        big = bytearray(len(data) + 200)
        n = c.get(bid, memoryview(big)[100:100 + len(data)])
        check(n == len(data), 'get into a buffer returned %d' % n)
        check(big[:100] == bytes(100) and big[-100:] == bytes(100), 'get wrote outside its view')
        same(bytes(big[100:-100]), bytes(data), 'get into a buffer')
        # a part of it, and O_DIRECT
        check(c.get(bid, offset=len(data) - 10) == bytes(data[-10:]), 'get of the tail')
        check(c.get(bid, offset=5, length=7) == bytes(data[5:12]), 'get of 7 bytes at 5')
        same(c.get(bid, direct=True), bytes(data), 'direct get')
        # content addressing: a second put writes nothing; replace=True does
        check(c.put(bid, b'other') is False, 'put of a stored id returned True')
        same(c.get(bid), bytes(data), 'after a second put')
        check(c.put(bid, b'other', replace=True, durable=True) is True, 'replace')
        check(c.get(bid) == b'other', 'after replace')
        # typed and multi-dimensional buffers are written as their bytes, without a copy
        a = array.array('H', range(50000))
        bid2 = fresh()
        c.put(bid2, a)
        back = array.array('H', bytes(len(a) * 2))
        check(c.get(bid2, back) == len(a) * 2 and back == a, 'array round trip')
        grid = memoryview(bytearray(pattern(4096, 2))).cast('B', (64, 64))
        bid3 = fresh()
        c.put(bid3, grid)
        check(c.get(bid3) == grid.tobytes(), '2-d memoryview round trip')
        # ids as hex strings too; info()
        # (a get's descriptor is released just after it returns: its pin goes soon after)
        wait_until(lambda: c.info(bid.hex()).pins == 0, 5)
        info = c.info(bid.hex())
        check(info.size == 5 and info.ttl_ms is None and info.pins == 0 and
              info.tier.startswith('mem') and info.codec, 'info: %r' % (info,))
        # an empty block
        e = fresh()
        check(c.put(e, b''), 'put of an empty block')
        check(c.get(e) == b'' and c.size(e) == 0, 'empty block')


def test_py_errors():
    with Mount('mem_size=8M,block_size=64K') as m, ucmfs.Client(m.mnt) as c:
        missing = fresh()
        expect_errno(errno.ENOENT, c.get, missing)
        expect_errno(errno.ENOENT, c.info, missing)
        expect_errno(errno.ENOENT, c.set_ttl, missing, 1000)
        check(not c.exists(missing), 'exists() of a missing block')
        for bad in (b'short', 'A' * 32, 'xyz', b'\0' * 17):
            try:
                c.get(bad)
            except ValueError:
                continue
            raise AssertionError('id %r was accepted' % (bad,))
        # block_size=64K: a block of another size is refused, nothing is published
        bid = fresh()
        expect_errno(errno.EIO, c.put, bid, b'x' * 1000)
        check(not c.exists(bid), 'a refused block was published')
        check(c.put(bid, b'x' * (64 * KiB)), 'a block of block_size')
        # a readonly output buffer
        try:
            c.get(bid, b'\0' * 10)
            raise AssertionError('get into bytes (read-only) succeeded')
        except TypeError:
            pass
        try:
            ucmfs.Client(m.tmp)
            raise AssertionError('a directory that is no ucmfs mount was accepted')
        except NotADirectoryError:
            pass


def test_py_shards():
    with Mount('mem_size=32M') as m, ucmfs.Client(m.mnt) as c:
        shard, nshards = 128 * KiB, 16
        data = pattern(shard * nshards + 99, 3)
        bid = fresh()
        c.put(bid, data)
        out = bytearray(shard)
        for i in reversed(range(nshards)):
            c.get_shard(bid, i, shard, out)
            check(out == data[i * shard:(i + 1) * shard], 'shard %d differs' % i)
            check(c.get_shard(bid, i, shard) == data[i * shard:(i + 1) * shard],
                  'shard %d (bytes) differs' % i)
        expect_errno(errno.EIO, c.get_shard, bid, nshards, shard, out)
        expect_errno(errno.ENXIO, c.get_shard, bid, nshards + 1, shard)
        # written shard by shard, out of order, published on leaving the block
        bid2 = fresh()
        with c.writer(bid2, shard * nshards) as w:
            for i in (3, 0, 15, 1, 2) + tuple(range(4, 15)):
                w.write(memoryview(data)[i * shard:(i + 1) * shard], i * shard)
                if i == 15:
                    check(c.lookup([bid2]).hits == 0, 'a block being written is visible')
        for i in range(nshards):
            check(c.get_shard(bid2, i, shard) == data[i * shard:(i + 1) * shard],
                  'written shard %d' % i)
        # a missing shard: the commit fails and nothing is published
        bid3 = fresh()
        w = c.writer(bid3, 2 * shard)
        w.write(data[:shard], shard)
        expect_errno(errno.EIO, w.commit)
        check(not c.exists(bid3), 'an incomplete block was published')
        # an exception inside the block aborts, even with every byte written
        bid4 = fresh()
        try:
            with c.writer(bid4, shard) as w:
                w.write(data[:shard])
                raise KeyError('engine failure')
        except KeyError:
            pass
        check(not c.exists(bid4), 'an aborted block was published')
        # a second writer of the same id is told it exists
        w = c.writer(bid3, 10)
        try:
            expect_errno(errno.EEXIST, c.writer, bid3, 10)
            check(c.put(bid3, b'0123456789') is False, 'put while another writer holds the id')
        finally:
            w.write(b'0123456789')
            w.commit()
        check(c.get(bid3) == b'0123456789', 'the first writer lost its block')


def test_py_lookup():
    with Mount('mem_size=32M') as m, ucmfs.Client(m.mnt) as c:
        ids = [fresh() for _ in range(10000)]
        present = {0, 1, 2, 5, 9000}
        for i in present:
            c.put(ids[i], b'kv')
        r = c.lookup(ids)
        check((r.prefix, r.last, r.hits) == (3, 9000, 5), '10,000 ids: %r' % (r[:3],))
        check([i for i, h in enumerate(r.mask) if h] == sorted(present), 'hit mask differs')
        r = c.lookup(ids[3:5])
        check((r.prefix, r.last, r.hits, r.mask) == (0, -1, 0, [False, False]), 'misses: %r' %
              (r,))
        r = c.lookup([])
        check((r.prefix, r.last, r.hits) == (0, -1, 0), 'no ids: %r' % (r,))
        # more ids than a query file holds: batches, in order
        many = ids[:9001] + [fresh() for _ in range(25000)] + [ids[1]]
        r = c.lookup(many)
        check((r.prefix, r.last, r.hits) == (3, len(many) - 1, 6), '%d ids: %r' % (
            len(many), r[:3]))
        check(os.listdir(m.path('.ucm/query')) == [], 'lookups left query files: %r' %
              os.listdir(m.path('.ucm/query')))


def test_py_ttl_and_prefetch():
    with Mount('mem_size=64M') as m, ucmfs.Client(m.mnt) as c:
        a, b, k = fresh(), fresh(), fresh()
        c.put(a, b'a' * 100, ttl_ms=60000)
        c.put(b, b'b' * 100, ttl_ms=1000)
        c.put(k, b'k' * 100)
        check(50000 < c.info(a).ttl_ms <= 60000, 'ttl after put: %r' % c.info(a).ttl_ms)
        c.extend_ttl([a, b, k], 30000)
        check(c.info(a).ttl_ms > 50000, 'extend shortened a TTL')
        check(20000 < c.info(b).ttl_ms <= 30000, 'extended ttl %r' % c.info(b).ttl_ms)
        check(c.info(k).ttl_ms is None, 'extend gave a TTL to a block without one')
        c.set_ttl(a, None)
        check(c.info(a).ttl_ms is None, 'cleared ttl')
        c.set_ttl(a, 200)
        check(wait_until(lambda: not c.exists(a), 5), 'a TTL of 200 ms never expired')
        # prefetch: disk-only blocks (after a remount) come back into memory
        ids = [fresh() for _ in range(5)]
        datas = [pattern(2 * MiB, 10 + i) for i in range(5)]
        for bid, d in zip(ids, datas):
            c.put(bid, d)
        c.close()
        m.remount()
        c = ucmfs.Client(m.mnt)
        check(all(c.info(bid).tier == 'disk' for bid in ids), 'not disk-only after a remount')
        c.prefetch(ids[:3] + [fresh()], timeout=30)
        tiers = [c.info(bid).tier for bid in ids]
        check(tiers == ['mem,disk'] * 3 + ['disk'] * 2, 'tiers after prefetch: %r' % tiers)
        p = c.prefetch_start(ids[3:])
        p.wait(30)
        check(p.poll(), 'poll after wait')
        check(all(c.info(bid).tier == 'mem,disk' for bid in ids), 'prefetch_start/wait')
        for bid, d in zip(ids, datas):
            same(c.get(bid), d, 'prefetched block')
        c.close()


if __name__ == '__main__':
    run([test_c_client, test_py_roundtrip, test_py_errors, test_py_shards, test_py_lookup,
         test_py_ttl_and_prefetch])
