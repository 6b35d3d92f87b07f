#!/usr/bin/env python3
"""Soak test: readers and writers at a steady rate on one ucmfs mount for --minutes M, under
memory pressure (a small mem_size: blocks keep moving between memory and disk), disk
pressure (a small disk_size: disk eviction) and TTL churn (user.ucm.ttl set on writers'
descriptors, on committed blocks, and through lookup queries), with unlinks.

Every block's content follows from its id, so any block any reader finds can be checked
byte for byte. Expected failures are ENOENT (a block expired, evicted or removed between
the listing and the open) and, for a TTL set on a block that just went, ENOENT too; anything
else is an unexpected errno.

Every minute it prints the daemon's RSS, open fds (/proc/PID/fd) and threads, the workers'
operation and error counts, and the daemon's own counters. It fails (exit 1) if any read
returned wrong bytes, any operation failed with an unexpected errno, a block was
quarantined or failed its checksum, the daemon died or did not unmount cleanly, or RSS or
fds grew without bound: the last third of the samples against the middle third, with a
tolerance (RSS: 10% + 16 MiB on the median; fds: +16 and threads: +8 on the maximum).

    sudo python3 tests/soak.py --minutes 10          # the soak
    sudo python3 tests/soak.py --minutes 1           # a smoke run that proves it works

Environment: UCMFS_BIN (the daemon; default build/ucmfs), as for the mount tests.
Not part of a plain `meson test`.
"""
import argparse
import collections
import errno
import multiprocessing
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, 'mount'))
from compress import kv_bytes                                           # noqa: E402
from ucmtest import KiB, MiB, Mount, SLOW, errname, pattern             # noqa: E402

SIZES = [4 * KiB, 64 * KiB, 256 * KiB + 3, 700 * KiB, MiB, 2 * MiB + 5]
# counters each worker keeps in its slots of a shared array
C_WRITES, C_READS, C_PARTIAL, C_WRONG, C_UNEXPECTED, C_ENOENT, C_TTL, C_UNLINK, \
    C_QUERY, C_BYTES_R, C_BYTES_W, C_LATE = range(12)
NC = 12
NAMES = ['writes', 'reads', 'partial', 'WRONG', 'UNEXPECTED', 'enoent', 'ttl', 'unlink',
         'query', 'bytes_r', 'bytes_w', 'late']


def content(bid):
    """The bytes of block bid: its size, kind and bytes all follow from the id."""
    r = random.Random(bid)
    n = r.choice(SIZES)
    if r.random() < 0.5:
        return kv_bytes(n, int(bid[:12], 16))
    return r.randbytes(n)


def block_ids(worker, rnd):
    """An endless stream of fresh ids for a writer."""
    while True:
        yield '%02x%s' % (worker, rnd.randbytes(15).hex())


class Worker:
    def __init__(self, idx, counts, errlog):
        self.idx = idx
        self.counts = counts
        self.errlog = errlog

    def add(self, c, n=1):
        self.counts[self.idx * NC + c] += n

    def unexpected(self, what, e):
        self.add(C_UNEXPECTED)
        self.note('%s: %s (%s)' % (what, errname(e.errno), e))

    def note(self, text):
        with open(self.errlog, 'a') as f:
            f.write('worker %d %.3f %s\n' % (self.idx, time.monotonic(), text))


def paced(rate, stop):
    """Yield at `rate` per second until stop is set; count ticks that came late."""
    period = 1.0 / rate
    nxt = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        late = now - nxt > 1.0
        if nxt > now:
            time.sleep(nxt - now)
        yield late
        nxt = max(nxt + period, time.monotonic() - 1.0)


