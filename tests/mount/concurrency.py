#!/usr/bin/env python3
"""Eight processes writing and reading at once: their own ids, and the same ids written by
several writers with identical content (shared reservation). No reader may ever see a torn
block (DESIGN.md section 3, "Writing")."""
import errno
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (KiB, MiB, SLOW, Mount, Peer, case, check, expect_errno, pattern, popen,
                     rand_id, read_file, run, same)

NPROC = 8

# One worker: writes its own blocks and every shared block (in its own order, by pwrite in a
# shuffled chunk order), and between writes reads random blocks of anybody: each read is
# ENOENT (not committed yet) or the complete, exact block. Prints a JSON summary.
WORKER = r'''
import errno, json, os, random, sys
spec = json.load(open(sys.argv[1]))
me = int(sys.argv[2])
mnt = spec['mnt']
rng = random.Random(1000 + me)
every = {b['id']: b for b in spec['shared'] + [x for w in spec['own'] for x in w]}
stats = {'writes': 0, 'reads_ok': 0, 'reads_enoent': 0}

def content(b):
    return random.Random(b['seed']).randbytes(b['size'])

def fail(msg):
    sys.stderr.write('worker %d: %s\n' % (me, msg))
    sys.exit(1)

def write(b):
    data = content(b)
    chunk = 256 * 1024
    offs = list(range(0, len(data), chunk))
    rng.shuffle(offs)
    fd = os.open(os.path.join(mnt, b['id']), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for off in offs:
            piece = data[off:off + chunk]
            if os.pwrite(fd, piece, off) != len(piece):
                fail('short pwrite of %s' % b['id'])
    finally:
        try:
            os.close(fd)
        except OSError as e:
            fail('close of %s (every byte written) failed: %s' % (b['id'], e))
    stats['writes'] += 1

def read(b, must_exist=False):
    path = os.path.join(mnt, b['id'])
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        if must_exist:
            fail('%s missing after it was written' % b['id'])
        stats['reads_enoent'] += 1
        return
    try:
        size = os.fstat(fd).st_size
        out, off = [], 0
        while True:
            piece = os.pread(fd, 1 << 20, off)
            if not piece:
                break
            out.append(piece)
            off += len(piece)
    finally:
        os.close(fd)
    got = b''.join(out)
    want = content(b)
    if size != len(want) or got != want:
        bad = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), None)
        fail('torn read of %s: fstat %d, read %d bytes, expected %d, first bad byte %s'
             % (b['id'], size, len(got), len(want), bad))
    stats['reads_ok'] += 1

todo = [('w', b) for b in spec['own'][me]] + [('w', b) for b in spec['shared']]
rng.shuffle(todo)
ids = list(every)
own = set(b['id'] for b in spec['own'][me])
for kind, b in todo:
    write(b)
    # a shared block is published when its last writer closes, which may be later
    read(b, must_exist=b['id'] in own)
    for _ in range(3):
        read(every[rng.choice(ids)])
for b in spec['shared'] + spec['own'][me]:
    read(b, must_exist=b['id'] in own)
print(json.dumps(stats))
'''


def spec_for(m, rng, own_sizes, shared_sizes):
    seed = iter(range(1, 10000))
    own = [[{'id': rand_id(), 'size': rng.choice(own_sizes), 'seed': next(seed)}
            for _ in range(6)] for _ in range(NPROC)]
    shared = [{'id': rand_id(), 'size': n, 'seed': next(seed)} for n in shared_sizes]
    return {'mnt': m.mnt, 'own': own, 'shared': shared}


