#!/usr/bin/env python3
"""A model checker for a ucmfs mount (in the spirit of fsx): random sequences of what users
do, from several processes at once, each result checked against a small model of what
DESIGN.md sections 3 and 4 and man/ucmfs.8 say must be visible.

What runs. One daemon on a fresh STORE, with options drawn from the seed: always a small
mem_size (1M-4M, so that blocks spill to the disk tier, are evicted and loaded back), and
sometimes durable, block_size, max_block, policy=lru|fifo, pipeline=cache:posix,
compress=zstd:1, io_depth. Several worker processes (3 by default) each own a set of block
ids that only they write, and all of them read every id. Their operations:
  - create a block: complete, or incomplete (close must fail EIO and publish nothing); sizes
    declared by ftruncate or fallocate, holes, chunks in shuffled order, O_EXCL, an O_RDWR
    writer reading back its reservation, two descriptors sharing one reservation, fsync
    before close, a TTL set on the writer's descriptor (hours, or a few ms: it must vanish);
  - replace a block: O_TRUNC, partial overwrite, resize with ftruncate, opened and closed
    unchanged (nothing published), O_EXCL (EEXIST);
  - read whole or by pread; hold a block open across later replacements and unlinks (the
    old bytes must stay); stat; unlink; touch; fsync of a committed block;
  - xattrs: user.ucm.ttl get/set/remove (hours, a few ms, none, bad values), the read-only
    attributes, unknown names; truncate, rename, link, mkdir, chmod, symlink (EPERM);
    invalid names (EINVAL, ENOENT); lookup queries under /.ucm/query (prefix, hits, last,
    prefetch, TTL extension, invalid contents, a query unlinked while open); readdir;
  - "shared" ids written by every worker with the same bytes (shared reservations).
Between rounds the mount is checked whole (listing, statfs), then left alone, cleanly
remounted, or its daemon SIGKILLed: at a random moment with operations under way, right
after a worker's durable commit (by that worker), or at the end of a round; a new daemon is
then started on the same STORE.

What is checked. A worker checks its own ids exactly: it keeps their current bytes, which
come from a seeded pattern of (version seed, length), so a failing sequence replays with the
same bytes. What a worker sees of another worker's ids (reads, stat, listing entries, query
answers) is checked by the parent against the owner's log: it must match a state of that id
that was visible at some moment of the call (a state is visible from the start of the
close/unlink that made it until the end of the one that replaced it). After a clean remount
every block is exactly as committed, TTLs included. After a SIGKILL (DESIGN.md section 3,
Durability; the man page, fsync(2)): a block whose commit was made durable (fsync before
close, fsync of the committed block, the durable option, or a clean unmount since) is
present in that version or a later one; any other version committed since may or may not be
there; nothing is ever torn, and an unlinked or expired block does not come back (a block
given a TTL of a few ms just before the kill may still be there, with at most that TTL left,
if the restart was quicker); an operation cut short by the kill may or may not have happened. STORE must hold no temp file
and nothing in quarantine afterwards. Hangs (no progress for 60 s) and daemon deaths are
failures too.

Replay. `python3 tests/mount/fsmodel.py --seed S --ops N` runs the same operations again (the
interleaving of the processes differs from run to run). On a failure it prints the seed and
the operations on the ids involved, then looks for the shortest sequence of operations that
fails the same way when run by one process on fresh mounts (the ids involved, prefixes, then
delta debugging); it prints it, saves it as JSON and names the command that replays it:
`python3 tests/mount/fsmodel.py --replay FILE` (add --shrink to look for a shorter one
again). Exit status 1 on a failure, 77 without FUSE.

Options: --seed S (default: fresh, printed; env UCM_FSMODEL_SEED), --ops N (all workers
together; env UCM_FSMODEL_OPS; default 5000), --minutes M (keep running new seeds, from S
on, for M minutes), --workers W (3), --ids K (ids per worker, 10), --shrink-seconds T (time
for the search of a shorter sequence, 120), --without KIND[,KIND...] (leave out kinds of
operations, to look past a known failure; see OP_KINDS; env UCM_FSMODEL_WITHOUT), -o OPTS
(mount options instead of those of the seed). Environment as for the other mount tests:
UCMFS_BIN, UCMFS_TEST_SLOW.
"""
import argparse
import errno
import hashlib
import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ucmtest  # noqa: E402
from ucmtest import KiB, MiB, SLOW, SANITIZER_MARKS, Mount  # noqa: E402

DEFAULT_OPS = 5000
OP_TIMEOUT = 60            # seconds (times SLOW) before an operation counts as hung
GLOBAL_TIMEOUT = 150       # seconds (times SLOW) for a remount or a restart
SLACK = 0.005              # seconds of clock slack around a TTL deadline
REMOUNT_SLACK = 0.1        # more after a trip of the deadline through the disk (wall clock)
CHUNK = 256 * KiB          # largest single write (one FUSE request, never split)
LONG_TTLS = [('7200000', 7200000), ('2h', 7200000), ('1d', 86400000), ('36000000', 36000000)]
SHORT_TTLS = [1, 3, 10, 40]
BAD_TTLS = ['abc', '-5', '12q', '', '1.5s']
RO_NAMES = ['user.ucm.tier', 'user.ucm.stored', 'user.ucm.codec', 'user.ucm.pins']
XNAMES = ['user.ucm.ttl'] + RO_NAMES
CODECS = ('raw', 'zstd', 'zstd+shuffle2', 'zstd+shuffle4')
QDIR = '.ucm/query'
# what --without can leave out: writes past max_block/block_size, TTLs of a few ms, two
# descriptors on one reservation, fallocate, queries, readdir, held readers, calls that must
# fail, shared ids, SIGKILLs, remounts, replacements of committed blocks, a declared size
# shrunk before the writes, re-creating an id at once after a failed close (with it left
# out, a worker waits 100 ms after a close that failed), changes of the TTL of committed
# blocks (setxattr, removexattr, a query's user.ucm.ttl)
OP_KINDS = ('efbig', 'shortttl', 'twofd', 'fallocate', 'query', 'readdir', 'hold', 'errors',
            'shared', 'kill9', 'remount', 'replace', 'redeclare', 'eio-reuse', 'ttl')


def now():
    return time.monotonic()


# --- block contents ---------------------------------------------------------------------------

