#!/usr/bin/env python3
"""The memory tier under pressure (DESIGN.md sections 3 and 5): `touch` keeps a block in
memory while the tier evicts everything around it, and a tier much smaller than the data
serves concurrent readers and writers byte-exact.

touch: DESIGN.md says that touch/utimensat refreshes recency and is how a shell user keeps a
block hot. It is checked with policy=lru and policy=clock (the default), both for a bare
utimensat (`touch -c`, os.utime) and for the shell's `touch BLOCK`, which also opens the block
for writing. policy=fifo is left out: its order is the order in which blocks became evictable,
which a touch does not change (tiers/cache_policy_lru.c), and man/ucmfs.8 says nothing of what
touch does under fifo, so there is no documented behaviour to assert.

Data is KV-like (kv_bytes of compress.py), so every block goes through the compress stage on
its way to disk and back.
"""
import inspect
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (MiB, SLOW, Mount, case, check, cmd, popen, rand_id, read_file, run,
                     same, write_file)
from compress import kv_bytes, stat_sum, xattr

HERE = os.path.dirname(os.path.abspath(__file__))


def tier(m, bid):
    return xattr(m.path(bid), 'user.ucm.tier')


def mem_gauge(m, name):
    """A gauge of the memory tier (label tier="mem") from /.ucm/stats."""
    with open(m.path('.ucm/stats')) as f:
        for line in f:
            if line.startswith(name + '{tier="mem"} '):
                return float(line.split()[-1])
    raise AssertionError('%s{tier="mem"} missing from /.ucm/stats' % name)


def stat_sum_labeled(m, name, label):
    """Sum of the samples of metric `name` whose labels contain `label`."""
    total = 0.0
    with open(m.path('.ucm/stats')) as f:
        for line in f:
            if line.startswith(name + '{') and label in line.split('}')[0]:
                total += float(line.split()[-1])
    return total


# --- touch keeps a block resident ---------------------------------------------------------

TOUCH_MEM = 8              # mem_size in MiB: eight 1 MiB blocks
TOUCH_ROUNDS = 40          # blocks written around the touched one: five times the memory


def refresh(path, how):
    if how == 'utimensat':
        os.utime(path)                 # utimensat(path, NULL): what `touch -c` does
    else:
        cmd(['touch', path])           # coreutils: open(O_WRONLY|O_CREAT), futimens, close


def check_touch_keeps_resident(policy, how):
    rng = random.Random(11)
    with Mount('mem_size=%dM,policy=%s' % (TOUCH_MEM, policy)) as m:
        hot = rand_id()
        hot_data = kv_bytes(MiB, 1)
        # fsync before close: each commit is on disk when close returns, so every block is
        # evictable at once and the memory tier is always full of candidates
        write_file(m.path(hot), hot_data, fsync=True)
        others = []
        for i in range(TOUCH_ROUNDS):
            refresh(m.path(hot), how)
            bid = rand_id()
            write_file(m.path(bid), kv_bytes(MiB, 100 + i), fsync=True)
            others.append((bid, 100 + i))
            # read two older blocks: most are only on disk, so each read loads one into
            # memory, which evicts another
            for old, seed in rng.sample(others, min(2, len(others))):
                same(read_file(m.path(old)), kv_bytes(MiB, seed), 'block %s' % old)
            t = tier(m, hot)
            check('mem' in t.split(','), 'policy=%s, %s: the touched block left memory after '
                  '%d blocks were written around it (user.ucm.tier %r)' % (
                      policy, how, i + 1, t))
        resident = [b for b, _ in others if 'mem' in tier(m, b).split(',')]
        check(len(resident) < TOUCH_MEM,
              'policy=%s: %d of the %d other blocks in memory with mem_size=%dM' % (
                  policy, len(resident), len(others), TOUCH_MEM))
        evicted = [b for b, _ in others if tier(m, b) == 'disk']
        check(len(evicted) >= TOUCH_ROUNDS - TOUCH_MEM,
              'policy=%s: only %d of %d blocks evicted to disk' % (
                  policy, len(evicted), len(others)))
        check(stat_sum(m, 'ucmfs_tier_evictions_total') >= TOUCH_ROUNDS - TOUCH_MEM,
              'policy=%s: ucmfs_tier_evictions_total did not count the evictions' % policy)
        same(read_file(m.path(hot)), hot_data, 'the touched block')