def writer_main(idx, mnt, rate, seed, counts, errlog, stop):
    w = Worker(idx, counts, errlog)
    rnd = random.Random(seed)
    ids = block_ids(idx, rnd)
    mine = collections.deque(maxlen=400)          # recent blocks of this writer
    for late in paced(rate, stop):
        if late:
            w.add(C_LATE)
        bid = next(ids)
        data = content(bid)
        path = os.path.join(mnt, bid)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        except OSError as e:
            w.unexpected('open for writing ' + bid, e)
            continue
        try:
            if rnd.random() < 0.5:
                os.ftruncate(fd, len(data))       # declared size, as engines do
            off = 0
            while off < len(data):
                off += os.pwrite(fd, data[off:off + MiB], off)
            w.add(C_BYTES_W, len(data))
            if rnd.random() < 0.3:                # a TTL on the writer's descriptor
                os.setxattr(fd, 'user.ucm.ttl', str(rnd.randrange(300, 8000)).encode())
                w.add(C_TTL)
        except OSError as e:
            w.unexpected('write ' + bid, e)
        try:
            os.close(fd)
            w.add(C_WRITES)
            mine.append(bid)
        except OSError as e:
            w.unexpected('close (commit) ' + bid, e)
        r = rnd.random()
        if r < 0.15 and mine:                     # retime a recent block (or clear its TTL)
            b = rnd.choice(mine)
            val = rnd.choice([b'0', b'none', str(rnd.randrange(200, 6000)).encode()])
            try:
                os.setxattr(os.path.join(mnt, b), 'user.ucm.ttl', val)
                w.add(C_TTL)
            except OSError as e:
                if e.errno == errno.ENOENT:
                    w.add(C_ENOENT)
                else:
                    w.unexpected('setxattr user.ucm.ttl ' + b, e)
        elif r < 0.22 and mine:                   # rm of a recent block
            b = mine.pop()
            try:
                os.unlink(os.path.join(mnt, b))
                w.add(C_UNLINK)
            except OSError as e:
                if e.errno == errno.ENOENT:
                    w.add(C_ENOENT)
                else:
                    w.unexpected('unlink ' + b, e)
        elif r < 0.27 and mine:                   # a prefix query, and a TTL extension
            sample = rnd.sample(list(mine), min(len(mine), 50))
            q = os.path.join(mnt, '.ucm', 'query', 'w%d' % idx)
            try:
                with open(q, 'w') as f:
                    f.write('\n'.join(sample))
                hits = os.getxattr(q, 'user.ucm.hits').decode()
                if len(hits) != len(sample) or set(hits) - {'0', '1'}:
                    w.add(C_WRONG)
                    w.note('query: %d ids, hits %r' % (len(sample), hits))
                if rnd.random() < 0.5:
                    os.setxattr(q, 'user.ucm.ttl', b'3000')
                    w.add(C_TTL)
                os.unlink(q)
                w.add(C_QUERY)
            except OSError as e:
                w.unexpected('query', e)


def reader_main(idx, mnt, rate, seed, counts, errlog, stop):
    w = Worker(idx, counts, errlog)
    rnd = random.Random(seed)
    names, listed_at = [], 0.0
    cache = collections.OrderedDict()            # id -> expected bytes (a few)
    for late in paced(rate, stop):
        if late:
            w.add(C_LATE)
        if time.monotonic() - listed_at > 1.0 or not names:
            try:
                names = [n for n in os.listdir(mnt) if len(n) == 32]
            except OSError as e:
                w.unexpected('readdir', e)
                continue
            listed_at = time.monotonic()
            if not names:
                continue
        bid = rnd.choice(names)
        want = cache.get(bid)
        if want is None:
            want = content(bid)
            cache[bid] = want
            if len(cache) > 16:
                cache.popitem(last=False)
        path = os.path.join(mnt, bid)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            if e.errno == errno.ENOENT:
                w.add(C_ENOENT)
            else:
                w.unexpected('open ' + bid, e)
            continue
        try:
            if rnd.random() < 0.3 and len(want) > 1:
                # one shard of it, at a random offset
                off = rnd.randrange(len(want))
                n = rnd.randrange(1, min(len(want) - off, 300 * KiB) + 1)
                got = os.pread(fd, n, off)
                if got != want[off:off + n]:
                    w.add(C_WRONG)
                    w.note('WRONG bytes: %s [%d, +%d) of %d' % (bid, off, n, len(want)))
                w.add(C_PARTIAL)
                w.add(C_BYTES_R, len(got))
            else:
                parts, off = [], 0
                while True:
                    b = os.pread(fd, MiB, off)
                    if not b:
                        break
                    parts.append(b)
                    off += len(b)
                got = b''.join(parts)
                if got != want:
                    w.add(C_WRONG)
                    w.note('WRONG bytes: %s, %d read, %d expected' % (bid, len(got), len(want)))
                w.add(C_READS)
                w.add(C_BYTES_R, len(got))
        except OSError as e:
            w.unexpected('read ' + bid, e)
        finally:
            os.close(fd)


# --- the daemon's side --------------------------------------------------------------------

def proc_sample(pid):
    """(rss bytes, open fds, threads) of a process."""
    rss = threads = 0
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith('VmRSS:'):
                rss = int(line.split()[1]) * 1024
            elif line.startswith('Threads:'):
                threads = int(line.split()[1])
    return rss, len(os.listdir('/proc/%d/fd' % pid)), threads


