#!/usr/bin/env python3
"""/.ucm/stats: a valid Prometheus text exposition (promtool check metrics) on every kind of
mount, with the metrics of DESIGN.md section 4, whose counters move when blocks are written,
read, missed, evicted, expired and queried."""
import errno
import mmap
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (KiB, MiB, Mount, Peer, check, cmd, expect_errno, pattern, rand_id,
                     read_file, run, wait_until, write_file)

PROMTOOL = shutil.which('promtool') or '/usr/bin/promtool'


def stats_text(m):
    with open(m.path('.ucm/stats')) as f:
        return f.read()


def parse(text):
    """{(name, labels): value}, labels a frozenset of 'k="v"' strings, and {name: type}."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith('# TYPE '):
            _, _, name, typ = line.split(' ', 3)
            types[name] = typ
            continue
        if not line or line.startswith('#'):
            continue
        head, value = line.rsplit(' ', 1)
        if '{' in head:
            name, labels = head.split('{', 1)
            labels = frozenset(split_labels(labels[:-1]))
        else:
            name, labels = head, frozenset()
        check((name, labels) not in samples, 'sample %s appears twice' % head)
        samples[(name, labels)] = float(value)
    return samples, types


def split_labels(s):
    out, cur, quoted, esc = [], '', False, False
    for c in s:
        if esc:
            cur += c
            esc = False
        elif c == '\\':
            cur += c
            esc = True
        elif c == '"':
            cur += c
            quoted = not quoted
        elif c == ',' and not quoted:
            out.append(cur)
            cur = ''
        else:
            cur += c
    if cur:
        out.append(cur)
    return out


class Stats:
    def __init__(self, m):
        self.samples, self.types = parse(stats_text(m))

    def get(self, name, **labels):
        """Sum of the samples of name whose labels include the given ones."""
        want = {'%s="%s"' % kv for kv in labels.items()}
        vals = [v for (n, ls), v in self.samples.items() if n == name and want <= ls]
        check(vals, 'no sample %s%s in /.ucm/stats' % (name, labels or ''))
        return sum(vals)

    def has(self, name, **labels):
        want = {'%s="%s"' % kv for kv in labels.items()}
        return any(n == name and want <= ls for (n, ls) in self.samples)


def promtool_ok(m, what):
    text = stats_text(m)
    r = cmd([PROMTOOL, 'check', 'metrics'], check_rc=False, input=text)
    check(r.returncode == 0, '%s: promtool check metrics exited %d: %s' % (
        what, r.returncode, (r.stdout + r.stderr).strip()[:800]))
    check(text.endswith('\n'), '%s: the exposition does not end with a newline' % what)
    return text


def activity(m, disk=True):
    """Writes, reads, a query, an incomplete commit, a TTL: every family gets samples."""
    ids = [rand_id() for _ in range(3)]
    for i, bid in enumerate(ids):
        write_file(m.path(bid), pattern(256 * KiB, i))
    read_file(m.path(ids[0]))
    q = m.path('.ucm/query/q')
    with open(q, 'w') as f:
        f.write('\n'.join(ids + [rand_id()]))
    os.getxattr(q, 'user.ucm.hits')
    fd = os.open(m.path(rand_id()), os.O_WRONLY | os.O_CREAT)
    os.ftruncate(fd, 8192)
    os.write(fd, b'x')
    expect_errno(errno.EIO, os.close, fd)
    os.setxattr(m.path(ids[2]), 'user.ucm.ttl', b'60000')
    return ids


def test_promtool():
    with Mount('mem_size=16M') as m:
        promtool_ok(m, 'a fresh mount')
        ids = activity(m)
        promtool_ok(m, 'after some traffic')
        m.remount()
        read_file(m.path(ids[1]))   # a load from disk: the load histogram gets a sample
        promtool_ok(m, 'after a load from disk')
        # stats is read-only, also for root
        expect_errno(errno.EACCES, os.open, m.path('.ucm/stats'), os.O_WRONLY)
        expect_errno(errno.EACCES, os.open, m.path('.ucm/stats'), os.O_RDWR)
        # cat(1) and a node_exporter-like reader see the same text
        text = cmd(['cat', m.path('.ucm/stats')]).stdout
        check('ucmfs_tier_blocks' in text, 'cat of stats lacks ucmfs_tier_blocks')


def test_promtool_memory_only():
    with Mount('mem_size=8M', store='none') as m:
        activity(m)
        text = promtool_ok(m, 'memory-only mount')
        check('tier="disk"' not in text, 'a memory-only mount reports a disk tier')


def test_promtool_striped_and_odd_paths():
    m = Mount('mem_size=8M')
    # two store directories, one named with characters a label value must escape
    odd = os.path.join(m.tmp, 'st"ore\\x')
    m.store = odd + ':' + os.path.join(m.tmp, 'plain')
    with m:
        activity(m)
        text = promtool_ok(m, 'striped store with a quote and a backslash in a path')
        st = Stats(m)
        rows = {ls for (n, ls) in st.samples if n == 'ucmfs_tier_blocks'}
        check(len(rows) == 3, 'tier rows of a 2-way stripe: %r' % rows)
        check('store="%s"' % odd.replace('\\', '\\\\').replace('"', '\\"') in text,
              'the odd store path is not escaped as the exposition format wants')


# What DESIGN.md section 4 lists, by family name and type.
FAMILIES = {
    'ucmfs_tier_hits_total': 'counter', 'ucmfs_tier_misses_total': 'counter',
    'ucmfs_tier_bytes_in_total': 'counter', 'ucmfs_tier_bytes_out_total': 'counter',
    'ucmfs_tier_blocks': 'gauge', 'ucmfs_tier_bytes': 'gauge',
    'ucmfs_tier_evictions_total': 'counter', 'ucmfs_tier_expirations_total': 'counter',
    'ucmfs_pins': 'gauge', 'ucmfs_reservations': 'gauge', 'ucmfs_commits_total': 'counter',
    'ucmfs_load_seconds': 'histogram', 'ucmfs_dump_seconds': 'histogram',
    'ucmfs_disk_queue_depth': 'gauge', 'ucmfs_compression_ratio': 'gauge',
    'ucmfs_checksum_failures_total': 'counter', 'ucmfs_queries_total': 'counter',
    'ucmfs_query_seconds': 'histogram', 'ucmfs_read_requests_total': 'counter',
    'ucmfs_write_requests_total': 'counter',
}
PER_TIER = ['ucmfs_tier_hits_total', 'ucmfs_tier_misses_total', 'ucmfs_tier_bytes_in_total',
            'ucmfs_tier_bytes_out_total', 'ucmfs_tier_blocks', 'ucmfs_tier_bytes',
            'ucmfs_tier_evictions_total', 'ucmfs_tier_expirations_total']


def test_families():
    with Mount('mem_size=8M') as m:
        activity(m)
        st = Stats(m)
        missing = [n for n in FAMILIES if n not in st.types]
        check(not missing, 'families missing from /.ucm/stats: %s' % ', '.join(missing))
        wrong = ['%s is a %s' % (n, st.types[n]) for n, t in FAMILIES.items() if st.types[n] != t]
        check(not wrong, 'wrong types: %s' % ', '.join(wrong))
        for tier in ('mem', 'disk'):
            # (mem bytes out: test_mem_bytes_out)
            lacking = [n for n in PER_TIER if not st.has(n, tier=tier) and
                       (n, tier) != ('ucmfs_tier_bytes_out_total', 'mem')]
            check(not lacking, 'no %s sample for tier="%s"' % (', '.join(lacking), tier))
        for result in ('ok', 'incomplete', 'failed'):
            check(st.has('ucmfs_commits_total', result=result),
                  'no ucmfs_commits_total{result="%s"}' % result)
        for n, t in st.types.items():
            check(n.startswith('ucmfs_'), 'metric %s is not named ucmfs_*' % n)
            check(t != 'counter' or n.endswith('_total'), 'counter %s lacks _total' % n)


def test_counters_write_read():
    # reads through the daemon: those it counts in bytes (passthrough reads it never sees)
    with Mount('mem_size=64M,passthrough=off') as m:
        n = 3 * MiB + 5
        data = pattern(n, 1)
        s0 = Stats(m)
        bid = rand_id()
        write_file(m.path(bid), data)
        s1 = Stats(m)
        d = lambda name, **l: s1.get(name, **l) - s0.get(name, **l)
        check(d('ucmfs_write_bytes_total') == n, 'write_bytes moved by %d for a write of %d' % (
            d('ucmfs_write_bytes_total'), n))
        check(d('ucmfs_commits_total', result='ok') == 1, 'commits ok moved by %d' % d(
            'ucmfs_commits_total', result='ok'))
        check(d('ucmfs_tier_bytes_in_total', tier='mem') == n, 'mem bytes_in moved by %d' % d(
            'ucmfs_tier_bytes_in_total', tier='mem'))
        check(d('ucmfs_tier_blocks', tier='mem') == 1, 'mem blocks moved by %d' % d(
            'ucmfs_tier_blocks', tier='mem'))
        check(d('ucmfs_tier_bytes', tier='mem') >= n, 'mem bytes moved by %d' % d(
            'ucmfs_tier_bytes', tier='mem'))
        # the dump to disk follows: dumps, disk blocks, compress counters. The disk tier
        # counts the block when it commits it, the pipeline counts the dump an instant
        # later: a sample in between sees one and not the other, so wait for both.
        def dumped():
            s = Stats(m)
            return (s.get('ucmfs_tier_blocks', tier='disk') ==
                    s0.get('ucmfs_tier_blocks', tier='disk') + 1 and
                    s.get('ucmfs_dumps_total') > s0.get('ucmfs_dumps_total'))
        check(wait_until(dumped, 10), 'the disk tier never counted the new block, or the '
              'pipeline never counted its dump')
        s2 = Stats(m)
        check(s2.get('ucmfs_dumps_total') - s0.get('ucmfs_dumps_total') == 1, 'dumps moved by %d'
              % (s2.get('ucmfs_dumps_total') - s0.get('ucmfs_dumps_total')))
        check(s2.get('ucmfs_dump_seconds_count') > s0.get('ucmfs_dump_seconds_count'),
              'the dump histogram did not move')
        check(s2.get('ucmfs_tier_bytes_in_total', tier='disk') >
              s0.get('ucmfs_tier_bytes_in_total', tier='disk'), 'disk bytes_in did not move')
        check(s2.get('ucmfs_compress_raw_bytes_total') - s0.get('ucmfs_compress_raw_bytes_total')
              == n, 'compress raw bytes moved by %d' % (
                  s2.get('ucmfs_compress_raw_bytes_total') -
                  s0.get('ucmfs_compress_raw_bytes_total')))
        # a read of a block in memory: a mem hit, bytes read, an open
        read_file(m.path(bid))
        s3 = Stats(m)
        check(s3.get('ucmfs_read_bytes_total') - s2.get('ucmfs_read_bytes_total') == n,
              'read_bytes moved by %d for a read of %d' % (
                  s3.get('ucmfs_read_bytes_total') - s2.get('ucmfs_read_bytes_total'), n))
        check(s3.get('ucmfs_opens_total') - s2.get('ucmfs_opens_total') == 1, 'opens moved by %d'
              % (s3.get('ucmfs_opens_total') - s2.get('ucmfs_opens_total')))
        check(s3.get('ucmfs_tier_hits_total', tier='mem') - s2.get('ucmfs_tier_hits_total',
                                                                   tier='mem') == 1,
              'mem hits moved by %d for one open' % (
                  s3.get('ucmfs_tier_hits_total', tier='mem') -
                  s2.get('ucmfs_tier_hits_total', tier='mem')))
        check(s3.get('ucmfs_tier_misses_total', tier='mem') ==
              s2.get('ucmfs_tier_misses_total', tier='mem'), 'a memory hit counted a miss')
        # an incomplete commit
        fd = os.open(m.path(rand_id()), os.O_WRONLY | os.O_CREAT)
        os.ftruncate(fd, 4096)
        expect_errno(errno.EIO, os.close, fd)
        s4 = Stats(m)
        check(s4.get('ucmfs_commits_total', result='incomplete') -
              s3.get('ucmfs_commits_total', result='incomplete') == 1,
              'an incomplete commit was not counted')
        check(s4.get('ucmfs_commits_total', result='ok') == s3.get('ucmfs_commits_total',
                                                                   result='ok'),
              'an incomplete commit counted as ok')
        # unlink: the resident gauges go down
        os.unlink(m.path(bid))
        s5 = Stats(m)
        check(s5.get('ucmfs_tier_blocks', tier='mem') == s4.get('ucmfs_tier_blocks', tier='mem')
              - 1, 'mem blocks after unlink')
        check(wait_until(lambda: Stats(m).get('ucmfs_tier_blocks', tier='disk') ==
                         s4.get('ucmfs_tier_blocks', tier='disk') - 1, 5),
              'disk blocks after unlink')


def test_counters_miss_and_load():
    with Mount('mem_size=64M') as m:
        n = 2 * MiB
        bid = rand_id()
        write_file(m.path(bid), pattern(n, 2))
        m.remount()    # the block is on disk only now
        s0 = Stats(m)
        read_file(m.path(bid))
        s1 = Stats(m)
        d = lambda name, **l: s1.get(name, **l) - s0.get(name, **l)
        check(d('ucmfs_tier_misses_total', tier='mem') == 1, 'mem misses moved by %d' % d(
            'ucmfs_tier_misses_total', tier='mem'))
        check(d('ucmfs_tier_hits_total', tier='disk') == 1, 'disk hits moved by %d' % d(
            'ucmfs_tier_hits_total', tier='disk'))
        check(d('ucmfs_loads_total') == 1, 'loads moved by %d' % d('ucmfs_loads_total'))
        check(d('ucmfs_load_seconds_count') == 1, 'load histogram count moved by %d' % d(
            'ucmfs_load_seconds_count'))
        check(d('ucmfs_load_seconds_sum') > 0, 'load histogram sum did not move')
        check(d('ucmfs_tier_bytes_out_total', tier='disk') > 0, 'disk bytes_out did not move')
        check(d('ucmfs_read_bytes_total') == n, 'read_bytes moved by %d' % d(
            'ucmfs_read_bytes_total'))
        check(s1.get('ucmfs_tier_blocks', tier='mem') == 1, 'the loaded block is not in memory')
        # a second read is a memory hit
        read_file(m.path(bid))
        s2 = Stats(m)
        check(s2.get('ucmfs_tier_hits_total', tier='mem') > s1.get('ucmfs_tier_hits_total',
                                                                   tier='mem'),
              'a re-read was not a memory hit')
        check(s2.get('ucmfs_loads_total') == s1.get('ucmfs_loads_total'), 'a re-read loaded')
        # queries: count and latency
        q = m.path('.ucm/query/q')
        with open(q, 'w') as f:
            f.write(bid + '\n' + rand_id())
        for a in ('prefix', 'hits', 'last'):
            os.getxattr(q, 'user.ucm.' + a)
        s3 = Stats(m)
        check(s3.get('ucmfs_queries_total') - s2.get('ucmfs_queries_total') == 3,
              'queries moved by %d for three answers' % (
                  s3.get('ucmfs_queries_total') - s2.get('ucmfs_queries_total')))
        check(s3.get('ucmfs_query_seconds_count') - s2.get('ucmfs_query_seconds_count') == 3,
              'query histogram moved by %d' % (s3.get('ucmfs_query_seconds_count') -
                                                s2.get('ucmfs_query_seconds_count')))


def test_gauges_evictions_expirations():
    with Mount('mem_size=8M') as m:
        s0 = Stats(m)
        check(s0.get('ucmfs_tier_capacity_bytes', tier='mem') == 8 * MiB,
              'mem capacity %d for mem_size=8M' % s0.get('ucmfs_tier_capacity_bytes', tier='mem'))
        # pins and reservations are gauges of what is open now
        a = rand_id()
        write_file(m.path(a), pattern(MiB, 1))
        with open(m.path(a), 'rb') as f:
            f.read(10)
            check(Stats(m).get('ucmfs_pins') == 1, 'pins with one reader: %d' % Stats(m).get(
                'ucmfs_pins'))
        # the kernel releases a closed file after close() returns: the pin goes soon after
        check(wait_until(lambda: Stats(m).get('ucmfs_pins') == 0, 5),
              'pins after the reader closed: %d' % Stats(m).get('ucmfs_pins'))
        with Peer() as w:
            w.open('f', m.path(rand_id()), os.O_WRONLY | os.O_CREAT)
            w.write('f', 1, 64 * KiB)
            check(Stats(m).get('ucmfs_reservations') == 1, 'reservations with one writer: %d'
                  % Stats(m).get('ucmfs_reservations'))
            w.close('f')
        check(Stats(m).get('ucmfs_reservations') == 0, 'reservations after the writer closed')
        # more than memory holds: blocks leave memory once on disk (evictions)
        for i in range(6):
            write_file(m.path(rand_id()), pattern(2 * MiB, 10 + i))
        check(wait_until(lambda: Stats(m).get('ucmfs_tier_evictions_total', tier='mem') > 0, 10),
              '12 MiB written into 8 MiB of memory, and no eviction counted')
        check(Stats(m).get('ucmfs_tier_bytes', tier='mem') <= 8 * MiB, 'memory over capacity')
        # a TTL: the expiration is counted once the block is reclaimed
        b = rand_id()
        write_file(m.path(b), b'x' * 100)
        os.setxattr(m.path(b), 'user.ucm.ttl', b'100')
        check(wait_until(lambda: not os.path.exists(m.path(b)), 5), 'no expiry')
        check(wait_until(lambda: Stats(m).get('ucmfs_tier_expirations_total') > 0, 10),
              'an expired block was never counted as an expiration')


def test_mem_bytes_out():
    """DESIGN.md section 4: bytes in/out per tier, so the memory tier's too (of the reads the
    daemon serves: passthrough=off)."""
    with Mount('mem_size=16M,passthrough=off') as m:
        n = MiB + 7
        bid = rand_id()
        write_file(m.path(bid), pattern(n, 3))
        s0 = Stats(m)
        check(s0.has('ucmfs_tier_bytes_out_total', tier='mem'),
              'no ucmfs_tier_bytes_out_total{tier="mem"}: bytes read from memory are not counted')
        read_file(m.path(bid))
        d = Stats(m).get('ucmfs_tier_bytes_out_total', tier='mem') - s0.get(
            'ucmfs_tier_bytes_out_total', tier='mem')
        check(d == n, 'mem bytes_out moved by %d for a read of %d' % (d, n))


def test_hits_are_reads():
    """A tier's hits and misses count what readers asked of it: writing blocks (and the
    daemon's own dumps of them to disk) is no hit, so the hit ratio means something."""
    with Mount('mem_size=16M') as m:
        s0 = Stats(m)
        ids = [rand_id() for _ in range(4)]
        for i, bid in enumerate(ids):
            write_file(m.path(bid), pattern(64 * KiB, i))
        check(wait_until(lambda: Stats(m).get('ucmfs_dumps_total') ==
                         s0.get('ucmfs_dumps_total') + 4, 10), 'the blocks were not dumped')
        s1 = Stats(m)
        for tier in ('mem', 'disk'):
            for name in ('ucmfs_tier_hits_total', 'ucmfs_tier_misses_total'):
                moved = s1.get(name, tier=tier) - s0.get(name, tier=tier)
                check(moved == 0, '%s{tier="%s"} moved by %d after 4 writes and no read' % (
                    name, tier, moved))
        for bid in ids[:3]:
            read_file(m.path(bid))
        moved = Stats(m).get('ucmfs_tier_hits_total', tier='mem') - s1.get(
            'ucmfs_tier_hits_total', tier='mem')
        check(moved == 3, 'mem hits moved by %d after 3 reads' % moved)