@case(timeout=90)
def test_utimensat_keeps_block_resident_lru():
    """policy=lru: a block whose times are set (utimensat, as `touch -c` does) between writes
    stays in memory (user.ucm.tier has mem) while 40 other blocks pass through an 8-block
    memory tier and go to disk."""
    check_touch_keeps_resident('lru', 'utimensat')


@case(timeout=90)
def test_utimensat_keeps_block_resident_clock():
    """The same with policy=clock, the default."""
    check_touch_keeps_resident('clock', 'utimensat')


@case(timeout=90)
def test_touch_command_keeps_block_resident_lru():
    """The same with the shell's `touch BLOCK`: coreutils opens the block O_WRONLY|O_CREAT,
    sets its times (futimens) and closes it."""
    check_touch_keeps_resident('lru', 'touch')


@case(timeout=90)
def test_touch_command_keeps_block_resident_clock():
    check_touch_keeps_resident('clock', 'touch')


# --- a small memory tier under concurrent readers and writers -----------------------------

STRESS_MEM = 16            # mem_size in MiB
STRESS_SET = 200 * MiB     # blocks written before the readers start
STRESS_SECS = 15           # how long readers and writers run together
BASES = 4                  # distinct KV buffers that block contents are cut from
BASE_SIZE = 8 * MiB

# Block contents: a 32-byte head that names the block (its id and a number), then bytes cut
# from one of BASES KV-like buffers at an offset of its own, so that no two blocks are alike
# at any offset (a block served with another's bytes, or a stale tail, shows), while every
# process can rebuild any block's bytes without storing them.
def content(bases, b):
    head = bytes.fromhex(b['id']) + b['n'].to_bytes(16, 'little')
    base = bases[b['base']]
    return (head + base[b['off']:b['off'] + b['size'] - len(head)])[:b['size']]


