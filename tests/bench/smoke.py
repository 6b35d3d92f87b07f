#!/usr/bin/env python3
"""Smoke test of ucm-bench: a --quick run with tiny sizes prints every figure, sanely.

A benchmark check, not a timed test: it asserts that every figure row is there with a
numeric value, a numeric floor and a positive ratio, that the JSON and the table agree, and
that a few relations that hold on any machine hold (p99 >= p50, shuffled zstd beats plain
zstd on KV-like data, a peer by TTL writes about half the disk bytes of one chain when half
the blocks live 5 s), never a speed.

usage: smoke.py UCM_BENCH UCMFS NULLFS
Exit 77 (skip) only when FUSE cannot be used here (no usable /dev/fuse or fusermount3).
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

# every figure ucm-bench prints (one row each; the size rows once per --block)
FIGURES = [
    'write.blocks_per_s', 'write.gbps', 'write.to_disk_gbps',
    'hot.direct_first', 'hot.direct_reread', 'hot.buffered_first', 'hot.buffered_reread',
    'cold.direct', 'cold.buffered', 'cold.shard_128k', 'cold.shard_512k',
    'disk.stored_ratio',
    'peer.write', 'peer.write_durable', 'peer.hot_read', 'peer.cold_read', 'peer.cold_direct',
    'lookup.stat', 'lookup.query', 'lookup.query_answer',
    'meta.create', 'meta.readdir', 'meta.peak_rss', 'peer.create', 'peer.readdir',
    'mixed.gbps', 'mixed.read_p50', 'mixed.read_p99', 'mixed.write_p50', 'mixed.write_p99',
    'floor.nullfs_read_direct', 'floor.nullfs_read_buffered', 'floor.nullfs_write',
    'floor.pagecache_reread', 'floor.zstd_ratio_plain', 'floor.zstd_ratio_shuffle2',
    'floor.zstd_compress_plain', 'floor.zstd_decompress_plain',
    'floor.zstd_compress_shuffle2', 'floor.zstd_decompress_shuffle2',
    'hitrate.clock', 'hitrate.lru', 'hitrate.fifo',
    'hitrate.sim_clock', 'hitrate.sim_lru', 'hitrate.sim_fifo',
    'mount.cold', 'mount.warm', 'mount.crash.cold', 'mount.crash.warm',
    'routing.disk_bytes', 'routing.write_durable',
    'prefetch.fresh', 'prefetch.warm', 'prefetch.readers', 'prefetch.zstd',
    'prefetch.ready_s', 'prefetch.at_once',
]
# --writes-only: the two alternated rounds of writes until on disk, per size
WRITES_ONLY = ['peer.write_durable.1', 'peer.write_durable.2']

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)


def finite_positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def main():
    bench, ucmfs, nullfs = sys.argv[1:4]
    if not os.access('/dev/fuse', os.R_OK | os.W_OK) or not shutil.which('fusermount3'):
        print('skip: FUSE is not usable here (/dev/fuse or fusermount3 missing)')
        return 77
    # the bench's temporary STORE goes beside the build (not /tmp, which may be tmpfs)
    work = tempfile.mkdtemp(prefix='bench-smoke.', dir=os.getcwd())
    try:
        js = os.path.join(work, 'bench.json')
        cmd = [bench, '--quick', '--block', '1M', '--blocks', '8', '--meta', '300',
               '--time', '1', '--threads', '2', '--ucmfs', ucmfs, '--nullfs', nullfs,
               '--dir', work, '--json', js]
        print('$', ' '.join(cmd), flush=True)
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=300)
        sys.stdout.write(p.stdout)
        sys.stdout.write(p.stderr)
        if p.returncode == 2 and 'tmpfs' in p.stderr:
            print('skip: the build directory is on tmpfs; ucm-bench needs a disk')
            return 77
        check(p.returncode == 0, 'ucm-bench exited with %d' % p.returncode)
        if not os.path.exists(js):
            print('FAIL: no JSON written')
            return 1
        with open(js) as f:
            doc = json.load(f)
        rows = doc['rows']
        byid = {}
        for r in rows:
            byid.setdefault(r['id'], []).append(r)
        for fid in FIGURES:
            check(fid in byid, 'figure %s missing' % fid)
        table = p.stdout.splitlines()
        for r in rows:
            name = '%s (%s)' % (r['id'], r['figure'])
            check(finite_positive(r['value']), '%s: value %r' % (name, r['value']))
            check(finite_positive(r['floor_value']), '%s: floor %r' % (name, r['floor_value']))
            check(finite_positive(r['ratio']), '%s: ratio %r' % (name, r['ratio']))
            check(r['unit'] and r['floor'], '%s: unit or floor name empty' % name)
            # the table has the same row: figure, then numbers, the last being the ratio
            lines = [l for l in table if l.startswith(r['figure'] + ' ')]
            check(len(lines) >= 1, '%s: not in the printed table' % name)
            for l in lines[:1]:
                words = [w for w in l.split() if not w.startswith('[')]
                try:
                    ratio = float(words[-1])
                except ValueError:
                    ratio = -1
                check(ratio > 0, '%s: table ratio %r' % (name, words[-1]))
            if r['unit'] == 'GB/s':
                # a timing bug shows as absurd rates: nothing here moves a petabyte a second
                check(r['value'] < 1e6, '%s: absurd rate %r GB/s' % (name, r['value']))

        def val(fid):
            return byid[fid][0]['value'] if fid in byid else None

        for kind in ('read', 'write'):
            p50, p99 = val('mixed.%s_p50' % kind), val('mixed.%s_p99' % kind)
            if finite_positive(p50) and finite_positive(p99):
                check(p99 >= p50, 'mixed %s: p99 %r < p50 %r' % (kind, p99, p50))
        plain, shuf = val('floor.zstd_ratio_plain'), val('floor.zstd_ratio_shuffle2')
        if finite_positive(plain) and finite_positive(shuf):
            # KV-like data (tools/kvgen.c): ~1.2 plain, ~1.4 shuffled, as DESIGN.md measured
            check(1.05 < plain < 1.5, 'zstd ratio on KV-like data %r (want ~1.2)' % plain)
            check(shuf > plain, 'shuffled zstd ratio %r <= plain %r' % (shuf, plain))
        routed = byid.get('routing.disk_bytes', [{}])[0].get('ratio')
        if finite_positive(routed):
            # half the blocks have a 5 s TTL and the peer keeps those in memory alone: the one
            # chain writes every block to disk, the peer about half of them (as stored)
            check(1.5 < routed < 2.5, 'routing: the one chain wrote %r times the disk bytes '
                  'of the peer by TTL (want ~2)' % routed)
        for r in rows:
            # Belady's OPT is the best hit ratio any policy can reach on the same trace and
            # capacity: a policy above it means a miscounted hit or a miscounted capacity
            if r['id'].startswith('hitrate.') and finite_positive(r['ratio']):
                check(r['value'] <= 100 and r['ratio'] <= 1 + 1e-9,
                      '%s: hit ratio %r%% above Belady\'s %r%%' % (
                          r['id'], r['value'], r['floor_value']))
        # the writes-only mode prints its own rows only, each against its own plain-dir round
        js2 = os.path.join(work, 'writes.json')
        cmd = [bench, '--writes-only', '--block', '1M', '--blocks', '4', '--ucmfs', ucmfs,
               '--nullfs', nullfs, '--dir', work, '--json', js2]
        print('$', ' '.join(cmd), flush=True)
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120)
        sys.stdout.write(p.stdout)
        sys.stdout.write(p.stderr)
        check(p.returncode == 0, 'ucm-bench --writes-only exited with %d' % p.returncode)
        if os.path.exists(js2):
            with open(js2) as f:
                wrows = json.load(f)['rows']
            check(sorted(r['id'] for r in wrows) == WRITES_ONLY,
                  '--writes-only rows %r, want %r' % ([r['id'] for r in wrows], WRITES_ONLY))
            for r in wrows:
                check(finite_positive(r['value']) and finite_positive(r['floor_value']),
                      '--writes-only %s: value %r floor %r' % (
                          r['id'], r['value'], r['floor_value']))
        else:
            check(False, '--writes-only wrote no JSON')
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for f in FAILURES:
        print('FAIL:', f)
    if FAILURES:
        return 1
    print('ok: %d rows, every figure with a floor and a positive ratio' % len(rows))
    return 0


if __name__ == '__main__':
    sys.exit(main())
