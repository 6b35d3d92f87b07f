#!/usr/bin/env python3
"""Topology files (-o topology=FILE, ucmfs(8) TOPOLOGIES): stores, pipes and peers that route
blocks by TTL or size, as a user mounts and uses them; and every kind of wrong file refused
with one line that names the node at fault."""
import errno
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (KiB, MiB, Mount, check, cmd, daemon_bin, daemon_env, expect_errno,
                     pattern, rand_id, read_file, run, same, wait_until, write_file)

PROMTOOL = shutil.which('promtool') or '/usr/bin/promtool'


def topo(m, tree, name='topology.json'):
    """Write tree as a topology file beside the mount; its path."""
    p = os.path.join(m.tmp, name)
    with open(p, 'w') as f:
        f.write(tree if isinstance(tree, str) else json.dumps(tree))
    return p


def ttl_peer(store, short='10s', mem='32M'):
    """Blocks that live less than `short` in memory only; the rest through the full chain."""
    return {'peer': {'route': 'ttl', 'bounds': [short], 'branches': [
        {'pipe': [{'tier': 'cache', 'mem_size': mem}]},
        {'pipe': ['cache', 'compress', {'tier': 'posix', 'path': store}]}]}}


def write_with_ttl(path, data, ttl, before):
    """Write a block and give it a TTL on the open file, before or after its bytes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        if before:
            os.setxattr(fd, 'user.ucm.ttl', ttl.encode())
        os.write(fd, data)
        if not before:
            os.setxattr(fd, 'user.ucm.ttl', ttl.encode())
    finally:
        os.close(fd)


def store_ids(store):
    """Ids of the block files under a STORE (any layout: 32-hex names)."""
    ids = set()
    for _, _, files in os.walk(store):
        ids.update(f for f in files if re.fullmatch(r'[0-9a-f]{32}', f))
    return ids


def tier_of(m, bid):
    return os.getxattr(m.path(bid), 'user.ucm.tier').decode()


def test_ttl_peer_keeps_short_blocks_off_disk():
    """The typical use: short-lived blocks stay in memory and never reach the STORE; the
    long-lived ones go to disk and come back after a remount."""
    m = Mount()
    with m:
        m.unmount()
        m.start('topology=' + topo(m, ttl_peer(m.store)))
        short = {rand_id(): pattern(MiB, i) for i in range(6)}
        long = {rand_id(): pattern(MiB, 100 + i) for i in range(6)}
        for i, (bid, data) in enumerate(short.items()):
            write_with_ttl(m.path(bid), data, '5s', before=i % 2 == 0)
        for i, (bid, data) in enumerate(long.items()):
            if i % 2:
                write_with_ttl(m.path(bid), data, '1h', before=i % 3 == 0)
            else:
                write_file(m.path(bid), data)
        for bid, data in list(short.items()) + list(long.items()):
            same(read_file(m.path(bid)), data, 'block %s read back' % bid[:8])
        for bid in short:
            check(tier_of(m, bid) == 'mem', 'short-lived %s is in %s' % (bid[:8], tier_of(m, bid)))
        check(set(long) <= set(os.listdir(m.mnt)) and set(short) <= set(os.listdir(m.mnt)),
              'ls does not show every block of both branches')
        # the long ones reach the disk (fsync of each), the short ones never
        for bid in long:
            fd = os.open(m.path(bid), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        on_disk = store_ids(m.store)
        check(set(long) <= on_disk, 'long-lived blocks missing from the STORE: %s' % sorted(
            set(long) - on_disk)[:3])
        check(not set(short) & on_disk, 'short-lived blocks reached the STORE: %s' % sorted(
            set(short) & on_disk)[:3])
        m.remount()
        for bid, data in long.items():
            same(read_file(m.path(bid)), data, 'long-lived %s after a remount' % bid[:8])
        for bid in short:
            check(not os.path.exists(m.path(bid)), 'short-lived %s survived a remount' % bid[:8])
        check(not set(short) & store_ids(m.store), 'short-lived blocks in the STORE at exit')


def test_short_blocks_expire():
    with Mount() as m:
        m.unmount()
        m.start('topology=' + topo(m, ttl_peer(m.store, short='10s')))
        bid = rand_id()
        write_with_ttl(m.path(bid), pattern(256 * KiB, 1), '400ms', before=False)
        check(os.path.exists(m.path(bid)), 'a block with a TTL of 400 ms is gone at once')
        check(wait_until(lambda: not os.path.exists(m.path(bid)), 10),
              'a block with a TTL of 400 ms is still there after 10 s')


def test_choice_stays_with_the_block():
    """A TTL set on a committed block, a replacement without a TTL and an unlink all go to
    the branch that holds the block."""
    with Mount() as m:
        m.unmount()
        m.start('topology=' + topo(m, ttl_peer(m.store)))
        bid = rand_id()
        write_file(m.path(bid), pattern(MiB, 1))
        # a short TTL given after the commit does not move it
        os.setxattr(m.path(bid), 'user.ucm.ttl', b'3s')
        left = int(os.getxattr(m.path(bid), 'user.ucm.ttl'))
        check(0 < left <= 3000, 'ttl reads %d after setting 3s' % left)
        fd = os.open(m.path(bid), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        check(bid in store_ids(m.store), 'the block left the disk branch when its TTL changed')
        os.setxattr(m.path(bid), 'user.ucm.ttl', b'none')
        # a short-lived block replaced by a long-lived one: one version, in the disk branch
        sid = rand_id()
        write_with_ttl(m.path(sid), pattern(MiB, 2), '5s', before=True)
        write_file(m.path(sid), pattern(MiB, 3), flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        same(read_file(m.path(sid)), pattern(MiB, 3), 'the replacement')
        check(m.blocks().count(sid) == 1, 'the replaced block is listed %d times' %
              m.blocks().count(sid))
        # unlink goes to the holder, in either branch
        os.unlink(m.path(bid))
        expect_errno(errno.ENOENT, os.stat, m.path(bid))
        short = rand_id()
        write_with_ttl(m.path(short), pattern(KiB, 4), '5s', before=True)
        os.unlink(m.path(short))
        expect_errno(errno.ENOENT, os.stat, m.path(short))
        check(bid not in m.blocks() and short not in m.blocks(), 'unlinked blocks still listed')
        m.remount()
        check(bid not in m.blocks(), 'an unlinked block came back after a remount')


def test_size_peer_two_stores():
    """Route by size: small blocks to one directory, large ones to another."""
    with Mount() as m:
        m.unmount()
        small_dir, large_dir = os.path.join(m.tmp, 'small'), os.path.join(m.tmp, 'large')
        tree = {'peer': {'route': 'size', 'bounds': ['1M'], 'branches': [
            {'pipe': ['cache', {'tier': 'posix', 'path': small_dir}]},
            {'store': {'tier': 'posix', 'path': large_dir}}]}}
        m.start('topology=%s,durable' % topo(m, tree))
        small = {rand_id(): pattern(n, n) for n in (1, 4 * KiB, MiB)}
        large = {rand_id(): pattern(n, n) for n in (MiB + 1, 3 * MiB)}
        for bid, data in list(small.items()) + list(large.items()):
            write_file(m.path(bid), data)
        check(store_ids(small_dir) == set(small), 'the small STORE holds %d of %d small blocks'
              ' and %d others' % (len(store_ids(small_dir) & set(small)), len(small),
                                  len(store_ids(small_dir) - set(small))))
        check(store_ids(large_dir) == set(large), 'the large STORE holds %s, expected %s' % (
            sorted(store_ids(large_dir)), sorted(large)))
        m.remount()
        for bid, data in list(small.items()) + list(large.items()):
            same(read_file(m.path(bid)), data, '%d-byte block after a remount' % len(data))


def test_queries_and_prefetch_span_branches():
    with Mount() as m:
        m.unmount()
        m.start('topology=' + topo(m, ttl_peer(m.store)))
        ids = []
        for i in range(6):
            bid = rand_id()
            if i % 2:
                write_with_ttl(m.path(bid), pattern(256 * KiB, i), '5s', before=True)
            else:
                write_file(m.path(bid), pattern(256 * KiB, i))
            ids.append(bid)
        q = m.path('.ucm/query/q')
        with open(q, 'w') as f:
            f.write('\n'.join(ids + [rand_id()]))
        prefix = int(os.getxattr(q, 'user.ucm.prefix'))
        hits = os.getxattr(q, 'user.ucm.hits').decode()
        check((prefix, hits) == (6, '1111110'), 'query over both branches: prefix %d, hits %s'
              % (prefix, hits))
        os.setxattr(q, 'user.ucm.prefetch', b'1')
        for i, bid in enumerate(ids):
            same(read_file(m.path(bid)), pattern(256 * KiB, i), 'block %d after a prefetch' % i)


def test_config_and_metrics():
    with Mount() as m:
        m.unmount()
        m.start('topology=' + topo(m, ttl_peer(m.store)))
        text = read_file(m.path('.ucm/config')).decode()
        for line in text.splitlines():
            check(re.fullmatch(r'[a-z_]+=.*', line), '/.ucm/config line is not key=value: %r'
                  % line)
        kv = dict(line.split('=', 1) for line in text.splitlines())
        check(kv.get('topology', '').endswith('topology.json'), 'topology=%r in /.ucm/config'
              % kv.get('topology'))
        want = ('peer(route=ttl bounds=10000ms; 0: pipe(cache mem_size=32M); '
                '1: pipe(cache > compress > posix path=%s))' % m.store)
        check(kv.get('tiers') == want, 'tiers=%r, expected %r' % (kv.get('tiers'), want))
        # a TTL before the bytes places the block at once; one after them moves it at close
        write_with_ttl(m.path(rand_id()), pattern(KiB, 1), '5s', before=True)
        write_with_ttl(m.path(rand_id()), pattern(KiB, 3), '5s', before=False)
        write_file(m.path(rand_id()), pattern(KiB, 2))
        stats = read_file(m.path('.ucm/stats')).decode()
        for b, n in (('0', 2), ('1', 1)):
            check(re.search(r'^ucmfs_peer_published_total\{branch="%s"\} %d$' % (b, n), stats,
                            re.M), 'ucmfs_peer_published_total of branch %s is not %d' % (b, n))
            check(re.search(r'^ucmfs_commits_total\{branch="%s",result="ok"\} %d$' % (b, n),
                            stats, re.M), 'ucmfs_commits_total of branch %s is not %d' % (b, n))
        check(re.search(r'^ucmfs_peer_moved_total 1$', stats, re.M),
              'one write had its TTL after its bytes and moved: %s' %
              re.findall(r'^ucmfs_peer_moved_total .*$', stats, re.M))
        if os.path.exists(PROMTOOL):
            r = cmd([PROMTOOL, 'check', 'metrics'], check_rc=False, input=stats)
            check(r.returncode == 0, 'promtool check metrics: %s' % (r.stdout + r.stderr)[:600])
        statvfs = os.statvfs(m.mnt)
        check(statvfs.f_blocks > 0, 'statfs of a topology mount shows no capacity')


def refused(m, opts, want, what, status=1):
    """ucmfs with these options exits with status (1: a file ucmfs cannot use; 2: a
    command line it cannot parse) before mounting, with one line on stderr that matches
    want."""
    r = subprocess.run([daemon_bin(), '-f', '-o', opts, m.store, m.mnt], env=daemon_env(),
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=30)
    err = r.stderr.decode(errors='replace').strip()
    check(r.returncode == status, '%s: exit status %d (stderr %r)' % (what, r.returncode, err))
    check(not os.path.ismount(m.mnt), '%s: mounted anyway' % what)
    lines = err.splitlines()
    check(lines and re.search(want, lines[-1]),
          '%s: stderr %r does not end with a line that says %r' % (what, err, want))


def test_wrong_files_refused():
    with Mount() as m:
        m.unmount()
        good_pipe = ['cache', {'tier': 'posix', 'path': m.store}]
        bad = [
            ('{"pipe": [', r'topology \S+: : line 1, column \d+: ', 'JSON cut short'),
            ('[]', r'a node is an object with one field', 'a list at the top'),
            ({'pipes': good_pipe}, r'unknown node "pipes" \(store, pipe, peer\)', 'unknown node'),
            ({'pipe': ['cache', {'tier': 'nosuch'}]},
             r'/pipe/1: unknown tier \'nosuch\' \(built in: cache, compress, posix',
             'unknown tier'),
            ({'pipe': [{'tier': 'cache', 'mem_sise': '1G'}]},
             r'/pipe/0: tier cache has no option "mem_sise"', 'misspelt option'),
            ({'pipe': [{'tier': 'cache', 'mem_size': 'lots'}]},
             r'/pipe/0: option \'mem_size\'', 'bad option value'),
            ({'pipe': [{'path': '/x'}]}, r'/pipe/0: field "tier"', 'stage without a tier'),
            ({'pipe': ['compress', 'cache', {'tier': 'posix', 'path': m.store}]},
             r'/pipe/1: the memory tier cache can only be the first', 'memory tier second'),
            ({'pipe': [{'tier': 'posix', 'path': m.store}, 'cache']},
             r'/pipe/0: the store posix can only be the last', 'store first'),
            ({'pipe': ['cache', 'compress']}, r'/pipe/1: compress passes blocks .* a store must '
             'follow', 'stage at the bottom'),
            ({'pipe': []}, r'/pipe: a pipe is a list of one or more stages', 'empty pipe'),
            ({'peer': {'route': 'ttl', 'bounds': ['1s'], 'branches': [{'pipe': ['cache']}]}},
             r'field "branches" is a list of 2 to \d+', 'peer of one branch'),
            ({'peer': {'route': 'ttl', 'bounds': [], 'branches': [{'pipe': ['cache']}] * 2}},
             r'field "bounds" is a list of 1 durations', 'bounds missing'),
            ({'peer': {'route': 'ttl', 'bounds': ['5s', '1s'], 'branches':
                       [{'pipe': ['cache']}] * 3}}, r'/peer/bounds/1: bounds must grow',
             'bounds falling'),
            ({'peer': {'route': 'ttl', 'bounds': ['soon'], 'branches':
                       [{'pipe': ['cache']}] * 2}}, r'/peer/bounds/0: \'soon\' is not a duration',
             'bound not a duration'),
            ({'peer': {'route': 'age', 'bounds': ['1s'], 'branches': [{'pipe': ['cache']}] * 2}},
             r'field "route": \'age\' is not a route \(ttl, size\)', 'unknown route'),
            ({'peer': {'route': 'ttl', 'bounds': ['1s'], 'branches': [
                {'pipe': ['cache']},
                {'peer': {'route': 'ttl', 'bounds': ['1s'], 'branches':
                          [{'pipe': ['cache']}] * 2}}]}},
             r'/peer/branches/1/peer: a branch of a peer is a store or a pipe',
             'peer in a peer'),
            ({'peer': {'route': 'ttl', 'bounds': ['1s'], 'branch': []}},
             r'a peer has no field "branch"', 'misspelt peer field'),
            ({'peer': {'route': 'size', 'bounds': ['1M'], 'branches': [
                {'store': {'tier': 'posix', 'path': m.store}},
                {'pipe': ['cache', {'tier': 'posix', 'path': m.store + '/'}]}]}},
             r'/peer/branches/1/pipe/1: directory \S+ is already the STORE of '
             r'/peer/branches/0/store', 'one directory for two stores'),
            ({'pipe': ['cache', {'tier': os.path.join(m.tmp, 'none.so')}]},
             r'/pipe/1: tier library \S+none.so: No such file', 'library missing'),
            ({'pipe': ['cache', {'tier': os.path.join(m.tmp, 'text.so')}]},
             r'/pipe/1: tier library \S+text.so cannot be loaded', 'not a library'),
            ({'pipe': ['cache', {'tier': '/lib/x86_64-linux-gnu/libz.so.1'}]},
             r'/pipe/1: tier library \S+ has no entry point ucmfs_tier_plugin\(\)',
             'a library that is not a tier'),
            ({'pipe': ['cache', {'tier': 'compress', 'compress': 'zstd'},
                       {'tier': 'posix', 'path': m.store, 'layout': 'ucm'}]},
             r'/pipe/1: the store below has layout=ucm, .* compress=zstd is not possible',
             'compression over a raw store'),
        ]
        with open(os.path.join(m.tmp, 'text.so'), 'w') as f:
            f.write('not a library\n')
        for tree, want, what in bad:
            if 'libz.so' in json.dumps(tree) and not os.path.exists(
                    '/lib/x86_64-linux-gnu/libz.so.1'):
                continue
            refused(m, 'topology=' + topo(m, tree), want, what)
        refused(m, 'topology=%s/missing.json' % m.tmp, r'topology \S+missing.json: .*No such '
                'file', 'missing file')
        refused(m, 'topology=%s,pipeline=cache' % topo(m, {'pipe': good_pipe}),
                r'\'topology\' and \'pipeline\' both', 'topology and pipeline', status=2)


def test_tier_library():
    """The example store, a library built beside the daemon, under a memory tier: blocks land
    in its directory, come back after a remount, and its usage shows as stage gauges."""
    lib = os.path.join(os.path.dirname(daemon_bin()), 'tiers', 'example', 'ucmfs-dirstore.so')
    check(os.path.exists(lib), 'no example tier library beside the daemon: %s' % lib)
    with Mount() as m:
        m.unmount()
        blocks = os.path.join(m.tmp, 'blocks')
        tree = {'pipe': [{'tier': 'cache', 'mem_size': '4M'}, {'tier': lib, 'path': blocks}]}
        m.start('topology=%s' % topo(m, tree))
        data = {rand_id(): pattern(n, n) for n in (1, 100 * KiB, 3 * MiB, 3 * MiB + 1)}
        for bid, d in data.items():
            write_file(m.path(bid), d, fsync=True)
        check(set(data) <= set(os.listdir(blocks)), 'the library store holds %s' %
              sorted(os.listdir(blocks)))
        stats = read_file(m.path('.ucm/stats')).decode()
        got = re.search(r'^ucmfs_stage_blocks\{stage="/pipe/1"\} (\S+)$', stats, re.M)
        check(got and float(got.group(1)) == len(data), 'ucmfs_stage_blocks of the library: %s'
              % (got.group(1) if got else 'missing'))
        m.remount()
        for bid, d in data.items():   # 4M of memory: most come back from the library
            same(read_file(m.path(bid)), d, '%d-byte block after a remount' % len(d))
        os.unlink(m.path(next(iter(data))))
        check(next(iter(data)) not in os.listdir(blocks), 'unlink left the file in the library')


def test_store_alone_and_shorthand_unchanged():
    """A store node alone serves like pipeline=posix; the shorthand is what it always was."""
    with Mount() as m:
        m.unmount()
        m.start('topology=' + topo(m, {'store': {'tier': 'posix', 'path': m.store}}))
        bid = rand_id()
        write_file(m.path(bid), pattern(2 * MiB, 7))
        check(tier_of(m, bid) == 'disk', 'a block of a store alone is in %s' % tier_of(m, bid))
        check(bid in store_ids(m.store), 'the block is not in the STORE')
        m.remount('pipeline=cache:compress:posix')
        same(read_file(m.path(bid)), pattern(2 * MiB, 7), 'the block through the shorthand')
        kv = dict(line.split('=', 1) for line in
                  read_file(m.path('.ucm/config')).decode().splitlines())
        check(kv.get('tiers') == 'pipe(cache > compress > posix)' and kv['topology'] == 'none',
              'shorthand shows tiers=%r topology=%r' % (kv.get('tiers'), kv.get('topology')))


def test_ucm_layout_store_keeps_raw_bytes():
    """A posix store with layout=ucm under a compress stage that names no codec holds each
    block as its raw bytes, one file per block; layout=ucm and compress=zstd given as options
    are the defaults of the stages, refused only where one stage gets both."""
    with Mount() as m:
        m.unmount()
        store = os.path.join(m.tmp, 'ucm')
        m.start('topology=' + topo(m, {'pipe': [
            'cache', 'compress', {'tier': 'posix', 'path': store, 'layout': 'ucm'}]}))
        bid, data = rand_id(), pattern(64 * KiB, 3) * 64   # zstd would shrink it 64 times
        write_file(m.path(bid), data, fsync=True)
        files = [os.path.join(d, f) for d, _, fs in os.walk(store) for f in fs if f == bid]
        check(len(files) == 1, 'files of the block in the STORE: %s' % files)
        with open(files[0], 'rb') as f:
            same(f.read(), data, 'the STORE file of a layout=ucm store')
        # the options are the stages' defaults: a store that says layout=native takes the
        # compress=zstd given beside layout=ucm; one that inherits layout=ucm refuses it
        m.unmount()
        native = os.path.join(m.tmp, 'native')
        m.start('layout=ucm,compress=zstd,topology=' + topo(m, {'pipe': [
            'cache', 'compress', {'tier': 'posix', 'path': native, 'layout': 'native'}]}))
        write_file(m.path(bid), data)

        def used():
            return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(native)
                       for f in fs if f.startswith(bid))
        wait_until(lambda: 0 < used() < len(data) // 2, 10)
        check(0 < used() < len(data) // 2, 'a layout=native store under compress=zstd holds '
              '%d bytes of a %d-byte block' % (used(), len(data)))
        same(read_file(m.path(bid)), data, 'the block compressed over a layout=native store')
        m.unmount()
        refused(m, 'layout=ucm,compress=zstd,topology=' + topo(m, {'pipe': [
            'cache', 'compress', {'tier': 'posix', 'path': store}]}),
            r'/pipe/1: the store below has layout=ucm, .* compress=zstd is not possible',
            'compress=zstd over a store that inherits layout=ucm')


run([test_ttl_peer_keeps_short_blocks_off_disk, test_short_blocks_expire,
     test_choice_stays_with_the_block, test_size_peer_two_stores,
     test_queries_and_prefetch_span_branches, test_config_and_metrics, test_wrong_files_refused,
     test_tier_library, test_store_alone_and_shorthand_unchanged,
     test_ucm_layout_store_keeps_raw_bytes])
