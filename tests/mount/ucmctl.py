#!/usr/bin/env python3
"""ucmctl (man/ucmctl.1) on real mounts: stat, top, ls, lookup, prefetch, and verify of an
unmounted store with blocks damaged on purpose."""
import errno
import os
import pty
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (KiB, MiB, SLOW, Mount, check, daemon_bin, flip, pattern, popen,
                     rand_id, read_file, run, wait_until, write_file)


def ucmctl_bin():
    b = os.environ.get('UCMCTL_BIN') or os.path.join(
        os.path.dirname(os.path.abspath(daemon_bin())), 'ucmctl')
    check(os.path.exists(b), 'ucmctl not found beside the daemon: %s' % b)
    return b


def ucmctl(*args, rc=0, stdin=None, timeout=60):
    """Run ucmctl; its exit status must be rc. Returns (stdout, stderr)."""
    r = subprocess.run([ucmctl_bin()] + [str(a) for a in args], input=stdin,
                       capture_output=True, text=True, timeout=timeout * SLOW,
                       env=dict(os.environ, LC_ALL='C'))
    check(r.returncode == rc, 'ucmctl %s exited %d (expected %d): %s' % (
        ' '.join(map(str, args))[:200], r.returncode, rc, (r.stderr or r.stdout).strip()[-600:]))
    return r.stdout, r.stderr


def on_tty(*args, timeout=60, tty_stdout=False):
    """Run ucmctl with stderr (and stdout if tty_stdout) on a pseudo-terminal. Returns
    (status, stdout, terminal text)."""
    master, slave = pty.openpty()
    p = popen([ucmctl_bin()] + [str(a) for a in args], stdin=subprocess.DEVNULL,
              stdout=slave if tty_stdout else subprocess.PIPE, stderr=slave)
    os.close(slave)
    out, tty = b'', b''
    end = time.monotonic() + timeout * SLOW
    while True:
        fds = [master] + ([p.stdout] if p.stdout else [])
        ready, _, _ = select.select(fds, [], [], max(0, end - time.monotonic()))
        check(ready, 'ucmctl %s did not finish in %gs' % (args[0], timeout * SLOW))
        if p.stdout in ready:
            out += os.read(p.stdout.fileno(), 65536)
        if master in ready:
            try:
                b = os.read(master, 65536)
            except OSError:       # EIO: the last holder of the terminal is gone
                b = b''
            if not b:
                break
            tty += b
    os.close(master)
    if p.stdout:
        out += p.stdout.read()
    return p.wait(timeout=10 * SLOW), out.decode(), tty.decode(errors='replace')


def table(text, first):
    """Rows of a table printed by ucmctl whose first column is one of `first`."""
    rows = {}
    for line in text.splitlines():
        w = line.split()
        if w and w[0] in first and w[0] not in rows:
            rows[w[0]] = w
    return rows


def put_blocks(m, n, size=256 * KiB, seed=0):
    ids = [rand_id() for _ in range(n)]
    for i, bid in enumerate(ids):
        write_file(m.path(bid), pattern(size, seed + i))
    return ids