def content(vseed, n):
    """The bytes of a write with version seed vseed: n bytes, a prefix of one fixed stream.
    One seed in four gives compressible bytes (a short random run repeated)."""
    r = random.Random(vseed)
    if vseed % 4 == 0:
        run = r.randbytes(r.randrange(16, 300))
        return (run * (n // len(run) + 1))[:n]
    return r.randbytes(n)


def digest(data):
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def key_of(data):
    """What identifies a state of an id: None (absent) or [size, digest]."""
    return None if data is None else [len(data), digest(data)]


def show_key(k):
    return 'absent' if k is None else '%d bytes #%s' % (k[0], k[1][:8])


def make_id(*parts):
    return hashlib.blake2b('/'.join(map(str, parts)).encode(), digest_size=16).hexdigest()


# --- configuration ----------------------------------------------------------------------------

def config_for(seed, workers, ids_per_worker, opts=None):
    """Mount options and ids of a run, all from the seed."""
    r = random.Random('config-%d' % seed)
    o = ['mem_size=%s' % r.choice(['1M', '2M', '2M', '4M'])]
    block_size = max_block = 0
    if r.random() < 0.3:
        o.append('policy=%s' % r.choice(['lru', 'fifo']))
    if r.random() < 0.2:
        o.append('pipeline=cache:posix')
    elif r.random() < 0.2:
        o.append('compress=zstd:1')
    if r.random() < 0.2:
        o.append('durable')
    x = r.random()
    if x < 0.12:
        block_size = r.choice([64 * KiB, 256 * KiB + 4096])
        o.append('block_size=%dK' % (block_size // KiB))
    elif x < 0.35:
        max_block = MiB
        o.append('max_block=1M')
    if r.random() < 0.2:
        o.append('io_depth=%d' % r.choice([1, 2, 8]))
    if opts is not None:
        o = [w for w in opts.split(',') if w]
        block_size = max_block = 0
        for w in o:
            if w.startswith('block_size='):
                block_size = parse_size(w.split('=', 1)[1])
            if w.startswith('max_block='):
                max_block = parse_size(w.split('=', 1)[1])
    limit = block_size or max_block or 256 * MiB
    own = [[make_id('own', seed, w, k) for k in range(ids_per_worker)] for w in range(workers)]
    return {
        'seed': seed, 'opts': ','.join(o), 'durable': 'durable' in o,
        'block_size': block_size, 'max_block': max_block, 'limit': limit,
        'big': min(3 * MiB // 2, limit) if not block_size else block_size,
        'own': own,
        'shared': [make_id('shared', seed, k) for k in range(3)],
        'ghosts': [make_id('ghost', seed, k) for k in range(3)],
    }


def parse_size(s):
    mult = {'K': KiB, 'M': MiB, 'G': 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def shared_seed(bid):
    return int(bid[:12], 16) * 4 + 1       # never compressible; fixed per id


def shared_size(bid, cfg):
    return cfg['block_size'] or 1000 + int(bid[12:16], 16) % (300 * KiB)


# --- failures ---------------------------------------------------------------------------------

class Failure(Exception):
    """ucmfs did something the model does not allow. cat: a short category (errno, bytes,
    size, visible, ttl, xattr, crash, stale, listing, statfs, daemon, hang, store)."""

    def __init__(self, cat, msg):
        super().__init__(msg)
        self.cat = cat
        self.msg = msg


class Gone(Exception):
    """The daemon died under an operation (the parent killed it)."""


def ename(e):
    return 'ok' if not e else errno.errorcode.get(e, str(e))


def attempt(fn, *args):
    """(result, 0) or (None, errno)."""
    try:
        return fn(*args), 0
    except OSError as e:
        return None, e.errno


def pread_full(fd, n, off):
    out = []
    while n > 0:
        b = os.pread(fd, min(n, MiB), off)
        if not b:
            break
        out.append(b)
        off += len(b)
        n -= len(b)
    return b''.join(out)


def read_all(fd):
    return pread_full(fd, 1 << 40, 0)


def first_diff(a, b):
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            return i
    return min(len(a), len(b))


# --- the model of one process -----------------------------------------------------------------

class Ver:
    """A committed version: its bytes and TTL deadline range [lo, hi] (monotonic s) or None."""
    __slots__ = ('data', 'ttl', '_key')

    def __init__(self, data, ttl=None):
        self.data = data
        self.ttl = ttl
        self._key = None

    def key(self):
        if self._key is None:
            self._key = key_of(self.data)
        return self._key


class Session:
    """The model of one reservation (every writer descriptor of an id in this op)."""

    def __init__(self, base, committed, trunc):
        self.buf = bytearray(base)
        self.mask = bytearray(b'\x01' * len(base))
        self.declared = None
        self.modified = not committed or trunc
        self.refs = 1
        self.durable = False
        self.ttl = None             # ms or None

    def size(self):
        end = len(self.mask)
        return max(end, self.declared or 0)

    def write(self, off, data):
        end = off + len(data)
        if end > len(self.buf):
            self.buf.extend(bytes(end - len(self.buf)))
            self.mask.extend(bytes(end - len(self.mask)))
        self.buf[off:end] = data
        self.mask[off:end] = b'\x01' * len(data)
        self.modified = True

    def declare(self, size):
        self.declared = size
        del self.buf[size:]
        del self.mask[size:]
        while self.mask and self.mask[-1] == 0:    # the extents end where the last one does
            self.mask.pop()
        del self.buf[len(self.mask):]
        self.modified = True

    def complete(self, block_size):
        n = self.size()
        if block_size and n != block_size:
            return False
        return len(self.mask) == n and 0 not in self.mask

    def image(self):
        """What the writer reads back: written bytes, zeros elsewhere, up to size()."""
        out = bytearray(self.size())
        i, n = 0, len(self.mask)
        while i < n:
            j = self.mask.find(0, i)
            j = n if j < 0 else j
            out[i:j] = self.buf[i:j]
            i = self.mask.find(1, j)
            i = n if i < 0 else i
        return bytes(out)


class Executor:
    """Runs operations against the mount and checks each against the model.

    own: the ids this process writes (exact model); ghosts: ids nobody writes (always
    absent); everything else is observed (what was seen, when) for the parent to check
    against the owner's log. With single=True this process owns every id."""

    def __init__(self, mnt, cfg, wid, single):
        self.mnt = mnt
        self.cfg = cfg
        self.wid = wid
        self.single = single
        self.shared = set(cfg['shared'])
        self.ghosts = set(cfg['ghosts'])
        every = [b for w in cfg['own'] for b in w]
        if single:
            self.own = set(every) | self.shared | self.ghosts
        else:
            self.own = set(cfg['own'][wid]) | self.ghosts
        self.universe = set(every) | self.shared | self.ghosts
        self.cur = {b: None for b in self.own}
        self.possible = {b: [None] for b in self.own}
        self.slots = {}
        self.inflight = None
        self.settle = False
        self.kill_after_sync = None     # SIGKILL the daemon after this many durable commits
        self.short_ttl = {}             # id -> longest TTL of a few ms set since the restart
        self.daemon_pid = None
        self.killed_at = None
        self.hist = []              # [id, t0, t1, key]: a change of an owned id
        self.obs = []               # [id, t0, t1, kind, value, seq]: seen of another's id
        self.shared_w = {}          # shared id -> 'ok' or 'durable' (multi-process only)
        self.seq = 0
        self.qn = 0
        self.count = {}             # ops by kind, bytes checked, ... (for the summary)

    # -- helpers ---------------------------------------------------------------------------

    def path(self, bid):
        return os.path.join(self.mnt, bid)

    def owns(self, bid):
        return bid in self.own

    def fail(self, cat, msg):
        raise Failure(cat, msg)

    def want_err(self, got, want, what):
        wants = want if isinstance(want, tuple) else (want,)
        if got not in wants:
            self.fail('errno', '%s: got %s, the model expects %s' % (
                what, ename(got), '/'.join(ename(w) for w in wants)))

    def same_bytes(self, got, want, what, cat='bytes'):
        if got == want:
            self.count['bytes checked'] = self.count.get('bytes checked', 0) + len(got)
            return
        if len(got) != len(want):
            self.fail(cat, '%s: %d bytes read, %d expected (first difference at %d)' % (
                what, len(got), len(want), first_diff(got, want)))
        self.fail(cat, '%s: bytes differ from offset %d (of %d)' % (
            what, first_diff(got, want), len(want)))

    def observe(self, bid, t0, t1, kind, value=None):
        self.obs.append([bid, t0, t1, kind, value, self.seq])

    def changed(self, bid, t0, t1, ver):
        self.hist.append([bid, t0, t1, None if ver is None else ver.key()])

    def set_state(self, bid, ver, durable, t0, t1):
        self.cur[bid] = ver
        self.changed(bid, t0, t1, ver)
        if durable or self.cfg['durable']:
            self.possible[bid] = [ver.key()]
        elif ver.key() not in self.possible[bid]:
            self.possible[bid].append(ver.key())

    def alive(self, bid):
        """The owned version of bid (None if absent)."""
        return self.cur.get(bid)

    def check_ttl(self, bid, value, t0, t1, slack=SLACK):
        ver = self.alive(bid)
        if ver.ttl is None:
            if value != 'none':
                self.fail('ttl', 'user.ucm.ttl of %s is %r, the block has no TTL' % (bid, value))
            return
        lo, hi = ver.ttl
        try:
            left = int(value)
        except ValueError:
            self.fail('ttl', 'user.ucm.ttl of %s is %r, the block has a TTL' % (bid, value))
        most = (hi - t0 + slack) * 1000 + 1
        least = (lo - t1 - slack) * 1000 - 1
        if not least <= left <= most:
            self.fail('ttl', 'user.ucm.ttl of %s is %d ms; the model allows %d..%d' % (
                bid, left, max(0, int(least)), int(most)))

    # -- running ---------------------------------------------------------------------------

    def run(self, op):
        self.seq += 1
        self.count[op['k']] = self.count.get(op['k'], 0) + 1
        self.inflight = None
        try:
            getattr(self, 'op_' + op['k'])(op)
        except (Failure, OSError):
            if not self.mount_dead():
                raise
            self.interrupted()
            raise Gone()

    def mount_dead(self):
        try:
            os.statvfs(self.mnt)
        except OSError as e:
            return e.errno in (errno.ENOTCONN, errno.ECONNABORTED)
        return False

    def interrupted(self):
        """The daemon died during the op: the change it was making (self.inflight: id, the
        version or None it would leave, when the call started, whether that version may have
        expired already) may or may not have happened."""
        if self.inflight:
            bid, ver, t0, may_expire = self.inflight
            self.possible[bid].append(None if ver is None else ver.key())
            if may_expire:
                self.possible[bid].append(None)
            self.hist.append([bid, t0, now(), None if ver is None else ver.key()])
            self.cur[bid] = ver     # a guess; after_remount() finds out which it is

    def quiesce(self):
        for name in list(self.slots):
            fd = self.slots.pop(name)[0]
            try:
                os.close(fd)
            except OSError:
                pass

    # -- reading ---------------------------------------------------------------------------

    def op_read(self, op):
        bid = op['id']
        t0 = now()
        fd, err = attempt(os.open, self.path(bid), os.O_RDONLY)
        t1 = now()
        if self.owns(bid):
            ver = self.alive(bid)
            self.want_err(err, errno.ENOENT if ver is None else 0, 'open(%s, O_RDONLY)' % bid)
            if err:
                return
            want = ver.data
        elif err:
            self.want_err(err, errno.ENOENT, 'open(%s, O_RDONLY)' % bid)
            self.observe(bid, t0, t1, 'absent')
            return
        try:
            size = os.fstat(fd).st_size
            if self.owns(bid):
                if size != len(want):
                    self.fail('size', 'fstat of %s: st_size %d, expected %d' % (
                        bid, size, len(want)))
            else:
                want = read_all(fd)
                if size != len(want):
                    self.fail('size', 'fstat of %s (another process\'s): st_size %d, but %d '
                              'bytes read' % (bid, size, len(want)))
                self.observe(bid, t0, t1, 'content', key_of(want))
            for fo, fl in op['preads']:
                off = int(fo * len(want))
                n = max(1, int(fl * len(want)))
                got = pread_full(fd, n, off)
                self.same_bytes(got, want[off:off + n], 'pread of %d bytes at %d of %s' % (
                    n, off, bid))
            if op.get('whole'):
                self.same_bytes(read_all(fd), want, 'read of %s' % bid)
        finally:
            os.close(fd)

    def op_stat(self, op):
        bid = op['id']
        t0 = now()
        st, err = attempt(os.stat, self.path(bid))
        t1 = now()
        if self.owns(bid):
            ver = self.alive(bid)
            self.want_err(err, errno.ENOENT if ver is None else 0, 'stat(%s)' % bid)
            if ver is not None and st.st_size != len(ver.data):
                self.fail('size', 'stat(%s): st_size %d, expected %d' % (
                    bid, st.st_size, len(ver.data)))
        else:
            self.want_err(err, (0, errno.ENOENT), 'stat(%s)' % bid)
            if err:
                self.observe(bid, t0, t1, 'absent')
            else:
                self.observe(bid, t0, t1, 'size', st.st_size)
        if st is not None and st.st_mode != 0o100644:
            self.fail('errno', 'stat(%s): mode %o, expected 100644' % (bid, st.st_mode))

    def op_hold(self, op):
        """Open a block and keep it open: later reads must give these bytes whatever
        happens to the name meanwhile (replacement, unlink)."""
        bid, slot = op['id'], op['slot']
        if slot in self.slots:
            return
        t0 = now()
        fd, err = attempt(os.open, self.path(bid), os.O_RDONLY)
        t1 = now()
        if self.owns(bid):
            ver = self.alive(bid)
            self.want_err(err, errno.ENOENT if ver is None else 0, 'open(%s, O_RDONLY)' % bid)
            if err:
                return
            data = ver.data
            size = os.fstat(fd).st_size
            if size != len(data):
                os.close(fd)
                self.fail('size', 'fstat of %s: st_size %d, expected %d' % (
                    bid, size, len(data)))
        else:
            self.want_err(err, (0, errno.ENOENT), 'open(%s, O_RDONLY)' % bid)
            if err:
                self.observe(bid, t0, t1, 'absent')
                return
            try:
                data = read_all(fd)
            except OSError:
                os.close(fd)
                raise
            self.observe(bid, t0, t1, 'content', key_of(data))
        self.slots[slot] = (fd, bid, data)

    def op_hread(self, op):
        if op['slot'] not in self.slots:
            return
        fd, bid, data = self.slots[op['slot']]
        for fo, fl in op['preads']:
            off = int(fo * len(data))
            n = max(1, int(fl * len(data)))
            got = pread_full(fd, n, off)
            self.same_bytes(got, data[off:off + n], 'pread of %d bytes at %d by a descriptor '
                            'held open on %s' % (n, off, bid))
        size = os.fstat(fd).st_size
        if size != len(data):
            self.fail('size', 'fstat of a descriptor held open on %s: st_size %d, the version '
                      'it opened has %d' % (bid, size, len(data)))

    def op_release(self, op):
        if op['slot'] in self.slots:
            os.close(self.slots.pop(op['slot'])[0])

    def op_readdir(self, op):
        t0 = now()
        names = os.listdir(self.mnt)
        t1 = now()
        if '.ucm' not in names:
            self.fail('visible', 'readdir of / does not list .ucm')
        seen = set()
        for n in names:
            if n == '.ucm':
                continue
            if n not in self.universe:
                self.fail('visible', 'readdir lists %r, a name no process ever wrote' % n)
            if n in seen:
                self.fail('visible', 'readdir lists %s twice' % n)
            seen.add(n)
        for bid in sorted(self.universe):
            if self.owns(bid):
                if (self.alive(bid) is not None) != (bid in seen):
                    self.fail('visible', 'readdir: %s is %slisted but %s' % (
                        bid, '' if bid in seen else 'not ',
                        'absent' if self.alive(bid) is None else 'committed'))
            else:
                self.observe(bid, t0, t1, 'present' if bid in seen else 'absent')

    # -- writing ---------------------------------------------------------------------------

    def op_write(self, op):
        if not self.owns(op['id']):
            return self.shared_write(op)
        bid = op['id']
        path = self.path(bid)
        flags = op['flags']
        ver = self.alive(bid)
        committed = ver is not None
        mode = os.O_RDWR if op.get('rdwr') else os.O_WRONLY
        oflags = mode | (os.O_CREAT if 'c' in flags else 0) | \
            (os.O_EXCL if 'e' in flags else 0) | (os.O_TRUNC if 't' in flags else 0)
        what = 'open(%s, %s)' % (bid, flags_text(oflags))
        fd, err = attempt(os.open, path, oflags, 0o644)
        refused = errno.EEXIST if 'e' in flags and committed else \
            errno.ENOENT if 'c' not in flags and not committed else 0
        if refused:
            if fd is not None:
                os.close(fd)
            self.want_err(err, refused, what)
            return
        self.want_err(err, 0, what)
        s = Session(b'' if not committed or 't' in flags else ver.data, committed, 't' in flags)
        fds = {0: fd}
        pattern = content(op['vseed'], op['plen'])
        try:
            for step in op['steps']:
                self.write_step(op, s, fds, step, pattern)
            for i in sorted(fds):
                self.write_step(op, s, fds, ['close', i], pattern)
        finally:
            for fd in fds.values():
                try:
                    os.close(fd)
                except OSError:
                    pass

    def write_step(self, op, s, fds, step, pattern):
        """One step of a write op: open a second descriptor, write, declare a size
        (ftruncate, fallocate), fsync, set a TTL, read back, probe with O_EXCL, close."""
        bid = op['id']
        kind = step[0]
        if kind == 'open':
            if step[1] not in fds:
                self.open_second(op, s, fds, step[1])
            return
        fd = fds.get(step[1]) if len(step) > 1 else None
        if kind != 'probe' and fd is None:
            return                  # that descriptor was closed already
        if kind == 'w':
            off, n = step[2], step[3]
            data = pattern[off:off + n]
            got, err = attempt(os.pwrite, fd, data, off)
            what = 'pwrite(%s, %d bytes at %d)' % (bid, n, off)
            if off + n > self.cfg['limit']:
                # ucmfs(8): refused whole, like a write past RLIMIT_FSIZE; the reservation
                # stays as it was and may still commit
                self.want_err(err, errno.EFBIG, what)
                return
            self.want_err(err, 0, what)
            if got != n:
                self.fail('errno', '%s returned %d' % (what, got))
            s.write(off, data)
            self.count['bytes written'] = self.count.get('bytes written', 0) + n
        elif kind in ('tr', 'fa'):
            size = step[2]
            if kind == 'tr':
                _, err = attempt(os.ftruncate, fd, size)
                what = 'ftruncate(%s, %d)' % (bid, size)
            else:
                _, err = attempt(os.posix_fallocate, fd, 0, size)
                what = 'posix_fallocate(%s, 0, %d)' % (bid, size)
            if size > self.cfg['limit']:
                self.want_err(err, errno.EFBIG, what)
                return
            self.want_err(err, 0, what)
            if kind == 'tr' or size > s.size():
                s.declare(size)
        elif kind == 'sync':
            _, err = attempt(os.fsync, fd)
            self.want_err(err, 0, 'fsync of a writer of %s' % bid)
            s.durable = True
        elif kind == 'ttl':
            value = step[2]
            _, err = attempt(os.setxattr, fd, 'user.ucm.ttl', value.encode())
            ms = ttl_ms(value)
            self.want_err(err, errno.EINVAL if ms is None else 0,
                          'fsetxattr(writer of %s, user.ucm.ttl, %r)' % (bid, value))
            if ms is not None:
                s.ttl = ms or None
        elif kind == 'rb':
            want = s.image()
            got, err = attempt(pread_full, fd, len(want) + 4096, 0)
            self.want_err(err, 0, 'pread of an O_RDWR writer of %s' % bid)
            self.same_bytes(got, want, 'an O_RDWR writer reading back its reservation of %s'
                            % bid)
        elif kind == 'probe':
            fd2, err = attempt(os.open, self.path(bid), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                               0o644)
            if fd2 is not None:
                os.close(fd2)
            self.want_err(err, errno.EEXIST, 'open(%s, O_CREAT|O_EXCL) while it is being '
                          'written' % bid)
        elif kind == 'close':
            self.close_writer(op, s, fds, step[1])

    def open_second(self, op, s, fds, i):
        mode = os.O_RDWR if op.get('rdwr') else os.O_WRONLY
        fd, err = attempt(os.open, self.path(op['id']), mode | os.O_CREAT, 0o644)
        self.want_err(err, 0, 'a second open(%s, O_CREAT) of a block being written' % op['id'])
        fds[i] = fd
        s.refs += 1

    def close_writer(self, op, s, fds, i):
        bid = op['id']
        fd = fds.pop(i)
        ok = s.complete(self.cfg['block_size'])
        s.refs -= 1
        t0 = now()
        if ok and s.modified and not s.refs:
            # a TTL of a few ms may run out before a kill: then the block is absent
            self.inflight = (bid, Ver(bytes(s.buf)), t0, bool(s.ttl and s.ttl < 1000))
            if s.ttl and s.ttl < 1000:
                self.note_short_ttl(bid, s.ttl)
        _, err = attempt(os.close, fd)
        t1 = now()
        what = 'close of a writer of %s (%s%d bytes%s%s)' % (
            bid, 'declared, ' if s.declared is not None else '', s.size(),
            '' if ok else ', incomplete', ', %d writer(s) left' % s.refs if s.refs else '')
        self.want_err(err, 0 if ok else errno.EIO, what)
        self.inflight = None
        if err and self.settle:
            time.sleep(0.1)     # --without eio-reuse: let the kernel's RELEASE arrive
        if not s.refs:
            k = 'commits' if ok and s.modified else 'unchanged' if ok else 'EIO closes'
            self.count[k] = self.count.get(k, 0) + 1
        if s.refs or not ok or not s.modified:
            return
        data = bytes(s.buf)
        ttl = None
        if s.ttl:
            ttl = [t0 + s.ttl / 1000, t1 + s.ttl / 1000]
        ver = Ver(data, ttl)
        self.set_state(bid, ver, s.durable, t0, t1)
        if s.durable:
            self.made_durable()
        if s.ttl and s.ttl < 1000:
            self.expire(bid, ttl[1])

    def expire(self, bid, deadline):
        """The owned block bid expires at deadline: wait for it, then it is absent."""
        t0 = self.hist[-1][1] if self.hist and self.hist[-1][0] == bid else now()
        time.sleep(max(0, deadline + SLACK - now()))
        self.cur[bid] = None
        self.hist.append([bid, t0, now(), None])
        self.possible[bid] = [None]
        st, err = attempt(os.stat, self.path(bid))
        if not err:
            self.fail('visible', '%s is still there after its TTL ran out (st_size %d)' % (
                bid, st.st_size))

    def shared_write(self, op):
        """A block that every process writes with the same bytes (multi-process runs only):
        every step must succeed; the parent checks the block is there afterwards."""
        bid = op['id']
        fd, err = attempt(os.open, self.path(bid), os.O_WRONLY | os.O_CREAT, 0o644)
        self.want_err(err, 0, 'open(%s, O_CREAT) of a shared block' % bid)
        data = content(op['vseed'], op['plen'])
        synced = False
        try:
            for step in op['steps']:
                if step[0] == 'w':
                    got, err = attempt(os.pwrite, fd, data[step[2]:step[2] + step[3]], step[2])
                    self.want_err(err, 0, 'pwrite to a shared block %s' % bid)
                elif step[0] == 'sync':
                    _, err = attempt(os.fsync, fd)
                    self.want_err(err, 0, 'fsync of a writer of shared block %s' % bid)
                    synced = True
        except Failure:
            os.close(fd)
            raise
        _, err = attempt(os.close, fd)
        self.want_err(err, 0, 'close of a complete writer of shared block %s' % bid)
        if synced or self.shared_w.get(bid) == 'durable':
            self.shared_w[bid] = 'durable'
        else:
            self.shared_w[bid] = 'ok'

    # -- other operations ------------------------------------------------------------------

    def op_unlink(self, op):
        bid = op['id']
        t0 = now()
        self.inflight = (bid, None, t0, False)
        _, err = attempt(os.unlink, self.path(bid))
        t1 = now()
        ver = self.alive(bid)
        self.want_err(err, errno.ENOENT if ver is None else 0, 'unlink(%s)' % bid)
        self.inflight = None
        if ver is not None:
            self.cur[bid] = None
            self.changed(bid, t0, t1, None)
            self.possible[bid] = [None]     # removed from the disk tier before it returns

    def op_touch(self, op):
        bid = op['id']
        _, err = attempt(os.utime, self.path(bid))
        ver = self.alive(bid)
        self.want_err(err, errno.ENOENT if ver is None else 0, 'utime(%s)' % bid)
        if ver is not None:
            st = os.stat(self.path(bid))
            if st.st_size != len(ver.data):
                self.fail('size', 'after touch, st_size of %s is %d, expected %d' % (
                    bid, st.st_size, len(ver.data)))

    def op_fsync(self, op):
        """fsync of a committed block: durable once it returns."""
        bid = op['id']
        fd, err = attempt(os.open, self.path(bid), os.O_RDONLY)
        ver = self.alive(bid)
        self.want_err(err, errno.ENOENT if ver is None else 0, 'open(%s, O_RDONLY)' % bid)
        if err:
            return
        try:
            _, err = attempt(os.fsync, fd)
            self.want_err(err, 0, 'fsync of committed block %s' % bid)
        finally:
            os.close(fd)
        self.possible[bid] = [ver.key()]
        self.made_durable()

    def made_durable(self):
        """A block was just made durable: SIGKILL the daemon now if asked to (it is the
        moment a durability bug loses a block: its disk write may still be under way)."""
        if self.kill_after_sync is None:
            return
        self.kill_after_sync -= 1
        if self.kill_after_sync == 0:
            self.kill_after_sync = None
            os.kill(self.daemon_pid, signal.SIGKILL)
            self.killed_at = now()

    def op_getx(self, op):
        bid, name = op['id'], op['name']
        ver = self.alive(bid)
        t0 = now()
        if name == 'list':
            got, err = attempt(os.listxattr, self.path(bid))
        else:
            got, err = attempt(os.getxattr, self.path(bid), name)
        t1 = now()
        what = 'getxattr(%s, %s)' % (bid, name)
        if ver is None:
            self.want_err(err, errno.ENOENT, what)
            return
        if name not in XNAMES and name != 'list':
            self.want_err(err, errno.ENODATA, what)
            return
        self.want_err(err, 0, what)
        if name == 'list':
            if sorted(got) != sorted(XNAMES):
                self.fail('xattr', 'listxattr(%s) is %r' % (bid, got))
            return
        value = got.decode()
        if name == 'user.ucm.ttl':
            self.check_ttl(bid, value, t0, t1)
        elif name == 'user.ucm.tier':
            if value not in ('mem', 'disk', 'mem,disk'):
                self.fail('xattr', '%s is %r' % (what, value))
        elif name == 'user.ucm.codec':
            if value not in CODECS:
                self.fail('xattr', '%s is %r' % (what, value))
        elif not value.isdigit():
            self.fail('xattr', '%s is %r, not a number' % (what, value))

    def note_short_ttl(self, bid, ms):
        """A TTL of ms (a few ms) is about to be set on bid: after a kill, a restart quicker
        than that TTL may still find the block, with at most ms left of it."""
        self.short_ttl[bid] = max(self.short_ttl.get(bid, 0), ms)

    def op_setx(self, op):
        bid, name, value = op['id'], op['name'], op.get('value')
        ver = self.alive(bid)
        t0 = now()
        if value is None:
            _, err = attempt(os.removexattr, self.path(bid), name)
            what = 'removexattr(%s, %s)' % (bid, name)
        else:
            _, err = attempt(os.setxattr, self.path(bid), name, value.encode())
            what = 'setxattr(%s, %s, %r)' % (bid, name, value)
        t1 = now()
        if ver is None:
            self.want_err(err, errno.ENOENT, what)
            return
        if name in RO_NAMES:
            self.want_err(err, errno.EPERM, what)
            return
        if name != 'user.ucm.ttl':
            self.want_err(err, errno.ENODATA if value is None else errno.ENOTSUP, what)
            return
        ms = 0 if value is None else ttl_ms(value)
        if ms and ms < 1000:
            self.inflight = (bid, None, t0, False)
            self.note_short_ttl(bid, ms)
        self.want_err(err, errno.EINVAL if ms is None else 0, what)
        self.inflight = None
        if ms is None:
            return
        ver.ttl = [t0 + ms / 1000, t1 + ms / 1000] if ms else None
        if ms and ms < 1000:
            self.changed(bid, t0, t1, ver)      # the same state, for the history's order
            self.expire(bid, t1 + ms / 1000)

    def op_errors(self, op):
        """Calls that must fail: invalid names, namespace changes, truncate."""
        bid, what = op['id'], op['what']
        p = self.path(bid)
        ver = self.alive(bid) if self.owns(bid) else None
        if what == 'upper':
            name = 'A' + bid[1:]
            _, err = attempt(os.open, self.path(name), os.O_WRONLY | os.O_CREAT, 0o644)
            self.want_err(err, errno.EINVAL, 'create of %s (uppercase)' % name)
            _, err = attempt(os.stat, self.path(name))
            self.want_err(err, errno.ENOENT, 'stat of %s (uppercase)' % name)
        elif what == 'short':
            _, err = attempt(os.open, self.path(bid[:31]), os.O_WRONLY | os.O_CREAT, 0o644)
            self.want_err(err, errno.EINVAL, 'create of a 31-character name')
            _, err = attempt(os.unlink, self.path(bid[:31]))
            self.want_err(err, errno.ENOENT, 'unlink of a 31-character name')
        elif what == 'mkdir':
            _, err = attempt(os.mkdir, p)
            self.want_err(err, errno.EEXIST if ver else errno.EPERM, 'mkdir(%s)' % bid)
        elif what == 'truncate':
            _, err = attempt(os.truncate, p, op.get('size', 0))
            self.want_err(err, errno.EPERM if ver else errno.ENOENT, 'truncate(%s)' % bid)
        elif what == 'rename':
            _, err = attempt(os.rename, p, self.path(op['to']))
            self.want_err(err, errno.EPERM if ver else errno.ENOENT, 'rename(%s)' % bid)
        elif what == 'link':
            _, err = attempt(os.link, p, self.path(op['to']))
            self.want_err(err, errno.EPERM if ver else errno.ENOENT, 'link(%s)' % bid)
        elif what == 'chmod':
            _, err = attempt(os.chmod, p, 0o600)
            self.want_err(err, errno.EPERM if ver else errno.ENOENT, 'chmod(%s)' % bid)
        elif what == 'symlink':
            _, err = attempt(os.symlink, 'x', self.path(op['to']))
            self.want_err(err, errno.EPERM, 'symlink(%s)' % op['to'])

    # -- queries ---------------------------------------------------------------------------

    def qfile(self, text, early_unlink):
        """Create a query file with text; returns (path or fd, cleanup)."""
        self.qn += 1
        p = os.path.join(self.mnt, QDIR, 'fsm%d-%d-%d' % (self.wid, os.getpid(), self.qn))
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        if early_unlink:
            os.unlink(p)
        data = text.encode()
        off = 0
        while off < len(data):
            off += os.pwrite(fd, data[off:off + 65536], off)
        if early_unlink:
            return fd, lambda: os.close(fd)
        os.close(fd)
        return p, lambda: os.unlink(p)

    def op_query(self, op):
        ids = op['ids']
        text = join_ids(ids, op['sep'])
        target, done = self.qfile(text, op.get('early'))
        try:
            if op.get('prefetch'):
                v = os.getxattr(target, 'user.ucm.prefetch').decode()
                if v != 'none':
                    self.fail('xattr', 'user.ucm.prefetch of a new query is %r' % v)
                os.setxattr(target, 'user.ucm.prefetch', b'1')
            for g in op['get']:
                t0 = now()
                got, err = attempt(os.getxattr, target, 'user.ucm.' + g)
                t1 = now()
                self.want_err(err, 0, 'getxattr(query of %d ids, user.ucm.%s)' % (len(ids), g))
                self.check_answer(ids, g, got.decode(), t0, t1)
            if op.get('prefetch'):
                v = os.getxattr(target, 'user.ucm.prefetch').decode()
                if v not in ('pending', 'done'):
                    self.fail('xattr', 'user.ucm.prefetch after a set is %r' % v)
        finally:
            done()

    def check_answer(self, ids, g, value, t0, t1):
        what = 'user.ucm.%s of a query of %d ids' % (g, len(ids))

        def present(i, yes):
            """ids[i] was seen present (yes) or absent; False if the model says no."""
            bid = ids[i]
            if self.owns(bid):
                return (self.alive(bid) is not None) == yes
            self.observe(bid, t0, t1, 'present' if yes else 'absent')
            return True

        def model_text():
            return ''.join('?' if not self.owns(b) else '1' if self.alive(b) else '0'
                           for b in ids)

        if g == 'hits':
            if len(value) != len(ids) or set(value) - set('01'):
                self.fail('visible', '%s is %r' % (what, value))
            for i, c in enumerate(value):
                if not present(i, c == '1'):
                    self.fail('visible', '%s is %s, the model says %s (? = another '
                              'process\'s)' % (what, value, model_text()))
        elif g == 'prefix':
            p = int(value)
            ok = 0 <= p <= len(ids) and all(present(i, True) for i in range(p)) and \
                (p == len(ids) or present(p, False))
            if not ok:
                self.fail('visible', '%s is %d, the model says %s' % (what, p, model_text()))
        elif g == 'last':
            last = int(value)
            ok = -1 <= last < len(ids) and (last < 0 or present(last, True)) and \
                all(present(i, False) for i in range(last + 1, len(ids)))
            if not ok:
                self.fail('visible', '%s is %d, the model says %s' % (what, last,
                                                                      model_text()))

    def op_qttl(self, op):
        """Extend the TTLs of listed blocks: later of own deadline and now + value."""
        ids = [b for b in op['ids'] if self.owns(b)]
        target, done = self.qfile(join_ids(ids, 'sp'), False)
        try:
            t0 = now()
            _, err = attempt(os.setxattr, target, 'user.ucm.ttl', op['value'].encode())
            t1 = now()
            self.want_err(err, 0, 'setxattr(query, user.ucm.ttl, %s)' % op['value'])
        finally:
            done()
        ms = ttl_ms(op['value'])
        for bid in set(ids):
            ver = self.alive(bid)
            if ver is not None and ver.ttl is not None:
                ver.ttl = [max(ver.ttl[0], t0 + ms / 1000), max(ver.ttl[1], t1 + ms / 1000)]

    def op_qbad(self, op):
        target, done = self.qfile(op['text'], False)
        try:
            _, err = attempt(os.getxattr, target, 'user.ucm.hits')
            self.want_err(err, errno.EINVAL, 'getxattr(query holding %r, user.ucm.hits)'
                          % op['text'][:40])
            _, err = attempt(os.getxattr, target, 'user.ucm.nosuch')
            self.want_err(err, (errno.EINVAL, errno.ENODATA), 'getxattr(query, nosuch)')
        finally:
            done()

    # -- after a remount -------------------------------------------------------------------

    def after_remount(self, crashed):
        """Check every owned id after a clean remount (exactly as committed) or after the
        daemon was killed (one of the states it may be in, see the module docstring)."""
        self.quiesce()
        for bid in sorted(self.own):
            t0 = now()
            fd, err = attempt(os.open, self.path(bid), os.O_RDONLY)
            data = None
            if not err:
                try:
                    data = read_all(fd)
                finally:
                    os.close(fd)
            elif err != errno.ENOENT:
                self.fail('crash' if crashed else 'errno', 'open(%s) after the %s: %s' % (
                    bid, 'restart' if crashed else 'remount', ename(err)))
            ttl = None
            if data is not None:
                ttl, err = attempt(os.getxattr, self.path(bid), 'user.ucm.ttl')
                self.want_err(err, 0, 'getxattr(%s, user.ucm.ttl) after the remount' % bid)
                ttl = ttl.decode()
            t1 = now()
            got = key_of(data)
            if crashed:
                allowed = self.possible[bid]
                if got not in allowed:
                    self.fail('crash', '%s after the daemon was killed: %s; allowed: %s' % (
                        bid, show_key(got), ', '.join(show_key(k) for k in allowed)))
                ver = None
                if data is not None:
                    ver = Ver(data)
                    if ttl != 'none':
                        if int(ttl) < 60000 and int(ttl) > self.short_ttl.get(bid, 0):
                            self.fail('ttl', '%s came back after the restart with a TTL of %s '
                                      'ms; every TTL left before was hours' % (bid, ttl))
                        left = int(ttl) / 1000
                        ver.ttl = [t0 + left - REMOUNT_SLACK, t1 + left + REMOUNT_SLACK]
                self.cur[bid] = ver
            else:
                ver = self.alive(bid)
                if (data is None) != (ver is None):
                    self.fail('visible', '%s after a clean remount: %s, expected %s' % (
                        bid, show_key(got), show_key(key_of(ver.data if ver else None))))
                if ver is not None:
                    self.same_bytes(data, ver.data, '%s after a clean remount' % bid)
                    self.check_ttl(bid, ttl, t0, t1, REMOUNT_SLACK)
            self.possible[bid] = [key_of(data)]
            self.short_ttl.pop(bid, None)

    def keys(self):
        return {b: key_of(v.data if v else None) for b, v in self.cur.items()}


def ttl_ms(value):
    """The TTL in ms a value sets (0 = none), or None if the daemon must refuse it."""
    v = value.strip()
    if v == 'none':
        return 0
    units = {'': 1, 'ms': 1, 's': 1000, 'm': 60000, 'h': 3600000, 'd': 86400000}
    digits = len(v) - len(v.lstrip('0123456789'))
    if digits == 0 or v[digits:] not in units:
        return None
    return int(v[:digits]) * units[v[digits:]]


def flags_text(f):
    names = ['O_RDWR' if f & os.O_RDWR else 'O_WRONLY']
    for flag, name in ((os.O_CREAT, 'O_CREAT'), (os.O_EXCL, 'O_EXCL'), (os.O_TRUNC, 'O_TRUNC')):
        if f & flag:
            names.append(name)
    return '|'.join(names)


SEPS = {'nl': '\n', 'sp': ' ', 'tab': '\t', 'crlf': '\r\n', 'mix': ' \t\n', 'vt': '\x0b\x0c'}


def join_ids(ids, sep):
    if sep == 'pad':
        return '\n\n  ' + '\n'.join(ids) + '  \n\n'
    return SEPS[sep].join(ids)


# --- operation generator ----------------------------------------------------------------------

class Generator:
    """Draws operations for one worker from its own RNG and the state of its model."""

    def __init__(self, ex, rng, without):
        self.ex = ex
        self.r = rng
        self.cfg = ex.cfg
        self.without = without
        self.own = sorted(set(ex.cfg['own'][ex.wid]))
        self.others = sorted(b for w, ids in enumerate(ex.cfg['own']) if w != ex.wid
                             for b in ids)
        self.vseed = 0

    def new_vseed(self):
        self.vseed += 1
        v = int(make_id('v', self.cfg['seed'], self.ex.wid, self.vseed)[:12], 16)
        return v

    def size(self):
        r = self.r
        bs = self.cfg['block_size']
        if bs:
            odd = [0, 1, bs - 1, bs // 2] + ([] if 'efbig' in self.without else [bs + 1])
            return bs if r.random() < 0.85 else r.choice(odd)
        x = r.random()
        if x < 0.05:
            return 0
        if x < 0.3:
            return r.randrange(1, 4097)
        if x < 0.65:
            return r.randrange(4097, 64 * KiB)
        if x < 0.9:
            return r.randrange(64 * KiB, 512 * KiB)
        return r.randrange(512 * KiB, self.cfg['big'] + 1)

    def chunks(self, start, end):
        """[start, end) cut into writes of at most CHUNK bytes."""
        out, off = [], start
        while off < end:
            n = min(end - off, self.r.choice([4096, 65536, CHUNK, self.r.randrange(1, CHUNK)]))
            out.append([off, n])
            off += n
        return out

    def pick(self, pool):
        return self.r.choice(pool)

    def any_id(self):
        x = self.r.random()
        if x < 0.5 or not self.others:
            return self.pick(self.own)
        if x < 0.85:
            return self.pick(self.others)
        if x < 0.95:
            return self.pick(self.cfg['shared'])
        return self.pick(self.cfg['ghosts'])

    def preads(self):
        return [[round(self.r.uniform(0, 1.05), 3), round(self.r.uniform(0.0001, 1), 4)]
                for _ in range(self.r.randrange(0, 4))]

    def ttl_step(self):
        if 'shortttl' not in self.without and self.r.random() < 0.3:
            return ['ttl', 0, str(self.r.choice(SHORT_TTLS))]
        if self.r.random() < 0.1:
            return ['ttl', 0, self.r.choice(BAD_TTLS + ['none', '0'])]
        return ['ttl', 0, self.r.choice(LONG_TTLS)[0]]

    def write_new(self, bid):
        r = self.r
        n = self.size()
        op = {'k': 'write', 'id': bid, 'flags': 'c' + ('e' if r.random() < 0.3 else ''),
              'rdwr': r.random() < 0.25, 'vseed': self.new_vseed(), 'plen': n}
        steps = []
        declare = r.random()
        if declare < 0.35:
            steps.append(['tr', 0, n])
        elif declare < 0.45 and n and 'fallocate' not in self.without:
            steps.append(['fa', 0, n])
        writes = self.chunks(0, n)
        if r.random() < 0.4:
            r.shuffle(writes)
        if writes and r.random() < 0.15:
            del writes[r.randrange(len(writes))]         # incomplete, or a shorter block
        if r.random() < 0.05:
            writes = []                                 # touch NEWID
        if r.random() < 0.05 and n and 'redeclare' not in self.without:
            steps.append(['tr', 0, r.randrange(0, n + 1)])   # declared, then re-declared
        if self.cfg['max_block'] and 'efbig' not in self.without and r.random() < 0.06:
            lim = self.cfg['limit']
            writes.insert(r.randrange(len(writes) + 1), [lim - 1000, 3000])
            op['plen'] = max(n, lim + 2000)
        two = 'twofd' not in self.without and len(writes) > 1 and r.random() < 0.12
        if two:
            half = r.randrange(1, len(writes))
            steps.append(['open', 1])
            if r.random() < 0.5:
                steps.append(['tr', 1, n])
            steps += [['w', 0] + w for w in writes[:half]]
            order = [0, 1] if r.random() < 0.5 else [1, 0]
            if order[0] == 0 and r.random() < 0.5:
                steps.append(['close', 0])
                steps += [['w', 1] + w for w in writes[half:]]
            else:
                steps += [['w', 1] + w for w in writes[half:]]
            if r.random() < 0.2:
                steps.append(['sync', 1])
            steps += [['close', order[0]], ['close', order[1]]]
        else:
            steps += [['w', 0] + w for w in writes]
            if r.random() < 0.1:
                steps.append(['probe'])
            if op['rdwr']:
                steps.append(['rb', 0])
            if r.random() < 0.2:
                steps.append(['sync', 0])
            if r.random() < 0.15:
                steps.append(self.ttl_step())
            steps.append(['close', 0])
        op['steps'] = steps
        return op

    def replace(self, bid):
        r = self.r
        old = len(self.ex.alive(bid).data)
        op = {'k': 'write', 'id': bid, 'rdwr': r.random() < 0.25, 'vseed': self.new_vseed()}
        steps = []
        kind = r.random()
        if kind < 0.35:                                   # O_TRUNC, a new content
            n = self.size()
            op['flags'] = 't' + ('c' if r.random() < 0.5 else '')
            if r.random() < 0.3:
                steps.append(['tr', 0, n])
            writes = self.chunks(0, n)
            if r.random() < 0.3:
                r.shuffle(writes)
            if writes and r.random() < 0.08:
                del writes[r.randrange(len(writes))]
            if r.random() < 0.05:
                writes = []
            plen = n
        elif kind < 0.7:                                  # overwrite a part, maybe extend
            op['flags'] = r.choice(['', 'c'])
            writes = []
            for _ in range(r.randrange(1, 4)):
                off = r.randrange(0, old + 1)
                end = min(self.cfg['limit'], off + r.randrange(1, 128 * KiB))
                writes += self.chunks(off, end)
            if r.random() < 0.1 and old + 10000 <= self.cfg['limit']:
                writes.append([old + r.randrange(1, 5000), r.randrange(1, 5000)])  # a hole
            plen = max([o + n for o, n in writes] + [1])
        elif kind < 0.85:                                 # resize with ftruncate
            op['flags'] = r.choice(['', 'c'])
            n = self.size()
            steps.append(['tr', 0, n])
            writes = self.chunks(old, n) if n > old else []
            if writes and r.random() < 0.15:
                del writes[r.randrange(len(writes))]
            plen = max(n, 1)
        elif kind < 0.95:                                 # opened, closed unchanged
            op['flags'] = r.choice(['', 'c'])
            writes, plen = [], 1
        else:                                             # O_EXCL on a committed block
            op['flags'] = 'ce'
            writes, plen = [], 1
        op['plen'] = plen
        steps += [['w', 0] + w for w in writes]
        if op['rdwr']:
            steps.append(['rb', 0])
        if r.random() < 0.2:
            steps.append(['sync', 0])
        if r.random() < 0.12:
            steps.append(self.ttl_step())
        steps.append(['close', 0])
        op['steps'] = steps
        return op

    def shared_op(self):
        bid = self.pick(self.cfg['shared'])
        n = shared_size(bid, self.cfg)
        steps = [['w', 0] + w for w in self.chunks(0, n)]
        if self.r.random() < 0.2:
            steps.append(['sync', 0])
        steps.append(['close', 0])
        return {'k': 'write', 'id': bid, 'flags': 'c', 'vseed': shared_seed(bid), 'plen': n,
                'steps': steps}

    def query_ids(self):
        ids = [self.any_id() for _ in range(self.r.randrange(1, 13))]
        if self.r.random() < 0.3:
            present = [b for b in self.own if self.ex.alive(b) is not None]
            ids = present[:self.r.randrange(0, len(present) + 1)] + ids
        if self.r.random() < 0.2:
            ids.insert(self.r.randrange(len(ids) + 1), self.r.choice(ids))
        return ids

    def next(self):
        r = self.r
        ex = self.ex
        present = [b for b in self.own if ex.alive(b) is not None]
        absent = [b for b in self.own if ex.alive(b) is None]
        free = [s for s in ('w%ds%d' % (ex.wid, k) for k in range(3)) if s not in ex.slots]
        replace = 'replace' not in self.without
        menu = [('new', 14 if absent else 0), ('replace', 10 if present and replace else 0),
                ('shared', 2 if 'shared' not in self.without else 0), ('touchopen', 2),
                ('read', 18), ('stat', 5), ('hold', 4 if free and 'hold' not in self.without
                                            else 0),
                ('hread', 6 if ex.slots else 0), ('release', 3 if ex.slots else 0),
                ('unlink', 6), ('getx', 4),
                ('setx', 4 if present and 'ttl' not in self.without else 0),
                ('expire', 1.5 if present and 'shortttl' not in self.without else 0),
                ('touch', 3), ('fsync', 2), ('errors', 2 if 'errors' not in self.without
                                             else 0),
                ('query', 5 if 'query' not in self.without else 0),
                ('qttl', 1 if 'query' not in self.without and 'ttl' not in self.without
                 else 0),
                ('qbad', 1 if 'query' not in self.without else 0),
                ('readdir', 3 if 'readdir' not in self.without else 0)]
        total = sum(w for _, w in menu)
        x = r.uniform(0, total)
        for kind, w in menu:
            x -= w
            if x <= 0:
                break
        mine = self.pick(self.own)
        if kind == 'new':
            return self.write_new(self.pick(absent))
        if kind == 'replace':
            return self.replace(self.pick(present))
        if kind == 'shared':
            return self.shared_op()
        if kind == 'touchopen':
            return {'k': 'write', 'id': mine if replace else self.pick(absent or self.own),
                    'flags': 'c', 'vseed': 1, 'plen': 0, 'steps': [['close', 0]]}
        if kind == 'read':
            return {'k': 'read', 'id': self.any_id(), 'preads': self.preads(),
                    'whole': r.random() < 0.6}
        if kind == 'stat':
            return {'k': 'stat', 'id': self.any_id()}
        if kind == 'hold':
            return {'k': 'hold', 'id': self.any_id(), 'slot': r.choice(free)}
        if kind == 'hread':
            return {'k': 'hread', 'slot': r.choice(sorted(ex.slots)), 'preads': self.preads()
                    or [[0, 1]]}
        if kind == 'release':
            return {'k': 'release', 'slot': r.choice(sorted(ex.slots))}
        if kind == 'unlink':
            return {'k': 'unlink', 'id': mine}
        if kind == 'getx':
            return {'k': 'getx', 'id': mine,
                    'name': r.choice(XNAMES + ['user.ucm.ttl', 'user.other', 'list'])}
        if kind == 'setx':
            bid = self.pick(present)
            x = r.random()
            if x < 0.5:
                return {'k': 'setx', 'id': bid, 'name': 'user.ucm.ttl',
                        'value': r.choice(LONG_TTLS)[0]}
            if x < 0.65:
                return {'k': 'setx', 'id': bid, 'name': 'user.ucm.ttl',
                        'value': r.choice(['none', '0'])}
            if x < 0.75:
                return {'k': 'setx', 'id': bid, 'name': 'user.ucm.ttl', 'value': None}
            if x < 0.85:
                return {'k': 'setx', 'id': bid, 'name': 'user.ucm.ttl',
                        'value': r.choice(BAD_TTLS)}
            return {'k': 'setx', 'id': bid, 'name': r.choice(RO_NAMES + ['user.mine']),
                    'value': r.choice(['1', 'x', None])}
        if kind == 'expire':
            return {'k': 'setx', 'id': self.pick(present), 'name': 'user.ucm.ttl',
                    'value': str(r.choice(SHORT_TTLS))}
        if kind == 'touch':
            return {'k': 'touch', 'id': mine}
        if kind == 'fsync':
            return {'k': 'fsync', 'id': mine}
        if kind == 'errors':
            what = r.choice(['upper', 'short', 'mkdir', 'truncate', 'rename', 'link', 'chmod',
                             'symlink'])
            return {'k': 'errors', 'id': mine, 'what': what,
                    'to': self.pick(self.cfg['ghosts']), 'size': r.choice([0, 10])}
        if kind == 'query':
            return {'k': 'query', 'ids': self.query_ids(), 'sep': r.choice(sorted(SEPS) +
                                                                            ['pad']),
                    'get': r.sample(['hits', 'prefix', 'last'], r.randrange(1, 4)),
                    'prefetch': r.random() < 0.2, 'early': r.random() < 0.2}
        if kind == 'qttl':
            return {'k': 'qttl', 'ids': [self.pick(self.own) for _ in range(r.randrange(1, 5))],
                    'value': r.choice(LONG_TTLS)[0]}
        if kind == 'qbad':
            good = self.any_id()
            bad = r.choice([good.upper(), good[:30], good + 'a', 'hello', good + '\x00'])
            return {'k': 'qbad', 'text': good + '\n' + bad}
        return {'k': 'readdir'}


# --- worker process ---------------------------------------------------------------------------

def worker_main():
    """A worker: reads commands (JSON lines) on stdin, runs operations, reports on stdout."""
    out = sys.stdout
    ex = gen = None

    def send(msg):
        out.write(json.dumps(msg) + '\n')
        out.flush()

    for line in sys.stdin:
        cmd = json.loads(line)
        c = cmd['cmd']
        try:
            if c == 'init':
                ex = Executor(cmd['mnt'], cmd['cfg'], cmd['wid'], cmd['single'])
                ex.settle = 'eio-reuse' in cmd.get('without', [])
                gen = Generator(ex, random.Random('%d/%d' % (cmd['cfg']['seed'], cmd['wid'])),
                                set(cmd.get('without', [])))
                send({'ok': True})
            elif c in ('gen', 'run'):
                ops = cmd.get('ops')
                n = len(ops) if ops is not None else cmd['n']
                if cmd.get('kill_after_sync'):
                    ex.kill_after_sync = cmd['kill_after_sync']
                    ex.daemon_pid = cmd['daemon_pid']
                for i in range(n):
                    op = ops[i] if ops is not None else gen.next()
                    send({'s': ex.seq + 1, 't': now(), 'op': op})
                    try:
                        ex.run(op)
                    finally:
                        if ex.killed_at:
                            send({'killed': ex.killed_at})
                            ex.killed_at = None
                    send({'d': ex.seq})
                ex.kill_after_sync = None
                if cmd.get('kill_end'):
                    os.kill(cmd['daemon_pid'], signal.SIGKILL)
                    send({'killed': now()})
                if cmd.get('release'):
                    ex.quiesce()
                send({'end': True, 'hist': ex.hist, 'obs': ex.obs, 'keys': ex.keys(),
                      'shared': ex.shared_w, 'count': ex.count})
                ex.count = {}
                ex.hist, ex.obs, ex.shared_w = [], [], {}
            elif c == 'quiesce':
                ex.quiesce()
                send({'ok': True})
            elif c == 'after':
                ex.after_remount(cmd['crashed'])
                send({'end': True, 'hist': [], 'obs': [], 'keys': ex.keys(), 'shared': {}})
            elif c == 'exit':
                return
        except Gone:
            ex.quiesce()
            send({'end': True, 'gone': ex.seq, 'hist': ex.hist, 'obs': ex.obs, 'keys': {},
                  'shared': {}, 'count': ex.count})
            ex.count = {}
            ex.hist, ex.obs, ex.shared_w = [], [], {}
        except Failure as f:
            ex.quiesce()
            send({'fail': {'cat': f.cat, 'msg': f.msg, 'seq': ex.seq}})
        except OSError as e:
            ex.quiesce()
            cat = 'daemon' if e.errno in (errno.ENOTCONN, errno.ECONNABORTED) else 'errno'
            send({'fail': {'cat': cat, 'msg': 'unexpected error: %s' % e, 'seq': ex.seq}})
        except Exception:
            import traceback
            send({'fail': {'cat': 'internal', 'msg': 'fsmodel itself failed: %s' %
                           traceback.format_exc(), 'seq': ex.seq if ex else 0}})


# --- the parent -------------------------------------------------------------------------------

class Worker:
    """A worker process; its messages go to the queue q as (wid, message)."""

    def __init__(self, wid, q):
        self.wid = wid
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), '--worker'],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  bufsize=1)
        self.q = q
        self.cur = None          # the op under way: its 's' message
        threading.Thread(target=self.pump, daemon=True).start()

    def pump(self):
        for line in self.p.stdout:
            self.q.put((self.wid, json.loads(line)))
        self.q.put((self.wid, None))

    def send(self, msg):
        self.p.stdin.write(json.dumps(msg) + '\n')
        self.p.stdin.flush()

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


class Run:
    """One mount, its workers, and the trace of everything they did."""

    def __init__(self, cfg, nworkers, single, without):
        self.cfg = cfg
        self.single = single
        self.without = without
        self.nworkers = 1 if single else nworkers
        self.trace = []          # {'w', 'seq', 't', 'op'}: every op started, in order
        self.keys = {}           # id -> key at the last barrier
        self.shared = {b: None for b in cfg['shared']}    # None, 'ok' or 'durable'
        self.m = None
        self.workers = []
        self.q = queue.Queue()
        self.stats = {'ops': 0, 'remounts': 0, 'kills': 0, 'epochs': 0}
        self.count = {}
        self.gseq = 0

    # -- lifecycle -------------------------------------------------------------------------

    def start(self):
        self.m = Mount(self.cfg['opts'])
        self.m.start()
        for w in range(self.nworkers):
            wk = Worker(w, self.q)
            self.workers.append(wk)
            wk.send({'cmd': 'init', 'mnt': self.m.mnt, 'cfg': self.cfg, 'wid': w,
                     'single': self.single, 'without': sorted(self.without)})
            self.expect_ok(wk, 30)
        every = [b for ids in self.cfg['own'] for b in ids] + self.cfg['shared'] + \
            self.cfg['ghosts']
        self.keys = {b: None for b in every}

    def stop(self, clean):
        for wk in self.workers:
            if clean and wk.p.poll() is None:
                try:
                    wk.send({'cmd': 'exit'})
                    wk.p.wait(timeout=10)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            wk.kill()
        self.workers = []
        if self.m:
            try:
                if clean:
                    self.m.unmount()
            except AssertionError as e:
                raise Failure('daemon', str(e))
            finally:
                self.m.cleanup()

    def expect_ok(self, wk, timeout):
        msg = self.get(wk, timeout)
        if not isinstance(msg, dict) or not msg.get('ok'):
            raise Failure('daemon', 'worker %d: %r' % (wk.wid, msg))

    def get(self, wk, timeout):
        try:
            w, msg = self.q.get(timeout=timeout * SLOW)
            return msg if w == wk.wid else 'message from worker %d' % w
        except queue.Empty:
            return 'timeout'

    def daemon_check(self):
        if self.m.proc is None or self.m.proc.poll() is not None:
            text = self.m.log_text()
            mark = next((k for k in SANITIZER_MARKS if k in text), None)
            detail = text[max(0, text.index(mark) - 200):][:3000] if mark else text[-1500:]
            raise Failure('daemon', 'the daemon died (status %s): %s' % (
                self.m.proc.returncode if self.m.proc else '?', detail))

    # -- running operations ----------------------------------------------------------------

    def collect(self, cmds, kill_at=None, expect_kill=False):
        """Send each worker its command; gather their streams until every one ends.
        Returns the workers' end messages. Raises Failure on a failure or a hang. With
        kill_at (a time), SIGKILL the daemon then, whatever the workers are doing."""
        for wk, cmd in cmds:
            wk.cur = None
            wk.send(cmd)
        ends = {}
        pending = {wk.wid: wk for wk, _ in cmds}
        last = {w: now() for w in pending}
        killed = False
        self.kill_kind = None
        while pending:
            if kill_at is not None and not killed and now() >= kill_at:
                self.kill_kind = 'busy kills'
                self.gseq += 1
                self.trace.append({'w': 'G', 'seq': self.gseq, 't': now(),
                                   'op': {'k': 'kill9', 'busy': True}})
                self.m.proc.kill()
                self.m.proc.wait()
                killed = True
                last = {w: now() for w in pending}
            try:
                w, msg = self.q.get(timeout=0.02)
            except queue.Empty:
                w = msg = None
            if w is not None:
                wk = self.workers[w]
                if msg is None:
                    raise Failure('daemon', 'worker %d died: see its stderr' % w)
                last[w] = now()
                if 's' in msg:
                    wk.cur = msg
                    self.trace.append({'w': w, 'seq': msg['s'], 't': msg['t'],
                                       'op': msg['op']})
                    self.stats['ops'] += 1
                elif 'd' in msg:
                    wk.cur = None
                elif 'killed' in msg:
                    # this worker SIGKILLed the daemon right after a durable commit
                    self.gseq += 1
                    self.trace.append({'w': 'G', 'seq': self.gseq, 't': msg['killed'],
                                       'op': {'k': 'kill9', 'after_sync': w}})
                    self.m.proc.wait()
                    killed = True
                    self.kill_kind = 'sync kills'
                    last = {x: now() for x in pending}
                elif 'fail' in msg:
                    f = msg['fail']
                    err = Failure(f['cat'], 'worker %d, op %d: %s' % (w, f['seq'], f['msg']))
                    err.where = (w, f['seq'])
                    if killed or expect_kill:
                        err.msg += ' (the daemon was being SIGKILLed on purpose)'
                        raise err
                    try:
                        self.daemon_check()
                    except Failure as dead:
                        dead.msg += ' [worker %d, op %d: %s]' % (w, f['seq'], f['msg'])
                        dead.where = err.where
                        raise dead
                    raise err
                elif 'end' in msg:
                    if msg.get('gone') and not killed and self.killed_by_worker(expect_kill):
                        killed = True   # the killer's 'killed' message is on its way
                    if msg.get('gone') and not killed:
                        err = Failure('daemon', 'worker %d, op %d: the mount died under it'
                                      % (w, msg['gone']))
                        err.where = (w, msg['gone'])
                        self.daemon_check()
                        raise err
                    ends[w] = msg
                    del pending[w]
            for x, wk in pending.items():
                if now() - last[x] > OP_TIMEOUT * SLOW:
                    self.hang(wk)
            # one look at the daemon: a worker's SIGKILL may land between two (the process
            # is still exiting at the first), and only a death seen here is judged
            if pending and not killed and self.m.proc.poll() is not None:
                if self.killed_by_worker(expect_kill):
                    killed = True       # its 'killed' message is still on the way
                    continue
                self.daemon_check()
        return ends

    def killed_by_worker(self, expected):
        """A worker was to SIGKILL the daemon: has it? (The mount dies a moment before the
        process can be reaped.)"""
        if not expected:
            return False
        try:
            self.m.proc.wait(timeout=5)
            return True
        except subprocess.TimeoutExpired:
            return False

    def hang(self, wk):
        op = wk.cur['op'] if wk.cur else None
        lines = ['worker %d made no progress for %ds%s' % (
            wk.wid, OP_TIMEOUT * SLOW, ', during %s' % json.dumps(op) if op else '')]
        lines += proc_threads(wk.p.pid, 'worker')
        if self.m.proc:
            lines += proc_threads(self.m.proc.pid, 'daemon')
        err = Failure('hang', '\n  '.join(lines))
        err.where = (wk.wid, wk.cur['s']) if wk.cur else None
        raise err

    def epoch(self, n_per_worker, kill_after=None, kill_sync=None):
        """One round of operations by every worker; kill_after: SIGKILL the daemon that many
        seconds into it (the workers see their mount die), start a new one and check;
        kill_sync (worker, k): that worker SIGKILLs it right after its k-th durable commit."""
        cmds = [(wk, {'cmd': 'gen', 'n': n, 'release': True})
                for wk, n in zip(self.workers, n_per_worker)]
        if kill_sync:
            cmds[kill_sync[0]][1].update(kill_after_sync=kill_sync[1],
                                         daemon_pid=self.m.proc.pid)
        kill_at = None if kill_after is None else now() + kill_after
        self.absorb(self.collect(cmds, kill_at, bool(kill_sync)))
        self.stats['epochs'] += 1
        if kill_at is None and not kill_sync:
            return
        if self.m.proc is not None and self.m.proc.poll() is None:
            self.gseq += 1                       # every worker was done before kill_at
            self.trace.append({'w': 'G', 'seq': self.gseq, 't': now(), 'op': {'k': 'kill9'}})
        self.stats['kills'] += 1
        if self.kill_kind:
            self.stats[self.kill_kind] = self.stats.get(self.kill_kind, 0) + 1
        self.m.kill9()
        self.restart(True)

    def run_ops(self, ops, kill_end=False):
        """Run ops in the one worker (a replay); kill_end: it SIGKILLs the daemon right
        after the last one, then a new daemon starts and every block is checked."""
        cmd = {'cmd': 'run', 'ops': ops, 'release': False}
        if kill_end:
            cmd.update(kill_end=True, daemon_pid=self.m.proc.pid)
        self.absorb(self.collect([(self.workers[0], cmd)], expect_kill=kill_end))
        if kill_end:
            self.stats['kills'] += 1
            self.m.kill9()
            self.restart(True)

    def absorb(self, ends):
        """Check what the workers saw of each other against the owners' logs."""
        hist = {}
        for msg in ends.values():
            for bid, t0, t1, k in msg['hist']:
                hist.setdefault(bid, []).append((t0, t1, k))
        for w, msg in ends.items():
            for o in msg['obs']:
                self.check_obs(w, o, hist)
            self.stats['observations'] = self.stats.get('observations', 0) + len(msg['obs'])
            for k, v in msg.get('count', {}).items():
                self.count[k] = self.count.get(k, 0) + v
        for msg in ends.values():
            self.keys.update(msg['keys'])
            for bid, how in msg['shared'].items():
                if self.shared[bid] != 'durable':
                    self.shared[bid] = how
        if not self.single:
            for bid in self.cfg['shared']:
                if self.shared[bid] is not None:
                    self.keys[bid] = key_of(content(shared_seed(bid), shared_size(bid, self.cfg)))

    def check_obs(self, w, o, hist):
        bid, t0, t1, kind, value, seq = o
        if bid in self.cfg['shared']:
            want = key_of(content(shared_seed(bid), shared_size(bid, self.cfg)))
            ok = kind in ('absent', 'present') or \
                (kind == 'content' and value == want) or (kind == 'size' and value == want[0])
            if kind == 'absent' and self.keys.get(bid) is not None:
                ok = False
            if not ok:
                err = Failure('stale', 'worker %d, op %d: shared block %s seen %s %s; its only '
                              'content is %s' % (w, seq, bid, kind, value, show_key(want)))
                err.where = (w, seq)
                raise err
            return
        states = [(float('-inf'), self.keys.get(bid))]
        changes = sorted(hist.get(bid, []))
        for t_a, t_b, k in changes:
            states.append((t_a, k))
        ends = [t_b for _, t_b, _ in changes] + [float('inf')]
        for i, (start, k) in enumerate(states):
            if start > t1 or ends[i] < t0:
                continue
            if kind == 'absent' and k is None or kind == 'present' and k is not None or \
                    kind == 'content' and k == value or \
                    kind == 'size' and k is not None and k[0] == value:
                return
        seen = show_key(value) if kind == 'content' else \
            ('%d bytes' % value if kind == 'size' else kind)
        err = Failure('stale', 'worker %d, op %d: %s of another process seen as %s between '
                      '%.4f and %.4f; its states then: %s' % (
                          w, seq, bid, seen, t0, t1, '; '.join(
                              '%s from %.4f' % (show_key(k), s) for s, k in states)))
        err.where = (w, seq)
        raise err

    # -- between epochs --------------------------------------------------------------------

    def barrier_check(self):
        """Nobody is writing: the listing and statfs must match the models exactly."""
        names = set(n for n in os.listdir(self.m.mnt) if n != '.ucm')
        want = set(b for b, k in self.keys.items() if k is not None and
                   b not in self.cfg['shared'])
        want |= set(b for b in self.cfg['shared'] if self.shared_present(b))
        if names != want:
            raise Failure('listing', 'the listing with no writer at work: %d names, %d '
                          'expected; extra %s, missing %s' % (
                              len(names), len(want), sorted(names - want)[:3],
                              sorted(want - names)[:3]))
        # f_files may still count a block that expired until the sweep (every second)
        # reclaims it
        files = ucmtest.wait_until(lambda: os.statvfs(self.m.mnt).f_files == len(want) or None,
                                   2.5)
        if not files:
            raise Failure('statfs', 'statfs: f_files is %d, %d blocks are committed' % (
                os.statvfs(self.m.mnt).f_files, len(want)))

    def shared_present(self, bid):
        if self.single:
            return self.keys.get(bid) is not None
        return self.shared[bid] is not None

    def global_op(self, op):
        """A remount or a SIGKILL + restart (in the trace too), then every worker checks."""
        for wk in self.workers:
            wk.send({'cmd': 'quiesce'})
            self.expect_ok(wk, OP_TIMEOUT)
        self.gseq += 1
        self.trace.append({'w': 'G', 'seq': self.gseq, 't': now(), 'op': op})
        crashed = op['k'] == 'kill9'
        if crashed:
            self.m.kill9()
            self.stats['kills'] += 1
        self.restart(crashed, op)

    def restart(self, crashed, op=None):
        """Start the daemon again (after a kill) or remount; then every worker checks."""
        try:
            if crashed:
                self.m.start(timeout=GLOBAL_TIMEOUT)
            else:
                self.m.remount(wait=not op.get('fast'))
                self.stats['remounts'] += 1
        except AssertionError as e:
            err = Failure('daemon', '%s: %s' % ('restart' if crashed else 'remount', e))
            err.where = ('G', self.gseq)
            raise err
        try:
            self.store_check(crashed)
            ends = self.collect([(wk, {'cmd': 'after', 'crashed': crashed})
                                 for wk in self.workers])
            for msg in ends.values():
                self.keys.update(msg['keys'])     # after a crash: what each block is now
            if not self.single:
                for bid in self.cfg['shared']:
                    self.shared_after(bid, crashed)
        except Failure as f:
            f.where = ('G', self.gseq)
            raise

    def shared_after(self, bid, crashed):
        want = content(shared_seed(bid), shared_size(bid, self.cfg))
        try:
            with open(os.path.join(self.m.mnt, bid), 'rb') as f:
                got = f.read()
        except FileNotFoundError:
            got = None
        was = self.shared[bid]
        if got is not None and got != want:
            raise Failure('crash' if crashed else 'bytes', 'shared block %s after the %s: '
                          '%d bytes, not its content' % (bid, 'restart' if crashed else
                                                         'remount', len(got)))
        if got is None and was is not None and (was == 'durable' or not crashed):
            raise Failure('crash' if crashed else 'visible', 'shared block %s is gone after '
                          'the %s (%s)' % (bid, 'restart' if crashed else 'remount',
                                           'written durably' if was == 'durable' else
                                           'written'))
        self.shared[bid] = None if got is None else 'durable'
        self.keys[bid] = key_of(got)

    def store_check(self, crashed):
        temps, quarantined = [], []
        for root, dirs, files in os.walk(self.m.store):
            for n in files + dirs:
                if '.tmp' in n:
                    temps.append(os.path.relpath(os.path.join(root, n), self.m.store))
            if os.path.basename(root) == 'quarantine':
                quarantined += files
        if temps:
            raise Failure('store', 'temp files in STORE after the %s: %s' % (
                'restart' if crashed else 'remount', temps[:3]))
        if quarantined:
            raise Failure('store', 'files in STORE/quarantine: %s' % quarantined[:3])


def proc_threads(pid, what):
    """Where the threads of a process wait (for a hang report)."""
    out = []
    try:
        for tid in sorted(os.listdir('/proc/%d/task' % pid), key=int):
            base = '/proc/%d/task/%s/' % (pid, tid)
            try:
                with open(base + 'wchan') as f:
                    wchan = f.read().strip()
                with open(base + 'stat') as f:
                    state = f.read().rsplit(')', 1)[1].split()[0]
                with open(base + 'comm') as f:
                    comm = f.read().strip()
            except OSError:
                continue
            out.append('%s %d thread %s (%s): %s %s' % (what, pid, tid, comm, state, wchan))
    except OSError as e:
        out.append('%s %d: %s' % (what, pid, e))
    return out


# --- one multi-process run --------------------------------------------------------------------

def run_seed(seed, total_ops, nworkers, ids, without, opts):
    """Returns None, or (Failure, cfg, trace) on a failure."""
    cfg = config_for(seed, nworkers, ids, opts)
    rng = random.Random('epochs-%d' % seed)
    print('# fsmodel: seed %d, %d ops, %d workers, -o %s' % (seed, total_ops, nworkers,
                                                             cfg['opts']), flush=True)
    run = Run(cfg, nworkers, False, without)
    t_start = now()
    try:
        run.start()
        while run.stats['ops'] < total_ops:
            per = [rng.randrange(30, 160) for _ in range(nworkers)]
            left = total_ops - run.stats['ops']
            if sum(per) > left:
                per = [max(1, left * p // sum(per)) for p in per]
            x = rng.random()
            kill = 'kill9' not in without
            # a kill in the middle of the round, right after a durable commit, or right at
            # its end (dumps still queued)
            run.epoch(per, rng.uniform(0.005, 0.15) if kill and x < 0.1 else None,
                      (rng.randrange(nworkers), rng.randrange(1, 4))
                      if kill and 0.1 <= x < 0.3 else None)
            if kill and 0.3 <= x < 0.4:
                run.global_op({'k': 'kill9'})
            elif 0.4 <= x < 0.6 and 'remount' not in without:
                run.barrier_check()
                run.global_op({'k': 'remount', 'fast': rng.random() < 0.3})
            run.barrier_check()
        run.stop(clean=True)
    except Failure as f:
        trace = list(run.trace)
        try:
            run.stop(clean=False)
        except Failure:
            pass
        return f, cfg, trace
    except BaseException:
        run.stop(clean=False)
        raise
    s = run.stats
    print('# ok: %d ops in %d rounds, %d clean remounts, %d SIGKILLs (%d at a random moment '
          'with operations under way, %d right after a durable commit), %.1fs' % (
              s['ops'], s['epochs'], s['remounts'], s['kills'], s.get('busy kills', 0),
              s.get('sync kills', 0), now() - t_start), flush=True)
    c = run.count
    mb = 1 << 20
    print('#   %s; %.0f MiB written, %.0f MiB read and compared, %d commits, %d incomplete '
          'closes, %d observations of other processes\' blocks checked against their logs' % (
              ', '.join('%s %d' % (k, c[k]) for k in sorted(c) if hasattr(Executor, 'op_' + k)),
              c.get('bytes written', 0) / mb,
              c.get('bytes checked', 0) / mb, c.get('commits', 0), c.get('EIO closes', 0),
              s.get('observations', 0)), flush=True)
    return None


# --- replay and shrinking ---------------------------------------------------------------------

def replay(cfg, ops, without, quiet=True):
    """Run ops (trace entries) in one process on a fresh mount. Returns None or a Failure."""
    run = Run(cfg, 1, True, without)
    try:
        run.start()
        batch = []
        for e in ops:
            if e['w'] == 'G' and e['op']['k'] == 'kill9' and batch:
                run.run_ops(batch, kill_end=True)    # killed right after the last op
                batch = []
            elif e['w'] == 'G':
                if batch:
                    run.run_ops(batch)
                    batch = []
                if e['op']['k'] != 'kill9':
                    run.barrier_check()
                run.global_op(e['op'])
            else:
                batch.append(e['op'])
        if batch:
            run.run_ops(batch)
        for wk in run.workers:
            wk.send({'cmd': 'quiesce'})
            run.expect_ok(wk, OP_TIMEOUT)
        run.barrier_check()
        run.stop(clean=True)
        return None
    except Failure as f:
        try:
            run.stop(clean=False)
        except Failure:
            pass
        return f
    except BaseException:
        run.stop(clean=False)
        raise


def op_ids(op):
    ids = set()
    for k in ('id', 'to'):
        if k in op:
            ids.add(op[k])
    ids.update(op.get('ids', []))
    return ids


def cut_at_failure(f, trace):
    """The trace up to the failing operation (every op started before it, and it)."""
    where = getattr(f, 'where', None)
    if not where:
        return list(trace)
    for e in trace:
        if e['w'] == where[0] and e['seq'] == where[1]:
            return [x for x in trace if x['t'] <= e['t'] or x is e]
    return list(trace)


def signature(f):
    """What makes two failures the same one: the category and the words of the message,
    without ids, numbers and quoted values."""
    msg = re.sub(r'^worker \d+, op \d+: ', '', f.msg)
    msg = re.sub(r"[0-9a-f]{32}|'[^']*'|\d+", '#', msg)
    return f.cat, ' '.join(msg.split()[:8])


def shrink(cfg, trace, f, without, seconds):
    """Look for a short sequence of ops that fails the same way in one process. Returns
    (ops, Failure) or (None, None)."""
    deadline = now() + seconds
    ops = []
    cut = cut_at_failure(f, trace)
    for e in cut:
        # a kill made by a worker right after its durable commit comes right after that
        # commit (the other processes' operations under way then come after the restart)
        w = e['op'].get('after_sync') if e['w'] == 'G' else None
        if w is not None:
            mine = [x['t'] for x in cut if x['w'] == w and x['t'] <= e['t']]
            if mine:
                e = dict(e, t=max(mine) + 1e-7)
        ops.append(e)
    ops.sort(key=lambda e: e['t'])
    # slots are per process: name them apart (they already are: w<k>s<n>)
    print('# looking for a short reproducer: %d ops, one process, fresh mounts (up to %ds)' % (
        len(ops), seconds), flush=True)
    target = None
    for _ in range(2):
        got = replay(cfg, ops, without)
        if got and (signature(got) == signature(f) or not target):
            target = got
        if target and signature(target) == signature(f):
            break
    if not target:
        print('# the sequence does not fail in one process (a race between processes?)',
              flush=True)
        return None, None
    if signature(target) != signature(f):
        print('# in one process it fails differently: [%s] %s' % (target.cat, target.msg),
              flush=True)
    tries = [0]

    def fails(cand):
        if now() > deadline:
            return None
        tries[0] += 1
        got = replay(cfg, cand, without)
        if got and signature(got) == signature(target):
            return got
        return None

    # cut after the op that failed in the replay
    where = getattr(target, 'where', None)
    if where and where[0] == 0:
        k = 0
        for i, e in enumerate(ops):
            k += e['w'] != 'G'
            if k == where[1]:
                if i + 1 < len(ops):
                    got = fails(ops[:i + 1])
                    if got:
                        ops, target = ops[:i + 1], got
                break
    # only the ops on the ids the failure names (and the global ones)
    every = set(b for ids in cfg['own'] for b in ids) | set(cfg['shared'])
    involved = set(re.findall(r'[0-9a-f]{32}', target.msg)) & every
    if involved:
        cand, slots = [], set()
        for e in ops:
            op = e['op']
            if op['k'] == 'hold' and op['id'] in involved:
                slots.add(op['slot'])
            if e['w'] == 'G' or op_ids(op) & involved or op.get('slot') in slots:
                cand.append(e)
        if len(cand) < len(ops):
            got = fails(cand)
            if got:
                ops, target = cand, got
    # prefixes: the failure may happen well before the last op
    while len(ops) > 1 and now() < deadline:
        n = len(ops) // 2
        got = fails(ops[:n])
        if got:
            ops, target = ops[:n], got
        else:
            break
    # delta debugging: remove chunks, then single ops
    n = 2
    while len(ops) >= 2 and now() < deadline:
        size = max(1, len(ops) // n)
        removed = False
        i = 0
        while i < len(ops) and now() < deadline:
            cand = ops[:i] + ops[i + size:]
            got = fails(cand) if cand else None
            if got:
                ops, target = cand, got
                removed = True
            else:
                i += size
        if not removed:
            if size == 1:
                break
            n = min(len(ops), n * 2)
    print('# %d replays; %s' % (tries[0], 'out of time' if now() > deadline else 'done'),
          flush=True)
    return ops, target


def describe_op(e):
    op = dict(e['op'])
    who = 'G' if e['w'] == 'G' else 'w%s' % e['w']
    k = op.pop('k')
    if 'id' in op:
        op['id'] = op['id'][:8]
    return '%s %s %s' % (who, k, json.dumps(op, separators=(',', ':')))


def report_failure(seed, f, cfg, trace, without, shrink_seconds, rerun):
    print('FAIL fsmodel seed %d (-o %s): [%s] %s' % (seed, cfg['opts'], f.cat, f.msg),
          flush=True)
    if f.cat == 'internal':
        return
    ids = set(re.findall(r'[0-9a-f]{32}', f.msg))
    before = cut_at_failure(f, trace)
    mine = [e for e in sorted(before, key=lambda e: e['t'])
            if e['w'] == 'G' or op_ids(e['op']) & ids]
    if ids and mine:
        print('# the operations on %s before the failure (last 30):' % ', '.join(
            sorted(b[:8] for b in ids)))
        for e in mine[-30:]:
            print('  %.4f %s' % (e['t'], describe_op(e)))
    ops, got = shrink(cfg, trace, f, without, shrink_seconds)
    if ops is None:
        tail = sorted(cut_at_failure(f, trace), key=lambda e: e['t'])[-25:]
        print('# the last operations before the failure:')
        for e in tail:
            print('  ' + describe_op(e))
        print('# rerun: %s' % rerun, flush=True)
        return
    save_replay(seed, cfg, ops, without, got)
    print('# rerun: %s' % rerun, flush=True)


def save_replay(name, cfg, ops, without, got):
    """Print a reproducing sequence and save it for --replay."""
    path = os.path.join(os.environ.get('TMPDIR', '/tmp'), 'fsmodel-fail-%s.json' % name)
    with open(path, 'w') as fh:
        json.dump({'cfg': cfg, 'ops': ops, 'without': sorted(without)}, fh)
    print('# shortest sequence found: %d ops (ids shortened to 8 characters), failing with '
          '[%s] %s' % (len(ops), got.cat, got.msg))
    if len(ops) > 40:
        print('  ... %d ops before these (all of them in the file)' % (len(ops) - 40))
    for e in ops[-40:]:
        print('  ' + describe_op(e))
    print('# replay: python3 tests/mount/fsmodel.py --replay %s (-o %s)' % (path, cfg['opts']),
          flush=True)


# --- main -------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--seed', type=int)
    ap.add_argument('--ops', type=int)
    ap.add_argument('--minutes', type=float)
    ap.add_argument('--workers', type=int, default=3)
    ap.add_argument('--ids', type=int, default=10)
    ap.add_argument('--shrink-seconds', type=int, default=120)
    ap.add_argument('--without')
    ap.add_argument('-o', dest='opts')
    ap.add_argument('--replay')
    ap.add_argument('--shrink', action='store_true')
    ap.add_argument('--worker', action='store_true')
    a = ap.parse_args()
    if a.worker:
        worker_main()
        return 0
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit('terminated by signal %d'
                                                                 % signum))
    if not os.path.exists('/dev/fuse'):
        print('SKIP: /dev/fuse is missing: the mount tests need FUSE')
        return 77
    b = ucmtest.daemon_bin()
    if not os.path.exists(b):
        print('FAIL setup: ucmfs not found (set UCMFS_BIN): %s' % b)
        return 1
    without = set(w for w in (a.without or os.environ.get('UCM_FSMODEL_WITHOUT', '')).split(',')
                  if w)
    bad = without - set(OP_KINDS)
    if bad:
        ap.error('--without: unknown kinds %s (known: %s)' % (sorted(bad), ', '.join(OP_KINDS)))
    if a.replay:
        with open(a.replay) as fh:
            r = json.load(fh)
        without |= set(r.get('without', []))
        f = replay(r['cfg'], r['ops'], without)
        if f and a.shrink:
            ops, got = shrink(r['cfg'], r['ops'], f, without, a.shrink_seconds)
            if ops:
                save_replay('shrunk', r['cfg'], ops, without, got)
        if f:
            print('FAIL replay of %d ops: [%s] %s' % (len(r['ops']), f.cat, f.msg))
            return 1
        print('ok: replay of %d ops passed' % len(r['ops']))
        return 0
    ops = a.ops or int(os.environ.get('UCM_FSMODEL_OPS', '0') or 0) or \
        (20000 if a.minutes else DEFAULT_OPS)
    seed = a.seed if a.seed is not None else \
        int(os.environ.get('UCM_FSMODEL_SEED', '0') or 0) or \
        random.SystemRandom().randrange(1, 1 << 31)
    end = now() + a.minutes * 60 if a.minutes else None
    runs = total = 0
    t0 = now()
    while True:
        res = run_seed(seed, ops, a.workers, a.ids, without, a.opts)
        runs += 1
        total += ops
        if res:
            f, cfg, trace = res
            rerun = 'python3 tests/mount/fsmodel.py --seed %d --ops %d%s%s' % (
                seed, ops, ' --without ' + ','.join(sorted(without)) if without else '',
                ' -o ' + a.opts if a.opts else '')
            report_failure(seed, f, cfg, trace, without, a.shrink_seconds, rerun)
            return 1
        if end is None or now() > end:
            break
        seed += 1
    if runs > 1:
        print('# %d seeds, %d ops, %.0fs: all passed' % (runs, total, now() - t0))
    return 0


if __name__ == '__main__':
    sys.exit(main())