WORKER = r'''
import json, os, random, sys, time, mmap
sys.path.insert(0, sys.argv[3])
from compress import kv_bytes
''' + inspect.getsource(content) + r'''
spec = json.load(open(sys.argv[1]))
role, me = sys.argv[2].split(':')
me = int(me)
mnt, end = spec['mnt'], spec['end']
bases = [kv_bytes(spec['base_size'], 1000 + k) for k in range(spec['bases'])]
rng = random.Random(500 + me + (100 if role == 'w' else 0))
stats = {'reads': 0, 'shard_reads': 0, 'direct_reads': 0, 'writes': 0, 'bytes_read': 0,
         'new_blocks_read': 0, 'write_secs': 0}

def fail(msg):
    sys.stderr.write('%s%d: %s\n' % (role, me, msg))
    sys.stdout.write(json.dumps(stats) + '\n')
    sys.exit(1)

def first_diff(got, want):
    return next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
                min(len(got), len(want)))

def describe(b, got, exp, off):
    """What the wrong bytes are: where, how many, zeros or another block's, and whether
    they are still wrong when read again."""
    bad = [i for i in range(0, min(len(got), len(exp)), 4096)
           if got[i:i + 4096] != exp[i:i + 4096]]
    first = off + first_diff(got, exp)
    runs, start = [], None
    for k, i in enumerate(bad):
        if start is None:
            start = i
        if k + 1 == len(bad) or bad[k + 1] != i + 4096:
            runs.append('[%d, %d)' % (off + start, off + i + 4096))
            start = None
    what = 'zeros' if bad and not any(got[bad[0]:bad[0] + 4096]) else 'not zeros'
    for other in spec['blocks'] + new_blocks():
        if other['id'] != b['id'] and bad:
            o = content(bases, other)
            i = bad[0]
            if o[off + i:off + i + 4096] == got[i:i + 4096]:
                what = "block %s's bytes at the same offset" % other['id']
                break
    fd = os.open(os.path.join(mnt, b['id']), os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        again = b''.join(iter(lambda: os.read(fd, 1 << 20), b''))
    finally:
        os.close(fd)
    return ('first wrong byte at %d; wrong 4K pages in %s; they hold %s; read again '
            'buffered: %s' % (first, ' '.join(runs[:8]), what,
                              'right' if again == content(bases, b) else 'still wrong'))

def read_block(b, direct):
    """Read a whole block (O_DIRECT into an aligned buffer, or buffered after dropping its
    cached pages, so that the read reaches the daemon), or one random 128 KiB shard."""
    path = os.path.join(mnt, b['id'])
    want = content(bases, b)
    shard = rng.random() < 0.3
    off = rng.randrange(0, len(want), 128 << 10) if shard else 0
    length = min(128 << 10, len(want) - off) if shard else len(want)
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    try:
        if not direct:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if os.fstat(fd).st_size != len(want):
            fail('st_size of %s: %d, written %d' % (b['id'], os.fstat(fd).st_size, len(want)))
        out, pos = [], off
        buf = mmap.mmap(-1, 1 << 20) if direct else None
        while pos < off + length:
            n = min(1 << 20, off + length - pos)
            if direct:
                got = os.preadv(fd, [buf], pos)
                piece = buf[:min(got, n)]
            else:
                piece = os.pread(fd, n, pos)
            if not piece:
                break
            out.append(piece)
            pos += len(piece)
    finally:
        os.close(fd)
    got = b''.join(out)
    exp = want[off:off + length]
    if got != exp:
        fail('%s read of %s [%d, +%d) (%s block of %d bytes): %d bytes, %s'
             % ('O_DIRECT' if direct else 'buffered', b['id'], off, length,
                'new' if b['n'] >= 1000000 else 'first', len(want), len(got),
                describe(b, got, exp, off)))
    stats['reads'] += 1
    stats['shard_reads'] += shard
    stats['direct_reads'] += direct
    stats['bytes_read'] += len(got)

def new_blocks():
    """Blocks the writers have committed so far (a line is written after its close)."""
    out = []
    for w in range(spec['writers']):
        try:
            with open(spec['logs'][w]) as f:
                for line in f:
                    if line.endswith('\n'):
                        out.append(json.loads(line))
        except FileNotFoundError:
            pass
    return out

if role == 'r':
    blocks = spec['blocks']
    fresh = []
    i = 0
    while time.time() < end:
        if i % 20 == 0:
            fresh = new_blocks()
        if fresh and rng.random() < 0.25:
            read_block(rng.choice(fresh), direct=me % 2 == 0)
            stats['new_blocks_read'] += 1
        else:
            read_block(rng.choice(blocks), direct=me % 2 == 0)
        i += 1
else:
    n, start = 0, time.time()
    with open(spec['logs'][me], 'w') as log:
        while time.time() < end and n < spec['max_writes']:
            # spread the writes over the run, so that readers always have writers beside them
            time.sleep(max(0, start + n * spec['secs'] / spec['max_writes'] - time.time()))
            # 1-4 MiB in whole pages, and every fifth block of an odd size
            size = (rng.randrange(MIB, 4 * MIB + 1, 4096) if n % 5 else
                    MIB + rng.randrange(1, 4096))
            b = {'id': os.urandom(16).hex(), 'n': 1000000 * (me + 1) + n, 'size': size,
                 'base': rng.randrange(spec['bases']),
                 'off': rng.randrange(0, spec['base_size'] - size, 2)}
            data = content(bases, b)
            fd = os.open(os.path.join(mnt, b['id']), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                pos = 0
                while pos < len(data):
                    pos += os.write(fd, data[pos:pos + (1 << 20)])
            finally:
                os.close(fd)  # commits: an error here is a failed commit
            log.write(json.dumps(b) + '\n')
            log.flush()
            n += 1
            stats['writes'] += 1
            stats['write_secs'] = time.time() - start
print(json.dumps(stats))
'''.replace('MIB', str(MiB))