def stats(m):
    """{name: sum over label sets} of /.ucm/stats, plus name{tier=...} per tier."""
    out = collections.defaultdict(float)
    with open(m.path('.ucm/stats')) as f:
        for line in f:
            if line.startswith('#') or not line.strip():
                continue
            key, _, val = line.rpartition(' ')
            name = key.split('{')[0]
            out[name] += float(val)
            for tier in ('mem', 'disk'):
                if 'tier="%s"' % tier in key:
                    out['%s{%s}' % (name, tier)] += float(val)
    return out


DAEMON_COLS = [
    ('commits', 'ucmfs_commits_total'),
    ('mem_blk', 'ucmfs_tier_blocks{mem}'),
    ('disk_blk', 'ucmfs_tier_blocks{disk}'),
    ('mem_MiB', 'ucmfs_tier_bytes{mem}'),
    ('disk_MiB', 'ucmfs_tier_bytes{disk}'),
    ('ev_mem', 'ucmfs_tier_evictions_total{mem}'),
    ('ev_disk', 'ucmfs_tier_evictions_total{disk}'),
    ('exp_mem', 'ucmfs_tier_expirations_total{mem}'),
    ('exp_disk', 'ucmfs_tier_expirations_total{disk}'),
    ('loads', 'ucmfs_loads_total'),
    ('pins', 'ucmfs_pins'),
    ('resv', 'ucmfs_reservations'),
    ('dirty', 'ucmfs_mem_dirty_blocks'),
]
BAD_COUNTERS = ['ucmfs_quarantined_total', 'ucmfs_checksum_failures_total',
                'ucmfs_load_errors_total', 'ucmfs_dump_errors_total']


def fmt(name, v):
    if name.endswith('MiB'):
        return '%.0f' % (v / MiB)
    return '%d' % v