def read_ahead_kb(m):
    dev = os.stat(m.mnt).st_dev
    with open('/sys/class/bdi/%d:%d/read_ahead_kb' % (os.major(dev), os.minor(dev))) as f:
        return int(f.read())


def test_readahead_requests():
    """The mount's read-ahead window is readahead= (default 1M): a buffered read of a 16 MiB
    block whose pages are not cached arrives in 1 MiB requests, not the kernel's 128 KiB, and
    writes arrive in 1 MiB requests too (the request counters show it). Reads through the
    daemon: passthrough=off."""
    with Mount('mem_size=64M,passthrough=off') as m:
        check(read_ahead_kb(m) == 1024, 'read_ahead_kb is %d' % read_ahead_kb(m))
        bid, n = rand_id(), 16 * MiB
        s0 = Stats(m)
        # from page-aligned memory: an unaligned 1 MiB spans 257 pages, one more than a
        # request holds, and the kernel sends it as two
        buf = mmap.mmap(-1, n)
        buf[:] = pattern(n, 3)
        fd = os.open(m.path(bid), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for off in range(0, n, MiB):
                check(os.write(fd, memoryview(buf)[off:off + MiB]) == MiB, 'short write')
        finally:
            os.close(fd)
        buf.close()
        s1 = Stats(m)
        writes = s1.get('ucmfs_write_requests_total') - s0.get('ucmfs_write_requests_total')
        check(writes == 16, '%d WRITE requests for 16 MiB written by 1 MiB' % writes)
        fd = os.open(m.path(bid), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            got = []
            while True:
                b = os.read(fd, MiB)
                if not b:
                    break
                got.append(b)
        finally:
            os.close(fd)
        check(b''.join(got) == pattern(n, 3), 'the bytes read differ')
        s2 = Stats(m)
        reads = s2.get('ucmfs_read_requests_total') - s1.get('ucmfs_read_requests_total')
        moved = s2.get('ucmfs_read_bytes_total') - s1.get('ucmfs_read_bytes_total')
        check(moved == n, 'read_bytes moved by %d' % moved)
        check(reads <= 20, '%d READ requests for a buffered read of 16 MiB' % reads)
    with Mount('mem_size=64M,readahead=4M') as m:
        check(read_ahead_kb(m) == 4096, 'readahead=4M: read_ahead_kb is %d' % read_ahead_kb(m))


if __name__ == '__main__':
    run([test_promtool, test_promtool_memory_only, test_promtool_striped_and_odd_paths,
         test_families, test_counters_write_read, test_counters_miss_and_load,
         test_gauges_evictions_expirations, test_mem_bytes_out, test_hits_are_reads,
         test_readahead_requests])
