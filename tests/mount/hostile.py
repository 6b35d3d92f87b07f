#!/usr/bin/env python3
"""Hostile on-disk state (DESIGN.md section 5, ucmfs(8) FILES, METRICS): a STORE written by
ucmfs, unmounted, then damaged by the test in every way a disk, an operator or another
program can damage it, and a STORE on a full or read-only filesystem.

What every case asks: the mount works (or refuses with exit status 1 and one clear line
that names the path and the reason); damaged block files are moved to STORE/quarantine/,
counted in ucmfs_quarantined_total and logged; entries that are not block files (wrong type
or name) are skipped, left in place, counted in ucmfs_skipped_entries_total and logged; good
blocks are served byte-exact; nothing damaged is ever served (absent, or EIO and never a
wrong byte); the daemon never crashes or hangs (every access to a damaged entry runs in a
child process with a time limit), and the FS keeps answering afterwards (a new block is
written and read back, the listing and /.ucm/stats work, the unmount is clean).

"Unreadable" for a daemon that runs as root: root ignores mode bits (CAP_DAC_OVERRIDE), so
a mode-000 file and a file owned by another uid are readable, and being valid blocks they
must be served. The entries on which reads really fail for root are a FIFO (open blocks
until a writer comes, then reads return nothing), a Unix socket (open fails ENXIO) and a
directory (read fails EISDIR): those are used, at mount and while mounted.

Headers with right checksums but wrong fields (what a buggy or foreign writer leaves) are
forged with XXH3-64 from libxxhash, the library ucmfs itself links (through ctypes).
The tmpfs mounts and bind mounts made here are always undone, also when a case fails.
Run one case: python3 tests/mount/hostile.py damaged-block-files
"""
import ctypes
import ctypes.util
import errno
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compress import kv_bytes, stat_sum
from ucmtest import (SLOW, KiB, MiB, Mount, case, check, cmd, daemon_bin, daemon_env,
                     errname, expect_errno, flip, pattern, popen, rand_id, read_file, run,
                     same, try_write, wait_until, write_file)

HEADER = 4096
OFF_TABLE = 128
OFF_CSUM = HEADER - 8
CODEC_RAW = 0
PROBE_TIMEOUT = 5           # seconds for one access to a damaged entry (times SLOW)
OTHER_UID = 54321           # a uid that owns nothing on this machine


# --- XXH3-64, to forge headers whose checksums are right (the daemon links libxxhash) ------

def _load_xxh3():
    for name in ('libxxhash.so.0', ctypes.util.find_library('xxhash') or 'libxxhash.so'):
        try:
            lib = ctypes.CDLL(name)
            fn = lib.XXH3_64bits
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_uint64
        fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        return fn
    return None


_XXH3 = _load_xxh3()


def xxh3(data):
    check(_XXH3 is not None, 'libxxhash (which ucmfs links) is not loadable')
    data = bytes(data)
    return _XXH3(data, len(data))


# --- block files of layout=native ---------------------------------------------------------

def block_file(store, bid):
    return os.path.join(store, 'data', bid[:3], bid)


def get32(b, off):
    return int.from_bytes(b[off:off + 4], 'little')


def get64(b, off):
    return int.from_bytes(b[off:off + 8], 'little')


def put32(b, off, v):
    b[off:off + 4] = (v & 0xffffffff).to_bytes(4, 'little')


def put64(b, off, v):
    b[off:off + 8] = (v & 0xffffffffffffffff).to_bytes(8, 'little')


def header(path):
    with open(path, 'rb') as f:
        return bytearray(f.read(HEADER))


def info(path):
    """The fields of a block file's header that the cases choose by."""
    h = header(path)
    n = get32(h, 84)
    return {'raw': get64(h, 32), 'stored': get64(h, 40), 'codec': get32(h, 48),
            'chunk_size': get32(h, 80), 'nchunks': n,
            'chunks': [get32(h, OFF_TABLE + 12 * i) for i in range(n)]}


def edit_header(path, fn, reseal=True):
    """Change a header in place with fn(bytearray); reseal: write the right header checksum
    (a header a buggy or foreign writer made), else leave the old one (a damaged one)."""
    h = header(path)
    fn(h)
    if reseal:
        put64(h, OFF_CSUM, xxh3(h[:OFF_CSUM]))
    with open(path, 'r+b') as f:
        f.write(h)


def forge_chunk(path, i):
    """Replace the stored bytes of chunk i of a compressed block with garbage of the same
    length, and make every checksum (chunk, payload, header) right: a chunk that passes every
    check but does not decode (what a writer bug or another codec version leaves)."""
    with open(path, 'r+b') as f:
        data = bytearray(f.read())
    h = data[:HEADER]
    lens = [get32(h, OFF_TABLE + 12 * k) for k in range(get32(h, 84))]
    start = HEADER + sum(lens[:i])
    junk = bytes([0xff, 0xfe, 0xfd, 0xfc]) + pattern(lens[i] - 4, 99)   # no zstd magic
    data[start:start + lens[i]] = junk
    put64(h, OFF_TABLE + 12 * i + 4, xxh3(junk))
    put64(h, 72, xxh3(data[HEADER:HEADER + get64(h, 40)]))
    put64(h, OFF_CSUM, xxh3(h[:OFF_CSUM]))
    data[:HEADER] = h
    with open(path, 'wb') as f:
        f.write(data)


def quarantine_dir(store):
    return os.path.join(store, 'quarantine')