def grows(samples, what, rel, absolute, use_max=False):
    """Compare the last third of the samples with the middle third. None or a message."""
    n = len(samples)
    if n < 6:
        return None
    mid, last = samples[n // 3:2 * n // 3], samples[2 * n // 3:]
    a = max(mid) if use_max else statistics.median(mid)
    b = max(last) if use_max else statistics.median(last)
    if b > a * (1 + rel) + absolute:
        return '%s grows: %s %.1f in the middle third, %.1f in the last third (tolerance ' \
               '%d%% + %g)' % (what, 'max' if use_max else 'median', a, b, rel * 100, absolute)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--minutes', type=float, default=10)
    ap.add_argument('--writers', type=int, default=2)
    ap.add_argument('--readers', type=int, default=2)
    ap.add_argument('--write-rate', type=float, default=6, help='blocks/s per writer')
    ap.add_argument('--read-rate', type=float, default=15, help='reads/s per reader')
    ap.add_argument('--opts', default='mem_size=16M,disk_size=96M',
                    help='ucmfs -o options (default: %(default)s)')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--sample', type=float, default=5, help='seconds between samples')
    args = ap.parse_args()
    seed = args.seed or random.SystemRandom().randrange(1, 1 << 31)
    duration = args.minutes * 60
    if not os.path.exists('/dev/fuse'):
        print('SKIP: /dev/fuse is missing')
        return 77
    print('# soak: %.1f min, -o %s, %d writers x %g/s, %d readers x %g/s, seed %d' % (
        args.minutes, args.opts, args.writers, args.write_rate, args.readers, args.read_rate,
        seed), flush=True)
    nw = args.writers + args.readers
    counts = multiprocessing.Array('q', nw * NC, lock=False)
    stop = multiprocessing.Event()
    failures = []
    m = Mount(args.opts)
    errlog = os.path.join(m.tmp, 'errors.log')
    procs = []
    rss, fds, thrs = [], [], []
    t_start = time.monotonic()
    try:
        m.start()
        pid = m.proc.pid
        ctx = multiprocessing.get_context('fork')
        for i in range(nw):
            fn = writer_main if i < args.writers else reader_main
            rate = args.write_rate if i < args.writers else args.read_rate
            p = ctx.Process(target=fn, args=(i, m.mnt, rate, seed * 100 + i, counts, errlog,
                                             stop), daemon=True)
            p.start()
            procs.append(p)
        cols = ['min', 'rss_MiB', 'fds', 'thr'] + \
            ['writes', 'reads', 'partial', 'WRONG', 'UNEXP', 'enoent', 'ttl', 'unlink'] + \
            [c for c, _ in DAEMON_COLS] + ['bad']
        print(' '.join('%8s' % c for c in cols), flush=True)
        next_sample = t_start
        next_print = t_start + 60
        while True:
            now = time.monotonic()
            if now >= next_sample:
                if not m.alive():
                    failures.append('the daemon died: %s' % m.log_text()[-800:])
                    break
                r, f, thr = proc_sample(pid)
                rss.append(r / MiB)
                fds.append(f)
                thrs.append(thr)
                next_sample += args.sample
            done = now - t_start >= duration
            if now >= next_print or done:
                tot = [sum(counts[w * NC + c] for w in range(nw)) for c in range(NC)]
                st = stats(m)
                bad = sum(st[c] for c in BAD_COUNTERS)
                row = ['%.1f' % ((now - t_start) / 60), '%.1f' % (r / MiB), f, thr] + \
                    [tot[C_WRITES], tot[C_READS], tot[C_PARTIAL], tot[C_WRONG],
                     tot[C_UNEXPECTED], tot[C_ENOENT], tot[C_TTL], tot[C_UNLINK]] + \
                    [fmt(c, st[k]) for c, k in DAEMON_COLS] + ['%d' % bad]
                print(' '.join('%8s' % x for x in row), flush=True)
                next_print += 60
                if any(not p.is_alive() for p in procs):
                    failures.append('a worker process died')
                    break
            if done:
                break
            time.sleep(min(0.2, max(0.0, min(next_sample, next_print) - time.monotonic())))
        stop.set()
        for p in procs:
            p.join(timeout=60 * SLOW)
            if p.is_alive():
                failures.append('worker %d did not stop (stuck in a request?)' % procs.index(p))
                p.kill()
        tot = [sum(counts[w * NC + c] for w in range(nw)) for c in range(NC)]
        st = stats(m) if m.alive() else collections.defaultdict(float)
        elapsed = time.monotonic() - t_start
        print('# totals: %s' % ', '.join('%s %d' % (NAMES[c], tot[c]) for c in range(NC)))
        print('# rates: %.1f writes/s, %.1f reads/s, %.1f MB/s written, %.1f MB/s read' % (
            tot[C_WRITES] / elapsed, (tot[C_READS] + tot[C_PARTIAL]) / elapsed,
            tot[C_BYTES_W] / elapsed / 1e6, tot[C_BYTES_R] / elapsed / 1e6))
        print('# daemon: %s' % ', '.join('%s %g' % (k, st[k]) for k in [
            'ucmfs_commits_total', 'ucmfs_tier_evictions_total{mem}',
            'ucmfs_tier_evictions_total{disk}', 'ucmfs_tier_expirations_total{mem}',
            'ucmfs_tier_expirations_total{disk}', 'ucmfs_loads_total', 'ucmfs_dumps_total',
            'ucmfs_spills_total', 'ucmfs_streamed_opens_total'] + BAD_COUNTERS))
        n = len(rss)
        print('# rss MiB: min %.1f, max %.1f, median of the middle third %.1f, of the last '
              'third %.1f; fds: min %d, max %d; threads: min %d, max %d' % (
                  min(rss), max(rss), statistics.median(rss[n // 3:2 * n // 3] or rss),
                  statistics.median(rss[2 * n // 3:] or rss), min(fds), max(fds), min(thrs),
                  max(thrs)))
        if tot[C_WRONG]:
            failures.append('%d reads returned WRONG bytes' % tot[C_WRONG])
        if tot[C_UNEXPECTED]:
            failures.append('%d operations failed with an unexpected errno' %
                            tot[C_UNEXPECTED])
        for c in BAD_COUNTERS:
            if st[c]:
                failures.append('%s = %g' % (c, st[c]))
        if tot[C_WRITES] == 0 or tot[C_READS] == 0:
            failures.append('no progress: %d writes, %d reads' % (tot[C_WRITES], tot[C_READS]))
        for msg in (grows(rss, 'RSS (MiB)', 0.10, 16), grows(fds, 'open fds', 0, 16, True),
                    grows(thrs, 'threads', 0, 8, True)):
            if msg:
                failures.append(msg)
        if os.path.exists(errlog):
            lines = open(errlog).read().splitlines()
            for line in lines[:10]:
                print('# error: ' + line)
            if len(lines) > 10:
                print('# ... %d more in %s' % (len(lines) - 10, errlog))
        t = time.monotonic()
        m.unmount()                      # must exit 0, no sanitizer report
        print('# clean unmount in %.1fs' % (time.monotonic() - t))
    except AssertionError as e:
        failures.append(str(e))
    finally:
        stop.set()
        for p in procs:
            if p.is_alive():
                p.kill()
        if failures:
            os.environ['UCMFS_TEST_KEEP'] = '1'
        m.cleanup()
    if failures:
        for f in failures:
            print('FAIL: ' + f)
        print('# kept: %s' % m.tmp)
        return 1
    print('ok soak %.1f min' % args.minutes)
    return 0


if __name__ == '__main__':
    sys.exit(main())