@case(timeout=150)
def test_small_memory_concurrent_readers_writers():
    """-o mem_size=16M with 200 MiB of 1-4 MiB KV blocks: 4 reader processes read whole
    blocks and 128 KiB shards (two with O_DIRECT, two buffered after dropping the file's
    pages) of the set and of the blocks being written, while 2 writer processes add new
    blocks. Every byte read is the byte written, no call fails, the memory tier never holds
    more than mem_size, every block reads back after the run, and the daemon exits 0."""
    rng = random.Random(3)
    spec = {'bases': BASES, 'base_size': BASE_SIZE, 'writers': 2,
            'max_writes': 120, 'secs': STRESS_SECS, 'blocks': []}
    bases = [kv_bytes(BASE_SIZE, 1000 + k) for k in range(BASES)]
    with Mount('mem_size=%dM' % STRESS_MEM) as m:
        total, n = 0, 0
        while total < STRESS_SET:
            size = (rng.randrange(MiB, 4 * MiB + 1, 4096) if n % 7 else
                    MiB + rng.randrange(1, 4096))
            b = {'id': rand_id(), 'n': n, 'size': size, 'base': rng.randrange(BASES),
                 'off': rng.randrange(0, BASE_SIZE - size, 2)}
            write_file(m.path(b['id']), content(bases, b))
            spec['blocks'].append(b)
            total += size
            n += 1
        spec['mnt'] = m.mnt
        spec['logs'] = [os.path.join(m.tmp, 'writer%d.jsonl' % w) for w in range(2)]
        spec['end'] = time.time() + STRESS_SECS
        path = os.path.join(m.tmp, 'spec.json')
        with open(path, 'w') as f:
            json.dump(spec, f)
        procs = [(role, popen([sys.executable, '-c', WORKER, path, role, HERE],
                              stdout=-1, stderr=-1, text=True))
                 for role in ['r:0', 'r:1', 'r:2', 'r:3', 'w:0', 'w:1']]
        # while they run: the memory tier stays within mem_size
        peak = 0
        while any(p.poll() is None for _, p in procs):
            used = mem_gauge(m, 'ucmfs_tier_bytes')
            peak = max(peak, used)
            check(used <= STRESS_MEM * MiB, 'the memory tier holds %d bytes with mem_size=%dM'
                  % (used, STRESS_MEM))
            time.sleep(0.2)
        errors, totals = [], {}
        for role, p in procs:
            out, err = p.communicate(timeout=60 * SLOW)
            if p.returncode != 0:
                errors.append('%s exited %d: %s' % (role, p.returncode, err.strip()[-600:]))
            for line in out.splitlines()[-1:]:
                for k, v in json.loads(line).items():
                    totals[k] = totals.get(k, 0) + v
        check(not errors, '; '.join(errors))
        check(totals.get('reads', 0) >= 20 and totals.get('writes', 0) >= 4,
              'too little work done to mean anything: %r' % totals)
        check(totals.get('new_blocks_read', 0) > 0, 'no reader read a new block: %r' % totals)
        # every block, old and new, reads back whole and exact after the run
        written = []
        for log in spec['logs']:
            with open(log) as f:
                written += [json.loads(line) for line in f]
        for b in spec['blocks'] + written:
            same(read_file(m.path(b['id'])), content(bases, b), 'block %s' % b['id'])
        check(len(m.blocks()) == len(spec['blocks']) + len(written),
              'listing: %d names for %d blocks' % (len(m.blocks()),
                                                  len(spec['blocks']) + len(written)))
        for metric in ('ucmfs_load_errors_total', 'ucmfs_dump_errors_total',
                       'ucmfs_checksum_failures_total'):
            check(stat_sum(m, metric) == 0, '%s is %r' % (metric, stat_sum(m, metric)))
        failed = stat_sum_labeled(m, 'ucmfs_commits_total', 'result="failed"')
        check(failed == 0, '%d commits failed' % failed)
        sys.stdout.write('# %d reads (%d shards, %d O_DIRECT, %d of new blocks), %d writes '
                         '(%.1f writer-seconds), %.0f MiB read, memory tier peak %.1f MiB\n' % (
                             totals['reads'], totals['shard_reads'], totals['direct_reads'],
                             totals['new_blocks_read'], totals['writes'], totals['write_secs'],
                             totals['bytes_read'] / MiB, peak / MiB))
    # Mount.__exit__ unmounts and checks that the daemon exits 0 with no sanitizer report


if __name__ == '__main__':
    run([test_utimensat_keeps_block_resident_lru, test_utimensat_keeps_block_resident_clock,
         test_touch_command_keeps_block_resident_lru,
         test_touch_command_keeps_block_resident_clock,
         test_small_memory_concurrent_readers_writers])