def run_workers(m, spec):
    path = os.path.join(m.tmp, 'spec.json')
    with open(path, 'w') as f:
        json.dump(spec, f)
    procs = [popen([sys.executable, '-c', WORKER, path, str(i)], stdout=-1, stderr=-1,
                   text=True) for i in range(NPROC)]
    errors, totals = [], {}
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=150 * SLOW)
        if p.returncode != 0:
            errors.append('worker %d exited %d: %s' % (i, p.returncode, err.strip()[-400:]))
        else:
            for k, v in json.loads(out).items():
                totals[k] = totals.get(k, 0) + v
    check(not errors, '; '.join(errors))
    every = spec['shared'] + [b for w in spec['own'] for b in w]
    check(m.blocks() == sorted(b['id'] for b in every),
          'listing: %d names for %d blocks' % (len(m.blocks()), len(every)))
    for b in every:
        same(read_file(m.path(b['id'])), pattern(b['size'], b['seed']), 'block %s' % b['id'])
    check(totals.get('reads_ok', 0) > 0, 'no concurrent read found a block: %r' % totals)
    return totals


@case(timeout=200)
def test_parallel_writers_and_readers():
    rng = random.Random(7)
    with Mount() as m:
        spec = spec_for(m, rng, [256 * KiB + 1, MiB, 2 * MiB - 3, 3 * MiB + 5],
                        [4 * MiB + 1, 2 * MiB, 6 * MiB - 1, 64 * KiB])
        run_workers(m, spec)


@case(timeout=200)
def test_parallel_with_small_memory():
    rng = random.Random(8)
    with Mount('mem_size=12M') as m:           # spills, evictions and loads under way
        spec = spec_for(m, rng, [512 * KiB, MiB + 1, 3 * MiB],
                        [5 * MiB + 1, 14 * MiB, 2 * MiB])
        run_workers(m, spec)
        m.remount()
        every = spec['shared'] + [b for w in spec['own'] for b in w]
        for b in every:
            same(read_file(m.path(b['id'])), pattern(b['size'], b['seed']),
                 'after remount: %s' % b['id'])


def test_shared_reservation():
    """Writers of one new id share a reservation: it is published at the last close, and
    each close says whether the block was complete at that moment."""
    n = 3 * MiB + 1
    half = n // 2
    data = pattern(n, 5)
    with Mount() as m, Peer() as a, Peer() as b, Peer() as c:
        # both write everything: the first close succeeds but publishes nothing yet
        bid = rand_id()
        a.open('f', m.path(bid), os.O_WRONLY | os.O_CREAT)
        b.open('f', m.path(bid), os.O_WRONLY | os.O_CREAT)
        a.write('f', 5, n)
        b.write('f', 5, n)
        a.close('f')
        expect_errno(errno.ENOENT, os.stat, m.path(bid))
        b.close('f')
        same(read_file(m.path(bid)), data, 'shared reservation written twice')

        # a declared size, each writer one half: a close before the block is complete
        # fails EIO, the last close publishes the whole block
        bid = rand_id()
        a.open('f', m.path(bid), os.O_WRONLY | os.O_CREAT)
        b.open('f', m.path(bid), os.O_WRONLY | os.O_CREAT)
        a.do('ftruncate', 'f', n)
        a.write_part('f', 5, n, 0, half)
        expect_errno(errno.EIO, a.close, 'f')
        expect_errno(errno.ENOENT, os.stat, m.path(bid))
        b.write_part('f', 5, n, half, n - half)
        b.close('f')
        same(read_file(m.path(bid)), data, 'block completed by the second writer')

        # three writers: published only when the third one closes
        bid = rand_id()
        for p in (a, b, c):
            p.open('f', m.path(bid), os.O_WRONLY | os.O_CREAT)
        a.write('f', 5, n)
        a.close('f')
        b.close('f')
        expect_errno(errno.ENOENT, os.stat, m.path(bid))
        check(bid not in m.blocks(), 'listed while a writer still holds it')
        c.close('f')
        same(read_file(m.path(bid)), data, 'published at the third writer\'s close')


if __name__ == '__main__':
    run([test_parallel_writers_and_readers, test_parallel_with_small_memory,
         test_shared_reservation])