def quarantined(store, name):
    try:
        return [n for n in os.listdir(quarantine_dir(store)) if n.startswith(name)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def host_name():
    """The host part of ucmfs temp file and lock names ('.' and '/' become '_')."""
    return socket.gethostname().replace('.', '_').replace('/', '_') or 'localhost'


def other_id(prefix):
    """A fresh id that starts with the given hex prefix."""
    return prefix + rand_id()[len(prefix):]


# --- accesses that may hang: in a child process with a time limit -------------------------

_PROBE = r"""
import hashlib, json, os, sys
out = {}
try:
    fd = os.open(sys.argv[1], os.O_RDONLY)
    h, n = hashlib.sha256(), 0
    try:
        while True:
            b = os.pread(fd, 128 << 10, n)
            if not b:
                break
            h.update(b)
            n += len(b)
    except OSError as e:
        out['read_err'] = e.errno
    os.close(fd)
    out['n'] = n
    out['sha'] = h.hexdigest()
except OSError as e:
    out['open_err'] = e.errno
print(json.dumps(out), flush=True)
"""


def probe(path, timeout=PROBE_TIMEOUT):
    """Open and read a file whole in a child process. Returns a dict: open_err, or n (bytes
    read), sha (of them) and read_err if a read failed; or {'hang': True, 'proc': child} if
    the child did not finish in time."""
    p = popen([sys.executable, '-c', _PROBE, path], stdout=subprocess.PIPE,
              stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout * SLOW)
    except subprocess.TimeoutExpired:
        # a request the daemon has taken cannot be killed (the kernel waits for its answer):
        # the caller unblocks the daemon, then may collect the answer with finish()
        return {'hang': True, 'proc': p}
    check(p.returncode == 0, 'probe of %s died: %s' % (path, err.strip()[-300:]))
    return json.loads(out)


def finish(r, timeout=PROBE_TIMEOUT):
    """The answer of a probe that hung, once the daemon was unblocked."""
    p = r['proc']
    try:
        out, err = p.communicate(timeout=timeout * SLOW)
    except subprocess.TimeoutExpired:
        p.kill()
        return r
    return json.loads(out) if p.returncode == 0 and out.strip() else r


def describe(r):
    if r.get('hang'):
        return 'HANG (no answer within %gs)' % (PROBE_TIMEOUT * SLOW)
    if 'open_err' in r:
        return 'open failed with %s' % errname(r['open_err'])
    s = '%d bytes read' % r['n']
    if 'read_err' in r:
        s += ', then a read failed with %s' % errname(r['read_err'])
    return s


def expect_not_served(m, bid, want, what):
    """A damaged block must not be served: open fails (ENOENT/EIO), or a read fails with EIO
    and every byte returned before that is the original's; never the whole block without an
    error. Then it is gone: open ENOENT/EIO, not listed."""
    r = probe(m.path(bid))
    check(not r.get('hang'), '%s: reading it hangs the daemon' % what)
    if 'open_err' in r:
        check(r['open_err'] in (errno.ENOENT, errno.EIO), '%s: %s, not ENOENT or EIO' % (
            what, describe(r)))
    else:
        check('read_err' in r, '%s: SERVED, %d bytes read without an error' % (what, r['n']))
        check(r['read_err'] == errno.EIO, '%s: %s, not EIO' % (what, describe(r)))
        check(want is None or hashlib.sha256(want[:r['n']]).hexdigest() == r['sha'],
              '%s: WRONG BYTES served before the EIO (%d bytes)' % (what, r['n']))
    r = probe(m.path(bid))
    check('open_err' in r and r['open_err'] in (errno.ENOENT, errno.EIO),
          '%s: a second open: %s' % (what, describe(r)))
    check(bid not in m.blocks(), '%s: still listed after the error' % what)


def expect_served(m, bid, want, what):
    r = probe(m.path(bid))
    check('n' in r and 'read_err' not in r, '%s: a good block is not served: %s' % (
        what, describe(r)))
    check(r['n'] == len(want) and r['sha'] == hashlib.sha256(want).hexdigest(),
          '%s: %d bytes read, not the %d bytes written' % (what, r['n'], len(want)))


def keeps_answering(m, what):
    """The FS still works: a new block round-trips, the listing and the stats answer."""
    bid = rand_id()
    data = pattern(300 * KiB + 7, 4242)
    write_file(m.path(bid), data)
    same(read_file(m.path(bid)), data, '%s: a new block written afterwards' % what)
    check(bid in m.blocks(), '%s: a new block is not listed' % what)
    with open(m.path('.ucm/stats')) as f:
        check('ucmfs_tier_blocks' in f.read(), '%s: /.ucm/stats is incomplete' % what)
    return bid, data


def fill(path):
    """Fill the filesystem of path with a file, to ENOSPC."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            os.write(fd, bytes(64 * KiB))
    except OSError as e:
        check(e.errno == errno.ENOSPC, 'filling %s: %s' % (path, e))
    finally:
        os.close(fd)


def write_blocks(m, specs):
    """specs: [(kind, size, seed)] with kind 'kv' (compressible) or 'rnd'; {id: data}."""
    out = {}
    for kind, n, seed in specs:
        data = kv_bytes(n, seed) if kind == 'kv' else pattern(n, seed)
        bid = rand_id()
        write_file(m.path(bid), data)
        out[bid] = data
    return out


def log_names(m, path, what):
    """The daemon's log must name a path it quarantined or skipped."""
    check(path in m.log_text(), '%s: the daemon log does not mention %s' % (what, path))


def counter(m, name):
    return stat_sum(m, name)


def has_metric(m, name):
    with open(m.path('.ucm/stats')) as f:
        return any(line.split('{')[0].split(' ')[0] == name for line in f
                   if not line.startswith('#'))


# --- mounts of tmpfs and bind mounts, always undone ---------------------------------------

class Mounts:
    """tmpfs and bind mounts made by a case; undone in reverse order on exit, even when the
    case fails (lazily if still busy)."""

    def __init__(self):
        self.dirs = []
        self.made = []

    def tmpfs(self, size):
        d = tempfile.mkdtemp(prefix='ucmfs-hostile-')
        self.dirs.append(d)
        cmd(['mount', '-t', 'tmpfs', '-o', 'size=%s,mode=0700' % size, 'tmpfs', d])
        self.made.append(d)
        return d

    def bind(self, src, dst):
        cmd(['mount', '--bind', src, dst])
        self.made.append(dst)

    def remount(self, path, how):
        cmd(['mount', '-o', 'remount,%s' % how, path])

    def umount(self, path):
        for _ in range(50):
            if subprocess.run(['umount', path], stderr=subprocess.DEVNULL).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(['umount', '-l', path], stderr=subprocess.DEVNULL)
        if path in self.made:
            self.made.remove(path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for path in reversed(list(self.made)):
            self.umount(path)
        for d in self.dirs:
            try:
                os.rmdir(d)
            except OSError:
                pass
        return False


def refused(store, want, extra_opts=''):
    """ucmfs on store must exit 1 at once, nothing mounted, stderr one line (besides the
    informational io=aio line) that names the store and the reason `want`."""
    mnt = tempfile.mkdtemp(prefix='ucmfs-hostile-mnt-')
    try:
        args = [daemon_bin(), '-f'] + (['-o', extra_opts] if extra_opts else []) + [store, mnt]
        try:
            r = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=30 * SLOW,
                               env=daemon_env())
        except subprocess.TimeoutExpired:
            subprocess.run(['fusermount3', '-u', '-z', mnt], stderr=subprocess.DEVNULL)
            raise AssertionError('ucmfs on %s: no answer within %gs (expected a refusal: %s)'
                                 % (store, 30 * SLOW, want))
        if os.path.ismount(mnt):
            subprocess.run(['fusermount3', '-u', mnt], stderr=subprocess.DEVNULL)
            raise AssertionError('ucmfs on %s mounted, expected a refusal (%s)' % (store, want))
        lines = [l for l in (r.stderr + r.stdout).splitlines() if l.strip() and
                 'io=aio' not in l]
        check(r.returncode == 1, 'ucmfs on %s (%s) exited %d, expected 1: %s' % (
            store, want, r.returncode, r.stderr.strip()))
        check(len(lines) == 1, 'ucmfs on %s (%s): the refusal is not one line: %r' % (
            store, want, lines))
        check(store in lines[0] and want.lower() in lines[0].lower(),
              'ucmfs on %s: the refusal %r does not say "%s" about the store' % (
                  store, lines[0], want))
        return lines[0]
    finally:
        os.rmdir(mnt)


# --- the cases ----------------------------------------------------------------------------

class Problems:
    """Checks that go on after a failure, so that a case reports every problem it saw."""

    def __init__(self):
        self.seen = []

    def check(self, cond, msg):
        if not cond:
            self.seen.append(msg)
        return cond

    def done(self):
        check(not self.seen, '%d problems: %s' % (len(self.seen), ' || '.join(self.seen)))


def store_of(m, specs):
    """Write blocks on a fresh mount, unmount; {id: data}, {id: file}, {id: header info}."""
    blocks = write_blocks(m, specs)
    m.unmount()
    files = {bid: block_file(m.store, bid) for bid in blocks}
    return blocks, files, {bid: info(f) for bid, f in files.items()}


def make_odd(path, kind, outside=None):
    """Put something that is not a block file at path."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if kind == 'directory':
        os.makedirs(os.path.join(path, 'inside'))
    elif kind == 'FIFO':
        os.mkfifo(path)
    elif kind == 'socket':
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        s.close()
    elif kind == 'symlink to /etc/passwd':
        os.symlink('/etc/passwd', path)
    elif kind == 'dangling symlink':
        os.symlink('/nonexistent/' + os.path.basename(path), path)
    elif kind == 'symlink to a directory':
        os.symlink(outside, path)
    else:
        raise ValueError(kind)


ODD = ('directory', 'FIFO', 'socket', 'symlink to /etc/passwd', 'dangling symlink',
       'symlink to a directory')


@case(timeout=45)
def test_damaged_block_files():
    """Block files damaged while unmounted. Found at mount, moved to quarantine, counted and
    logged: truncated inside the header, inside the chunk table, inside the payload, by its
    last stored byte, to zero length; headers with a right checksum but a bad magic, format
    version 2, header size 8192, a stored size past the end of the file, raw size != stored
    size for raw bytes, 1 TiB sizes in a small file, chunk lengths that do not add up, a
    chunk table that does not cover the raw size, flags set, an unknown codec; a stale header
    checksum; the file of another block under this id. Found at read (EIO, never a wrong
    byte, then quarantined and counted): a flipped byte of a compressed and of a raw payload.
    Served byte-exact: files owned by another uid, mode 000 (the daemon is root), both, and
    a file whose padding after the payload was cut."""
    with Mount() as m:
        specs = [('kv', 600 * KiB, 1), ('kv', 700 * KiB + 3, 2), ('rnd', 300 * KiB, 3),
                 ('rnd', 5, 4), ('kv', 2 * MiB + 1, 5), ('rnd', 0, 6)]
        specs += [('kv' if i % 2 else 'rnd', (200 + 37 * i) * KiB + i, 100 + i)
                  for i in range(24)]
        blocks, files, inf = store_of(m, specs)
        st = m.store
        chunked = [b for b in sorted(blocks) if inf[b]['nchunks'] >= 2 and
                   inf[b]['codec'] != CODEC_RAW]
        raw = [b for b in sorted(blocks) if inf[b]['codec'] == CODEC_RAW and
               inf[b]['raw'] >= 64 * KiB]
        check(len(chunked) >= 6 and len(raw) >= 3, 'setup: %d compressed blocks of several '
              'chunks and %d raw blocks' % (len(chunked), len(raw)))
        c = iter(chunked[:6])
        pick = iter(b for b in sorted(blocks) if b not in chunked[:6] and b not in raw[:3])
        gone, at_read, good = {}, {}, {}

        def cut(b, size, what):
            os.truncate(files[b], size)
            gone[b] = what

        def bad(b, fn, what, reseal=True):
            edit_header(files[b], fn, reseal)
            gone[b] = what

        b = next(c); cut(b, 100, 'truncated inside the header')
        b = next(c); cut(b, OFF_TABLE + 12 + 5, 'truncated inside the chunk table')
        b = next(c); cut(b, HEADER + inf[b]['stored'] // 2, 'truncated inside the payload')
        b = next(pick); cut(b, HEADER + inf[b]['stored'] - 1, 'the last stored byte cut')
        b = next(pick); cut(b, 0, 'a zero-length file')
        bad(next(pick), lambda h: h.__setitem__(slice(0, 8), b'UCMFSBLX'), 'bad magic')
        bad(next(pick), lambda h: put32(h, 8, 2), 'format version 2')
        bad(next(pick), lambda h: put32(h, 12, 8192), 'header size 8192')
        bad(next(pick), lambda h: put64(h, 40, get64(h, 40) + 2 * MiB),
            'stored size past the end of the file')
        bad(raw[0], lambda h: put64(h, 32, get64(h, 32) + 1),
            'raw codec with raw size != stored size')
        bad(raw[1], lambda h: (put64(h, 32, 1 << 40), put64(h, 40, 1 << 40)),
            'raw and stored size 1 TiB in a small file')
        bad(next(c), lambda h: put32(h, OFF_TABLE, get32(h, OFF_TABLE) + 1),
            'chunk lengths that do not add up to the stored size')
        bad(next(c), lambda h: put64(h, 32, get64(h, 32) + 10 * MiB),
            'a chunk table that does not cover the raw size')
        bad(next(pick), lambda h: put32(h, 52, 1), 'flags set')
        bad(next(pick), lambda h: put32(h, 48, 77), 'unknown codec 77')
        bad(next(pick), lambda h: put32(h, 100, 1), 'a reserved byte set (stale checksum)',
            reseal=False)
        b, victim = next(pick), next(pick)
        os.replace(files[b], files[victim])          # victim's name, b's header and bytes
        del blocks[b]
        gone[victim] = 'the block file of another id'
        b = next(c); flip(files[b], HEADER + inf[b]['stored'] // 3)
        at_read[b] = 'a flipped byte of a compressed payload'
        b = raw[2]; flip(files[b], HEADER + 7); at_read[b] = 'a flipped byte of a raw payload'
        b = next(pick); os.chown(files[b], OTHER_UID, OTHER_UID); good[b] = 'another uid'
        b = next(pick); os.chmod(files[b], 0); good[b] = 'mode 000'
        b = next(pick); os.chown(files[b], OTHER_UID, OTHER_UID); os.chmod(files[b], 0)
        good[b] = 'another uid, mode 000'
        b = next(pick); os.truncate(files[b], HEADER + inf[b]['stored'])
        good[b] = 'the padding after the payload cut'
        for b in blocks:
            if b not in gone and b not in at_read and b not in good:
                good[b] = 'untouched'

        m.start()
        listed = set(m.blocks())
        want = set(good) | set(at_read)
        check(listed == want, 'listing after mount: unexpected %s, missing %s' % (
            ['%s (%s)' % (x, gone.get(x, '?')) for x in sorted(listed - want)],
            sorted(want - listed)))
        for bid, what in sorted(gone.items(), key=lambda x: x[1]):
            check(quarantined(st, bid), '%s: not moved to STORE/quarantine/' % what)
            check(not os.path.lexists(block_file(st, bid)), '%s: still in place' % what)
            expect_not_served(m, bid, None, what)
            log_names(m, block_file(st, bid), what)
        n = counter(m, 'ucmfs_quarantined_total')
        check(n == len(gone), 'ucmfs_quarantined_total = %g after mount, %d damaged files '
              'moved to quarantine' % (n, len(gone)))
        for bid, what in sorted(good.items()):
            expect_served(m, bid, blocks[bid], 'a good block (%s)' % what)
        for bid, what in sorted(at_read.items()):
            expect_not_served(m, bid, blocks[bid], what)
            check(quarantined(st, bid), '%s: EIO, but the file is not in quarantine' % what)
            log_names(m, block_file(st, bid), what)
        n = counter(m, 'ucmfs_quarantined_total')
        check(n == len(gone) + len(at_read), 'ucmfs_quarantined_total = %g after %d blocks '
              'damaged in their payload were read' % (n, len(at_read)))
        check(counter(m, 'ucmfs_checksum_failures_total') >= len(at_read),
              'ucmfs_checksum_failures_total = %g after %d flipped payload bytes' % (
                  counter(m, 'ucmfs_checksum_failures_total'), len(at_read)))
        extra = dict([keeps_answering(m, 'after the damaged block files')])
        q = sorted(os.listdir(quarantine_dir(st)))
        m.remount()
        check(sorted(os.listdir(quarantine_dir(st))) == q, 'a remount changed the quarantine')
        check(counter(m, 'ucmfs_quarantined_total') == 0, 'a remount quarantined more')
        check(set(m.blocks()) == set(good) | set(extra), 'listing after a remount: %d blocks, '
              '%d expected' % (len(m.blocks()), len(good) + len(extra)))
        for bid, d in sorted(dict({b: blocks[b] for b in good}, **extra).items()):
            expect_served(m, bid, d, 'after a remount')


@case(timeout=30)
def test_not_block_files():
    """Entries that are not block files, found at mount: a directory, a FIFO, a socket, a
    symlink to /etc/passwd, a dangling one and one to a directory named like blocks; a
    symlink to a good block file outside STORE; junk names in a shard directory (README,
    uppercase, 31 and 33 hex digits, a suffix, 32 non-hex, the block file of another shard's
    id) and in data/ (zzz, ABC, abcd, notes.txt); stray temp files (this host's: removed;
    another host's fresh: kept; another host's 2 hours old: removed). None is served or
    removed (except those temp files) or changed, the daemon does not hang on the FIFO, the
    good blocks are served, and every skipped entry is logged by path and counted in
    ucmfs_skipped_entries_total."""
    with Mount() as m:
        blocks, files, inf = store_of(m, [('kv', 600 * KiB, 10), ('rnd', 300 * KiB, 11),
                                          ('rnd', 5, 12), ('kv', MiB, 13)])
        st = m.store
        data = os.path.join(st, 'data')
        outside = os.path.join(m.tmp, 'outside')
        os.mkdir(outside)
        skipped = {}                  # path -> what
        odd = {}                      # id -> what
        for kind in ODD:
            bid = rand_id()
            make_odd(block_file(st, bid), kind, outside)
            odd[bid] = 'a %s named like a block' % kind
            skipped[block_file(st, bid)] = odd[bid]
        ids = sorted(blocks)
        linked = ids[0]
        os.rename(files[linked], os.path.join(outside, linked))
        os.symlink(os.path.join(outside, linked), files[linked])
        odd[linked] = 'a symlink to a good block file outside STORE'
        skipped[files[linked]] = odd[linked]
        some = ids[1]
        sdir = os.path.dirname(files[some])
        alien = other_id('fff' if some[:3] != 'fff' else 'eee')
        for n in ('README', some.upper(), some[:31], some + '0', some + '.bak', 'x' * 32, alien):
            with open(os.path.join(sdir, n), 'wb') as f:
                f.write(open(files[ids[2]], 'rb').read() if n == alien else b'junk\n')
            skipped[os.path.join(sdir, n)] = 'junk name %r in a shard directory' % n
        for n in ('zzz', 'ABC', 'abcd', 'notes.txt'):
            p = os.path.join(data, n)
            if n == 'zzz':
                os.mkdir(p)
            else:
                with open(p, 'wb') as f:
                    f.write(b'junk\n')
            skipped[p] = 'junk name %r in data/' % n
        host = host_name()
        mine = os.path.join(sdir, '%s.tmp.%s.%d.%d' % (some, host, 4000001, 1))
        fresh = os.path.join(sdir, '%s.tmp.%s.%d.%d' % (rand_id(), 'other-' + host, 7, 1))
        old = os.path.join(sdir, '%s.tmp.%s.%d.%d' % (rand_id(), 'other-' + host, 7, 2))
        for p in (mine, fresh, old):
            with open(p, 'wb') as f:
                f.write(b'half a block')
        t = time.time() - 2 * 3600
        os.utime(old, (t, t))
        passwd = open('/etc/passwd', 'rb').read()
        linked_bytes = open(os.path.join(outside, linked), 'rb').read()

        m.start()
        good = {b: d for b, d in blocks.items() if b != linked}
        check(set(m.blocks()) == set(good), 'listing after mount: %s, expected %s' % (
            m.blocks(), sorted(good)))
        for bid, what in sorted(odd.items()):
            expect_not_served(m, bid, None, what)
        for bid, d in sorted(good.items()):
            expect_served(m, bid, d, 'a good block beside entries that are not block files')
        expect_errno(errno.ENOENT, os.stat, m.path(alien))
        for p, what in sorted(skipped.items()):
            check(os.path.lexists(p), '%s: removed (it is not the daemon\'s to remove)' % what)
        check(open(os.path.join(outside, linked), 'rb').read() == linked_bytes,
              'the block file behind the symlink was changed')
        check(open('/etc/passwd', 'rb').read() == passwd, '/etc/passwd was changed')
        check(not os.path.exists(mine), 'this host\'s leftover temp file was kept')
        check(os.path.exists(fresh), 'a fresh temp file of another host was removed')
        check(not os.path.exists(old), 'a 2-hour-old temp file of another host was kept')
        n = counter(m, 'ucmfs_temp_files_removed_total')
        check(n == 2, 'ucmfs_temp_files_removed_total = %g, 2 removed' % n)
        check(counter(m, 'ucmfs_quarantined_total') == 0, 'something was quarantined')
        keeps_answering(m, 'beside entries that are not block files')
        pb = Problems()
        text = m.log_text()
        for p, what in sorted(skipped.items()):
            pb.check(p in text, '%s: skipped without a word in the log' % what)
        pb.check(has_metric(m, 'ucmfs_skipped_entries_total'),
                 '/.ucm/stats has no ucmfs_skipped_entries_total: %d entries skipped at mount '
                 'are counted nowhere' % len(skipped))
        if has_metric(m, 'ucmfs_skipped_entries_total'):
            n = counter(m, 'ucmfs_skipped_entries_total')
            pb.check(n == len(skipped), 'ucmfs_skipped_entries_total = %g, %d entries '
                     'skipped' % (n, len(skipped)))
        pb.done()


@case(timeout=30)
def test_file_in_place_of_shard():
    """A regular file where a shard directory (data/<hex[0:3]>) should be: the mount works,
    the file is moved to quarantine (counted, logged), and a block of that shard written
    afterwards reaches the disk and survives a remount."""
    with Mount() as m:
        blocks, files, inf = store_of(m, [('kv', 300 * KiB, 20), ('rnd', 100 * KiB, 21)])
        data = os.path.join(m.store, 'data')
        used = set(os.listdir(data))
        shard = next(s for s in ('%03x' % k for k in range(4096)) if s not in used)
        notdir = os.path.join(data, shard)
        with open(notdir, 'wb') as f:
            f.write(b'not a directory\n')
        m.start()
        check(set(m.blocks()) == set(blocks), 'listing: %s' % m.blocks())
        nb = other_id(shard)
        nd = pattern(200 * KiB, 22)
        err = try_write(m.path(nb), nd, chunk=256 * KiB)
        check(err is None, 'a new block in shard %s (a file on disk): %s' % (
            shard, err and '%s failed with %s' % (err[0], errname(err[1]))))
        expect_served(m, nb, nd, 'a new block whose shard directory is a file on disk')
        pb = Problems()
        pb.check(quarantined(m.store, shard), 'the file in place of shard directory %s is not '
                 'moved to quarantine (%s)' % (shard, 'still there' if os.path.isfile(notdir)
                                               else 'gone'))
        pb.check(notdir in m.log_text(), 'the file in place of a shard directory: nothing in '
                 'the log')
        pb.check(counter(m, 'ucmfs_quarantined_total') == 1, 'ucmfs_quarantined_total = %g' %
                 counter(m, 'ucmfs_quarantined_total'))
        fd = os.open(m.path(nb), os.O_RDONLY)
        try:
            os.fsync(fd)
        except OSError as e:
            pb.check(False, 'fsync of a block whose shard directory is a file: %s' % errname(
                e.errno))
        finally:
            os.close(fd)
        m.remount()
        pb.check(nb in m.blocks(), 'a block of a shard whose directory was a file is lost at '
                 'unmount (it never reached the disk: %s)' % (
                     os.path.isfile(notdir) and 'the file is still there' or '?'))
        if nb in m.blocks():
            expect_served(m, nb, nd, 'a block whose shard was a file, remounted')
        for bid, d in blocks.items():
            expect_served(m, bid, d, 'a good block')
        pb.done()


@case(timeout=30)
def test_undecodable_chunk():
    """A compressed block whose chunk, chunk checksum, payload checksum and header checksum
    all match, but the chunk does not decode (a writer's bug, another codec version): the
    read fails with EIO and no wrong byte, the file is moved to quarantine and counted (as
    for any damaged block), and the block is not listed any more."""
    with Mount() as m:
        blocks, files, inf = store_of(m, [('kv', 700 * KiB + 5, 30 + i) for i in range(3)])
        b = next((b for b in sorted(blocks) if inf[b]['codec'] != CODEC_RAW and
                  inf[b]['nchunks'] >= 2 and inf[b]['chunks'][1] < inf[b]['chunk_size']), None)
        check(b is not None, 'setup: no block with a compressed second chunk: %s' % inf)
        forge_chunk(files[b], 1)
        m.start()
        what = 'a chunk with right checksums that does not decode'
        pb = Problems()
        for k in range(2):
            r = probe(m.path(b))
            check(not r.get('hang'), '%s: the read hangs' % what)
            check('n' not in r or 'read_err' in r, '%s: SERVED (%s)' % (what, describe(r)))
            check(r.get('open_err', r.get('read_err')) in ((errno.EIO,) if k == 0 else
                                                           (errno.EIO, errno.ENOENT)),
                  '%s: %s, not EIO' % (what, describe(r)))
            if 'n' in r:
                check(hashlib.sha256(blocks[b][:r['n']]).hexdigest() == r['sha'],
                      '%s: WRONG BYTES before the EIO' % what)
        pb.check(quarantined(m.store, b), '%s: EIO at every read, but never moved to '
                 'quarantine' % what)
        pb.check(counter(m, 'ucmfs_quarantined_total') == 1, '%s: ucmfs_quarantined_total = '
                 '%g' % (what, counter(m, 'ucmfs_quarantined_total')))
        pb.check(b not in m.blocks(), '%s: still listed after the EIO' % what)
        pb.check(files[b] in m.log_text(), '%s: nothing in the log' % what)
        for bid in blocks:
            if bid != b:
                expect_served(m, bid, blocks[bid], 'a good block beside it')
        keeps_answering(m, 'after an undecodable chunk')
        pb.done()


@case(timeout=45)
def test_damaged_while_mounted():
    """Block files damaged while the daemon runs (blocks on disk only, after a remount):
    replaced by a FIFO, a socket, a directory, a symlink to /etc/passwd, a symlink to another
    block's file; truncated to nothing; removed by someone else. An open or read of each
    answers within seconds (never parks a thread of the daemon), serves nothing wrong, the
    file is moved to quarantine, counted and logged, and the block is not listed any more;
    the other blocks are served, and the FS keeps answering and unmounts."""
    with Mount() as m:
        blocks = write_blocks(m, [('kv' if i % 2 else 'rnd', 300 * KiB + 11 * i, 300 + i)
                                  for i in range(10)])
        m.remount()                                           # disk only now
        ids = sorted(blocks)
        st = m.store
        files = {b: block_file(st, b) for b in ids}
        damaged = {}
        for bid, kind in zip(ids, ('FIFO', 'socket', 'directory', 'symlink to /etc/passwd')):
            os.unlink(files[bid])
            make_odd(files[bid], kind)
            damaged[bid] = 'a ' + kind
        os.unlink(files[ids[4]])
        os.symlink(files[ids[5]], files[ids[4]])
        damaged[ids[4]] = 'a symlink to another block\'s file'
        os.truncate(files[ids[6]], 0)
        damaged[ids[6]] = 'a truncation to 0 bytes'
        passwd = open('/etc/passwd', 'rb').read()
        pb = Problems()
        for bid, what in damaged.items():
            what = 'block file replaced while mounted by ' + what
            r = probe(m.path(bid))
            if r.get('hang'):
                pb.check(False, '%s: opening the block HANGS (a thread of the daemon waits '
                         'in open(2) for a writer of the FIFO; unblocked by the test)' % what)
                os.close(os.open(files[bid], os.O_WRONLY | os.O_NONBLOCK))
                r = finish(r)
            check(not r.get('hang'), '%s: the read hangs' % what)
            check('n' not in r or 'read_err' in r, '%s: SERVED (%s)' % (what, describe(r)))
            if 'n' in r:
                check(hashlib.sha256(blocks[bid][:r['n']]).hexdigest() == r['sha'],
                      '%s: WRONG BYTES before the error' % what)
            e = r.get('open_err', r.get('read_err'))
            check(e in (errno.EIO, errno.ENOENT), '%s: %s' % (what, describe(r)))
            r = probe(m.path(bid))
            check('open_err' in r and r['open_err'] in (errno.ENOENT, errno.EIO),
                  '%s: a second open: %s' % (what, describe(r)))
            pb.check(quarantined(st, bid), '%s: not moved to quarantine (%s)' % (
                what, describe(r)))
            pb.check(bid not in m.blocks(), '%s: still listed after the error' % what)
            pb.check(files[bid] in m.log_text(), '%s: nothing in the log' % what)
        check(open('/etc/passwd', 'rb').read() == passwd, '/etc/passwd was changed')
        n = counter(m, 'ucmfs_quarantined_total')
        pb.check(n == len(damaged), 'ucmfs_quarantined_total = %g for %d damaged files' % (
            n, len(damaged)))
        # removed behind the daemon's back: absent (there is nothing to quarantine)
        os.unlink(files[ids[7]])
        r = probe(m.path(ids[7]))
        check('open_err' in r and r['open_err'] in (errno.ENOENT, errno.EIO),
              'a block file removed while mounted: %s' % describe(r))
        pb.check(ids[7] not in m.blocks(), 'a block whose file was removed while mounted is '
                 'still listed after its open failed with ENOENT')
        for bid in ids[5:6] + ids[8:]:
            expect_served(m, bid, blocks[bid], 'an undamaged block')
        keeps_answering(m, 'after damage while mounted')
        pb.done()


@case(timeout=30)
def test_store_directory_oddities():
    """Damage above the shard directories. STORE a regular file, STORE/data a regular file
    (with and without x bits) or a symlink to one, STORE/.lock.<host> a directory: ucmfs
    exits 1 with one line naming the path and saying what is wrong. STORE/quarantine a
    regular file: the mount works, a damaged block is still never served and is counted."""
    top = tempfile.mkdtemp(prefix='ucmfs-hostile-')
    pb = Problems()

    def refusal(store, want):
        try:
            refused(store, want)
        except AssertionError as e:
            pb.check(False, str(e))

    try:
        s = os.path.join(top, 'file')
        with open(s, 'w') as f:
            f.write('x')
        refusal(s, 'not a directory')
        for mode, link in ((0o644, False), (0o755, False), (0o644, True)):
            s = os.path.join(top, 'data%o%s' % (mode, 'link' if link else ''))
            os.mkdir(s)
            target = os.path.join(top, 'target%o%d' % (mode, link))
            with open(target, 'w') as f:
                f.write('x')
            os.chmod(target, mode)
            if link:
                os.symlink(target, os.path.join(s, 'data'))
            else:
                os.rename(target, os.path.join(s, 'data'))
            refusal(s, 'not a directory')
        s = os.path.join(top, 'lockdir')
        os.makedirs(os.path.join(s, 'data'))
        os.mkdir(os.path.join(s, '.lock.' + host_name()))
        refusal(s, '.lock.' + host_name())
    finally:
        subprocess.run(['rm', '-rf', '--one-file-system', top])
    with Mount() as m:
        blocks = write_blocks(m, [('kv', 600 * KiB, 400), ('rnd', 300 * KiB, 401),
                                  ('rnd', 100 * KiB, 402)])
        m.unmount()
        with open(quarantine_dir(m.store), 'w') as f:
            f.write('not a directory\n')
        a, b, c = sorted(blocks)
        os.truncate(block_file(m.store, a), 100)
        m.start()
        check(sorted(m.blocks()) == [b, c], 'listing: %s' % m.blocks())
        check(counter(m, 'ucmfs_quarantined_total') == 1, 'a damaged header with '
              'STORE/quarantine a file: ucmfs_quarantined_total = %g' %
              counter(m, 'ucmfs_quarantined_total'))
        flip(block_file(m.store, b), HEADER + 1000)
        expect_not_served(m, b, blocks[b], 'a damaged payload with STORE/quarantine a file')
        expect_served(m, c, blocks[c], 'a good block')
        keeps_answering(m, 'with STORE/quarantine a file')
    pb.done()


def wait_for(pred, timeout):
    end = time.monotonic() + timeout * SLOW
    while not pred():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def timed_write(path, data, limit=5):
    """try_write, and how long it took; a write that takes over `limit` s fails the case (a
    daemon that stalls each write for tens of seconds is as good as hung)."""
    t = time.monotonic()
    err = try_write(path, data, chunk=256 * KiB)
    dt = time.monotonic() - t
    check(dt < limit * SLOW, 'a write of %d bytes took %.1fs to %s' % (
        len(data), dt, 'succeed' if err is None else 'fail at %s with %s' % (
            err[0], errname(err[1]))))
    return err


@case(timeout=45)
def test_full_disk():
    """STORE on an 8 MiB tmpfs. 24 MiB of blocks: the coldest are evicted, every write
    succeeds, every listed block is whole. Then every block is removed and the tmpfs filled
    by someone else: new writes succeed (held in memory) or fail with ENOSPC at once (never
    another error, never a stall, never a torn block); the failed disk writes are counted;
    once the space is back, writes work again at once, and a clean unmount writes the blocks
    committed while the disk was full, so they are there after a remount."""
    with Mounts() as mm:
        fs = mm.tmpfs('8m')
        with Mount('mem_size=2M', store=os.path.join(fs, 'store')) as m:
            order, blocks = [], {}
            for i in range(24):
                d = kv_bytes(MiB, 500 + i) if i % 2 else pattern(MiB, 500 + i)
                bid = rand_id()
                err = timed_write(m.path(bid), d)
                check(err is None, 'write %d of 1 MiB on an 8 MiB disk: %s failed with %s' % (
                    i, err and err[0], err and errname(err[1])))
                order.append(bid)
                blocks[bid] = d
            # every dump done: a late one would evict a cold block after the listing below
            check(wait_until(lambda: counter(m, 'ucmfs_disk_queue_depth') == 0, 20),
                  'the disk writes of 24 blocks did not finish')
            listed = m.blocks()
            check(set(listed) <= set(order), 'unknown names listed')
            check(2 <= len(listed) < len(order), '%d of %d blocks of 1 MiB listed on an 8 MiB '
                  'disk' % (len(listed), len(order)))
            check(order[-1] in listed, 'the newest block was evicted')
            for bid in listed:
                expect_served(m, bid, blocks[bid], 'a block kept on the full disk')
            check(counter(m, 'ucmfs_tier_evictions_total') > 0, 'no eviction counted')
            # rm every block (the daemon has nothing left to evict), someone else fills it
            for bid in m.blocks():
                os.unlink(m.path(bid))
            filler = os.path.join(fs, 'filler')
            fill(filler)
            results = {}
            for i in range(6):
                d = pattern(MiB + 3, 600 + i)
                bid = rand_id()
                err = timed_write(m.path(bid), d)
                check(err is None or err[1] == errno.ENOSPC, 'a write on a full disk failed '
                      'at %s with %s, not ENOSPC' % (err and err[0], err and errname(err[1])))
                results[bid] = (d, err)
            listed = set(m.blocks())
            for bid, (d, err) in results.items():
                if err is None:
                    expect_served(m, bid, d, 'a block committed (held in memory) on a full '
                                  'disk')
                else:
                    check(bid not in listed, 'a block whose write failed with ENOSPC at %s is '
                          'listed' % err[0])
            kept = {bid: d for bid, (d, err) in results.items() if err is None}
            check(len(kept) < len(results), '6 MiB written to a full disk and 2 MiB of memory: '
                  'no ENOSPC')
            check(not kept or counter(m, 'ucmfs_dump_errors_total') > 0,
                  'blocks committed in memory on a full disk: no failed disk write counted')
            os.unlink(filler)
            nb = rand_id()
            nd = pattern(300 * KiB, 650)
            err = timed_write(m.path(nb), nd)
            check(err is None, 'a write once the space is back: %s failed with %s' % (
                err and err[0], err and errname(err[1])))
            keeps_answering(m, 'after the disk was full')
            m.remount()
            expect_served(m, nb, nd, 'a block written once space was back, remounted')
            lost = [bid for bid in kept if bid not in m.blocks()]
            check(not lost, '%d of %d blocks committed while the disk was full (close '
                  'returned 0) are gone after a clean unmount, though the disk had room '
                  'again before it' % (len(lost), len(kept)))
            for bid, d in kept.items():
                expect_served(m, bid, d, 'a block committed on the full disk, remounted')


@case(timeout=45)
def test_readonly_store():
    """A STORE on a read-only filesystem (ucmfs(8) does not say; ucmfs needs to write its
    lock and temp files): the mount is refused, also with -o ro, with exit status 1 and one
    line naming the store and saying "Read-only file system". A STORE whose data/ becomes
    read-only while mounted (a read-only bind mount over it): good blocks are read
    byte-exact, a new block is held in memory (the failed disk write counted), a damaged
    block is still never served (it cannot be moved to quarantine: the log says so), and once
    data/ is writable again the daemon answers, unmounts cleanly, and the block written
    meanwhile is on disk after a remount."""
    with Mounts() as mm:
        fs = mm.tmpfs('32m')
        store = os.path.join(fs, 'store')
        with Mount('', store=store) as m:
            blocks = write_blocks(m, [('kv', 600 * KiB, 800), ('rnd', 300 * KiB, 801),
                                      ('rnd', 77, 802), ('kv', MiB, 803)])
            m.unmount()
            mm.remount(fs, 'ro')
            refused(store, 'Read-only file system')
            refused(store, 'Read-only file system', extra_opts='ro')
            mm.remount(fs, 'rw')
            m.start()
            data = os.path.join(store, 'data')
            mm.bind(data, data)
            mm.remount(data, 'bind,ro')
            bad = max(blocks, key=lambda b: len(blocks[b]))
            ids = [bad] + sorted(b for b in blocks if b != bad)
            for bid in ids[1:]:
                expect_served(m, bid, blocks[bid], 'a good block on a read-only disk')
            nb = rand_id()
            nd = pattern(200 * KiB, 810)
            err = timed_write(m.path(nb), nd)
            check(err is None, 'a write while data/ is read-only (memory has room): %s failed '
                  'with %s' % (err and err[0], err and errname(err[1])))
            expect_served(m, nb, nd, 'a block written while the disk is read-only')
            # its disk write fails, is tried again (3 times in all) and given up or parked
            check(wait_for(lambda: counter(m, 'ucmfs_dump_errors_total') >= 3, 10),
                  'a block committed while data/ is read-only: %g failed disk writes counted, '
                  '3 expected' % counter(m, 'ucmfs_dump_errors_total'))
            time.sleep(0.2)
            # damage it under the read-only mount (the tmpfs below is writable)
            mm.umount(data)
            flip(block_file(store, bad), HEADER + info(block_file(store, bad))['stored'] // 2)
            mm.bind(data, data)
            mm.remount(data, 'bind,ro')
            expect_not_served(m, bad, blocks[bad], 'a damaged block on a read-only disk')
            check(counter(m, 'ucmfs_checksum_failures_total') >= 1,
                  'a damaged block on a read-only disk: no checksum failure counted')
            pb = Problems()
            pb.check(any(block_file(store, bad) in l and 'quarantine' in l
                         for l in m.log_text().splitlines()),
                     'a damaged block that cannot be moved to quarantine (read-only): nothing '
                     'in the log')
            mm.umount(data)
            keeps_answering(m, 'after data/ was read-only')
            m.remount()
            for bid in ids[1:]:
                expect_served(m, bid, blocks[bid], 'a good block after the read-only spell')
            # still in place (it could not be moved): found at read again, moved now
            expect_not_served(m, bad, blocks[bad], 'the damaged block, after a remount')
            check(quarantined(store, bad), 'the damaged block is not in quarantine once the '
                  'disk is writable again')
            pb.check(nb in m.blocks(), 'a block committed while data/ was read-only (close '
                     'returned 0) is gone after a clean unmount, though data/ was writable '
                     'again before it')
            if nb in m.blocks():
                expect_served(m, nb, nd, 'the block written while read-only')
            pb.done()


@case(timeout=30)
def test_ucm_layout_oddities():
    """layout=ucm (raw files, no header): a FIFO, a socket, a directory and a symlink named
    like blocks, a junk name and a file where a shard directory should be: the mount works,
    none of the odd entries is served or removed, each is logged and counted, the good blocks
    are served byte-exact, and a block of the shard that was a file survives a remount. A
    block file replaced by a FIFO while mounted does not hang the daemon."""
    with Mount('layout=ucm') as m:
        blocks = write_blocks(m, [('rnd', 100 * KiB, 900), ('kv', 300 * KiB, 901),
                                  ('rnd', 3, 902), ('rnd', 50 * KiB, 903)])
        m.unmount()
        st = m.store
        odd = {}
        for kind in ('FIFO', 'socket', 'directory', 'symlink to /etc/passwd'):
            bid = rand_id()
            p = os.path.join(st, bid[:3], bid)
            make_odd(p, kind)
            odd[bid] = (kind, p)
        ids = sorted(blocks)
        junk = os.path.join(st, ids[0][:3], 'NOT-A-BLOCK')
        with open(junk, 'w') as f:
            f.write('junk')
        used = set(os.listdir(st))
        shard = next(s for s in ('%03x' % k for k in range(4096)) if s not in used)
        with open(os.path.join(st, shard), 'w') as f:
            f.write('not a directory')
        m.start()
        check(sorted(m.blocks()) == ids, 'listing: %s' % m.blocks())
        for bid, (kind, p) in odd.items():
            expect_not_served(m, bid, None, 'layout=ucm: a %s named like a block' % kind)
            check(os.path.lexists(p), 'layout=ucm: a %s named like a block was removed' % kind)
        for bid, d in blocks.items():
            expect_served(m, bid, d, 'layout=ucm: a good block')
        pb = Problems()
        for bid, (kind, p) in odd.items():
            pb.check(p in m.log_text(), 'layout=ucm: a %s named like a block: nothing in the '
                     'log' % kind)
        pb.check(junk in m.log_text(), 'layout=ucm: a junk name: nothing in the log')
        pb.check(has_metric(m, 'ucmfs_skipped_entries_total') and
                 counter(m, 'ucmfs_skipped_entries_total') == len(odd) + 1,
                 'layout=ucm: %d entries skipped, ucmfs_skipped_entries_total = %s' % (
                     len(odd) + 1, has_metric(m, 'ucmfs_skipped_entries_total') and
                     counter(m, 'ucmfs_skipped_entries_total')))
        nb = other_id(shard)
        nd = pattern(50 * KiB, 904)
        write_file(m.path(nb), nd)
        m.remount()
        pb.check(nb in m.blocks(), 'layout=ucm: a block of a shard whose directory was a file '
                 'is lost at unmount')
        if nb in m.blocks():
            expect_served(m, nb, nd, 'layout=ucm: a block whose shard was a file, remounted')
        # a block file replaced by a FIFO while mounted (not read since the remount)
        f = os.path.join(st, ids[1][:3], ids[1])
        os.unlink(f)
        os.mkfifo(f)
        r = probe(m.path(ids[1]))
        if r.get('hang'):
            pb.check(False, 'layout=ucm: a block file replaced by a FIFO while mounted: '
                     'opening the block HANGS (unblocked by the test)')
            os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK))
            r = finish(r)
            check(not r.get('hang'), 'layout=ucm: a FIFO in place of a block file: still '
                  'hangs once the FIFO has a writer')
        else:
            check(r.get('open_err') in (errno.EIO, errno.ENOENT),
                  'layout=ucm: a FIFO in place of a block file: %s' % describe(r))
        keeps_answering(m, 'layout=ucm, after a FIFO in place of a block file')
        pb.done()


if __name__ == '__main__':
    run([test_damaged_block_files, test_not_block_files, test_file_in_place_of_shard,
         test_undecodable_chunk, test_damaged_while_mounted, test_store_directory_oddities,
         test_full_disk, test_readonly_store, test_ucm_layout_oddities])