def compressible(n, seed):
    """Bytes that zstd shrinks (text-like), different per seed."""
    line = ('block %d of the test: key value key value 0123456789\n' % seed).encode()
    return (line * (n // len(line) + 1))[:n]


def dumped(m, n):
    """Wait until n blocks are on disk (the disk row of ucmctl stat)."""
    return wait_until(lambda: table(ucmctl('stat', m.mnt)[0], ('disk',)).get(
        'disk', [0, '-1'])[1] == str(n), 10)


# --- stat / top --------------------------------------------------------------------------

def test_stat():
    with Mount('mem_size=16M') as m:
        ids = put_blocks(m, 3, MiB)
        read_file(m.path(ids[0]))
        check(dumped(m, 3), 'the disk row never showed 3 blocks')
        out, _ = ucmctl('stat', m.mnt)
        rows = table(out, ('mem', 'disk', 'TIER'))
        check(rows['TIER'][:4] == ['TIER', 'BLOCKS', 'BYTES', 'CAPACITY'], 'header: %r' %
              rows['TIER'])
        check(rows['mem'][1] == '3' and rows['mem'][2:4] == ['3.00', 'MiB'],
              'mem row: %r' % rows['mem'])
        check(rows['mem'][4:6] == ['16.0', 'MiB'], 'mem capacity: %r' % rows['mem'])
        check(rows['disk'][1] == '3', 'disk row: %r' % rows['disk'])
        for word in ('compression', 'queues', 'commits', 'disk io', 'traffic', 'integrity'):
            check(('\n' + word) in out, 'stat lacks a %r line:\n%s' % (word, out))
        check('commits       3 ok, 0 incomplete, 0 failed' in out, 'commits line:\n' + out)
        # read through the daemon, or by the kernel without it (passthrough)
        check('read 1.00 MiB in 1 opens (0 passed through)' in out or
              'read 0 B in 1 opens (1 passed through)' in out, 'traffic line:\n' + out)
        # a memory-only mount: no disk row, no compression
        with Mount('mem_size=8M', store='none') as m2:
            put_blocks(m2, 2)
            out, _ = ucmctl('stat', m2.mnt)
            rows = table(out, ('mem', 'disk'))
            check(rows['mem'][1] == '2' and 'disk' not in rows, 'memory-only stat:\n' + out)
            check('none in this pipeline' in out, 'memory-only compression line:\n' + out)
        # not a mount
        _, err = ucmctl('stat', m.tmp, rc=1)
        check('ucmfs mount' in err, 'stat of a plain directory says: %r' % err)
        ucmctl('stat', rc=2)
        ucmctl('stat', m.mnt, m.mnt, rc=2)


def test_top():
    with Mount('mem_size=16M') as m:
        ids = put_blocks(m, 2, 512 * KiB)
        t = time.monotonic()
        out, _ = ucmctl('top', '-n', 2, '-d', 0.2, m.mnt)
        dt = time.monotonic() - t
        check(out.count('\nTIER') == 2, 'top -n 2 printed %d reports:\n%s' % (
            out.count('\nTIER'), out))
        check(0.35 <= dt < 10, 'top -n 2 -d 0.2 took %.2fs' % dt)
        rows = table(out, ('mem', 'disk'))
        check(set(rows) == {'mem', 'disk'}, 'top rows: %r' % rows)
        # reads during the interval show as memory hits per second and a read rate
        p = popen([ucmctl_bin(), 'top', '-n', '1', '-d', '0.5', m.mnt], stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE, text=True)
        reads = 0
        while p.poll() is None:
            read_file(m.path(ids[reads % 2]))
            reads += 1
        out = p.stdout.read()
        check(p.returncode == 0, 'top -n 1 exited %d: %s' % (p.returncode, p.stderr.read()))
        hits = float(table(out, ('mem',))['mem'][1])
        check(hits > 0, '%d reads during the interval and mem HITS/s is %r:\n%s' % (
            reads, hits, out))
        check('opens/s 0.0' not in out, 'no opens during reads:\n' + out)
        # Ctrl-C ends it cleanly
        p = popen([ucmctl_bin(), 'top', '-d', '0.1', m.mnt], stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE)
        check(wait_until(lambda: select.select([p.stdout], [], [], 0)[0], 10),
              'top printed nothing in 10s')
        p.send_signal(signal.SIGINT)
        try:
            rc = p.wait(timeout=5 * SLOW)
        except subprocess.TimeoutExpired:
            raise AssertionError('top did not stop within 5s of SIGINT')
        check(rc == 0, 'top exited %d on SIGINT: %s' % (rc, p.stderr.read()))
        # on a terminal: the screen is redrawn
        rc, _, tty = on_tty('top', '-n', '2', '-d', '0.1', m.mnt, tty_stdout=True)
        check(rc == 0 and tty.count('\033[2J') == 2 and 'Ctrl-C' in tty,
              'top on a terminal: status %d, %d clears' % (rc, tty.count('\033[2J')))
        for bad in (('-n', '0'), ('-d', 'x'), ('-d', '0'), ('-n', '2x')):
            ucmctl('top', *bad, m.mnt, rc=2)


# --- ls / lookup / prefetch ------------------------------------------------------------

def test_ls():
    with Mount('mem_size=16M') as m:
        a, b = put_blocks(m, 2, 100 * KiB)
        c = rand_id()
        write_file(m.path(c), compressible(300 * KiB, 1))
        os.setxattr(m.path(b), 'user.ucm.ttl', b'90000')
        check(dumped(m, 3), 'blocks never reached disk')
        out, _ = ucmctl('ls', '-b', m.mnt)
        lines = out.strip().splitlines()
        check(lines[0].split() == ['ID', 'SIZE', 'STORED', 'CODEC', 'TIER', 'TTL', 'PINS'],
              'header: %r' % lines[0])
        rows = table(out, (a, b, c))
        check(len(rows) == 3 and len(lines) == 5, 'ls listed:\n' + out)
        check(rows[a][1] == str(100 * KiB) and rows[a][3] == 'raw' and
              rows[a][4] == 'mem,disk' and rows[a][5] == 'none' and rows[a][6] == '0',
              'row of a: %r' % rows[a])
        check(int(rows[a][2]) >= 100 * KiB, 'stored size of a raw block: %r' % rows[a])
        check(80000 < int(rows[b][5]) <= 90000, 'TTL of b: %r' % rows[b])
        check(rows[c][3].startswith('zstd') and int(rows[c][2]) < 300 * KiB,
              'compressible block: %r' % rows[c])
        check(lines[-1].startswith('3 blocks, 500 KiB, ') and lines[-1].endswith(' stored'),
              'summary: %r' % lines[-1])
        # human units, and a pinned block
        with open(m.path(a), 'rb'):
            out, _ = ucmctl('ls', m.mnt, a, b)
        rows = table(out, (a, b))
        check(rows[a][1:3] == ['100', 'KiB'] and rows[a][-1] == '1', 'human row: %r' % rows[a])
        check(rows[b][-2].endswith('s') and rows[b][-2][0] in '18', 'human TTL: %r' % rows[b])
        # a missing id: reported, status 1, the others still listed
        missing = rand_id()
        out, err = ucmctl('ls', '-H', m.mnt, a, missing, rc=1)
        check(out.split()[0] == a and len(out.strip().splitlines()) == 1, 'ls -H:\n' + out)
        check(missing in err and 'no such block' in err, 'ls of a missing id says %r' % err)
        _, err = ucmctl('ls', m.mnt, 'nothex', rc=2)
        check('not a block id' in err, 'ls of a bad id says %r' % err)
        # an empty mount
        os.unlink(m.path(a))
        os.unlink(m.path(b))
        os.unlink(m.path(c))
        out, _ = ucmctl('ls', m.mnt)
        check(out.strip().splitlines()[-1].startswith('0 blocks'), 'empty ls:\n' + out)


def lookup_out(out):
    d = dict(l.split(None, 1) if ' ' in l.strip() else (l.strip(), '')
             for l in out.strip().splitlines())
    return d


def test_lookup():
    with Mount('mem_size=16M') as m:
        a, b, c = put_blocks(m, 3, 4 * KiB)
        x, y = rand_id(), rand_id()
        out, _ = ucmctl('lookup', m.mnt, a, b, x, c, y)
        d = lookup_out(out)
        check(d == {'ids': '5', 'hits': '3', 'prefix': '2', 'last': '3', 'mask': '11010'},
              'lookup: %r' % d)
        # ids on stdin, any whitespace
        out, _ = ucmctl('lookup', m.mnt, stdin='%s %s\n\t%s\n' % (x, a, b))
        check(lookup_out(out) == {'ids': '3', 'hits': '2', 'prefix': '0', 'last': '2',
                                  'mask': '011'}, 'stdin lookup: %r' % lookup_out(out))
        # 10,000 ids on stdin
        ids = [rand_id() for _ in range(10000)]
        ids[0], ids[1], ids[7777] = a, b, c
        out, _ = ucmctl('lookup', m.mnt, stdin='\n'.join(ids))
        d = lookup_out(out)
        check((d['ids'], d['hits'], d['prefix'], d['last']) == ('10000', '3', '2', '7777'),
              '10,000 ids: %r' % {k: v[:40] for k, v in d.items()})
        check(d['mask'] == '11' + '0' * 7775 + '1' + '0' * 2222, '10,000 ids: mask differs')
        # nothing at all, and bad ids
        out, _ = ucmctl('lookup', m.mnt, stdin='')
        check(lookup_out(out)['prefix'] == '0' and lookup_out(out)['last'] == '-1',
              'empty lookup: %r' % out)
        _, err = ucmctl('lookup', m.mnt, a, a.upper(), rc=2)
        check(a.upper() in err, 'bad id message: %r' % err)
        ucmctl('lookup', m.mnt, stdin=a + ' ' + 'z' * 200, rc=2)
        ucmctl('lookup', m.tmp, a, rc=1)
        check(os.listdir(m.path('.ucm/query')) == [], 'lookup left query files behind')


def test_prefetch():
    with Mount('mem_size=32M') as m:
        ids = put_blocks(m, 4, MiB)
        m.remount()
        check(all(os.getxattr(m.path(i), 'user.ucm.tier') == b'disk' for i in ids),
              'not disk-only after a remount')
        read_file(m.path(ids[3]))
        out, err = ucmctl('prefetch', m.mnt, ids[0], ids[1], ids[3])
        check('3 ids' in out and '2 loaded into memory (2.00 MiB)' in out and
              '1 already in memory' in out, 'prefetch says: %r' % out)
        for i in ids[:2]:
            t = os.getxattr(m.path(i), 'user.ucm.tier')
            check(t == b'mem,disk', 'after ucmctl prefetch a block is in %r' % t)
        check(os.getxattr(m.path(ids[2]), 'user.ucm.tier') == b'disk', 'an unlisted block moved')
        # a missing id: the others are loaded, status 1 and the id named
        missing = rand_id()
        out, err = ucmctl('prefetch', '-q', m.mnt, stdin='%s\n%s\n' % (ids[2], missing), rc=1)
        check('1 not stored' in out and missing in err, 'prefetch of a missing id: %r %r' % (
            out, err))
        check(os.getxattr(m.path(ids[2]), 'user.ucm.tier') == b'mem,disk', 'stdin prefetch')
        # a progress bar on a terminal
        m.remount()
        rc, out, tty = on_tty('prefetch', m.mnt, *ids)
        check(rc == 0 and '4 loaded' in out, 'prefetch on a terminal: %d %r' % (rc, out))
        check('100%' in tty and '[' in tty and '4/4 blocks' in tty,
              'no progress bar on the terminal: %r' % tty[-300:])
        rc, out, tty = on_tty('prefetch', '-q', m.mnt, *ids)
        check(rc == 0 and '%' not in tty, 'prefetch -q drew a bar: %r' % tty)
        ucmctl('prefetch', m.mnt, 'xyz', rc=2)
        check(os.listdir(m.path('.ucm/query')) == [], 'prefetch left query files behind')


# --- verify ------------------------------------------------------------------------------

def flip_payload(path):
    """Flip a byte in the middle of the stored payload of a native block file."""
    with open(path, 'rb') as f:
        stored = int.from_bytes(f.read(48)[40:48], 'little')   # header: stored size
    check(stored > 0, '%s stores no payload' % path)
    flip(path, 4096 + stored // 2)


def block_file(store, bid):
    return os.path.join(store, 'data', bid[:3], bid)


def verify_summary(out):
    last = [l for l in out.splitlines() if ' blocks, ' in l]
    check(last, 'verify printed no summary:\n' + out)
    return last[-1]


def test_verify():
    with Mount('mem_size=16M') as m:
        raw = put_blocks(m, 3, 300 * KiB)
        z = [rand_id() for _ in range(3)]
        for i, bid in enumerate(z):
            write_file(m.path(bid), compressible(2 * MiB + 3, i))
        check(dumped(m, 6), 'blocks never reached disk')
        check(os.getxattr(m.path(z[0]), 'user.ucm.codec').startswith(b'zstd'),
              'a compressible block is stored %r' % os.getxattr(m.path(z[0]), 'user.ucm.codec'))
        # mounted: refused, unless --force
        _, err = ucmctl('verify', m.store, rc=2)
        check('in use' in err, 'verify of a mounted store says %r' % err)
        out, err = ucmctl('verify', '--force', m.store)
        check('6 ok, 0 damaged' in verify_summary(out), 'forced verify: %r' % out)
        m.unmount()
        out, _ = ucmctl('verify', m.store)
        check('6 blocks' in verify_summary(out) and '6 ok, 0 damaged' in verify_summary(out),
              'clean store: %r' % out)
        # damage: a payload byte of a raw block, a compressed chunk, a header, a truncation
        flip_payload(block_file(m.store, raw[0]))
        flip_payload(block_file(m.store, z[0]))
        flip(block_file(m.store, z[1]), 40)
        os.truncate(block_file(m.store, raw[1]), 4096 + 100)
        # and leftovers that are no damage: a temp file, a stray file
        open(block_file(m.store, raw[2]) + '.tmp.otherhost.1.1', 'w').close()
        stray = os.path.join(m.store, 'data', raw[2][:3], 'notes.txt')
        open(stray, 'w').close()
        out, err = ucmctl('verify', m.store, rc=1)
        damaged = {l.split()[1].rstrip(':'): l for l in out.splitlines()
                   if l.startswith('damaged')}
        want = {block_file(m.store, b) for b in (raw[0], z[0], z[1], raw[1])}
        check(set(damaged) == want, 'damaged blocks reported: %r, expected %r' % (
            sorted(damaged), sorted(want)))
        check('checksum' in damaged[block_file(m.store, raw[0])] and
              'checksum' in damaged[block_file(m.store, z[0])] and
              'header' in damaged[block_file(m.store, z[1])] and
              'truncated' in damaged[block_file(m.store, raw[1])],
              'reasons:\n' + '\n'.join(damaged.values()))
        s = verify_summary(out)
        check('2 ok, 4 damaged' in s and '1 temp files' in s and '1 unknown files' in s,
              'summary: %r' % s)
        check(('unknown  ' + stray) in out, 'the stray file is not named:\n' + out)
        # the daemon agrees: what verify calls damaged fails to read
        m.start()
        for bid in (raw[0], z[0]):
            try:
                read_file(m.path(bid))
                raise AssertionError('a block that verify calls damaged reads fine')
            except OSError as e:
                check(e.errno in (errno.EIO, errno.ENOENT), 'damaged read: %r' % e)
        read_file(m.path(raw[2]))
        m.unmount()
        # the daemon moved every damaged file to quarantine (at start, or when read):
        # verify finds the store clean now, and quarantine is not checked
        q = os.listdir(os.path.join(m.store, 'quarantine'))
        check(len(q) == 4, 'quarantine holds %r' % q)
        out, _ = ucmctl('verify', '-v', m.store)
        check('2 ok, 0 damaged' in verify_summary(out), 'after quarantine: %r' % out)
        check(('temp     ' + block_file(m.store, raw[2]) + '.tmp.otherhost.1.1') in out,
              '-v does not list the temp file:\n' + out)
        ucmctl('verify', os.path.join(m.tmp, 'nothing-here'), rc=2)
        ucmctl('verify', rc=2)


def test_verify_layouts_and_stripes():
    m = Mount('mem_size=16M')
    s1, s2 = os.path.join(m.tmp, 'disk1'), os.path.join(m.tmp, 'disk2')
    m.store = s1 + ':' + s2
    with m:
        # random ids: 24 of them leave a disk empty once in 8 million runs (8: 1 in 128)
        ids = put_blocks(m, 24, 64 * KiB)
        m.unmount()
        out, _ = ucmctl('verify', m.store)
        s = verify_summary(out)
        check('24 blocks' in s and '24 ok' in s and 'disk1 (layout=native)' in out and
              'disk2 (layout=native)' in out, 'striped verify:\n' + out)
        on = [b for b in ids if os.path.exists(block_file(s2, b))]
        check(on and len(on) < 24, 'the stripe put %d of 24 blocks on disk2' % len(on))
        flip(block_file(s2, on[0]), 4096 + 5)
        out, _ = ucmctl('verify', m.store, rc=1)
        check(block_file(s2, on[0]) in out and '23 ok, 1 damaged' in verify_summary(out),
              'striped damage:\n' + out)
        # the progress bar, on a terminal
        rc, out, tty = on_tty('verify', s1)
        check(rc == 0 and '100%' in tty and ' blocks' in tty, 'verify on a terminal: %d %r' % (
            rc, tty[-200:]))
        rc, out, tty = on_tty('verify', '-q', s1)
        check(rc == 0 and '%' not in tty, 'verify -q drew a bar: %r' % tty[-200:])
    # layout=ucm: raw files, nothing but presence to check
    with Mount('mem_size=16M,layout=ucm') as u:
        put_blocks(u, 3, 32 * KiB)
        u.unmount()
        out, _ = ucmctl('verify', u.store)
        check('(layout=ucm)' in out and '3 ok, 0 damaged' in verify_summary(out),
              'ucm layout:\n' + out)
        out, _ = ucmctl('verify', '--layout=native', u.store)
        check('0 blocks' in verify_summary(out), 'a ucm store read as native:\n' + out)
        ucmctl('verify', '--layout=other', u.store, rc=2)


def test_usage():
    out, err = ucmctl(rc=2)
    check('usage' in err, 'no usage on stderr: %r' % err)
    out, _ = ucmctl('--help')
    for c in ('stat', 'top', 'ls', 'lookup', 'prefetch', 'verify'):
        check(c in out, '--help does not mention %s' % c)
    ucmctl('frobnicate', rc=2)
    ucmctl('ls', rc=2)
    ucmctl('lookup', rc=2)


if __name__ == '__main__':
    run([test_stat, test_top, test_ls, test_lookup, test_prefetch, test_verify,
         test_verify_layouts_and_stripes, test_usage])
