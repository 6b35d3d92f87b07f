"""Helpers for the ucmfs mount tests (Python 3 standard library only).

A test file is a script: it lists its cases and calls run(cases). Each case is a function
with no arguments that mounts ucmfs with Mount(...) in a `with` block, uses the mount as a
user would, and raises (check(), expect_errno(), ...) when ucmfs misbehaves.

    with Mount('mem_size=8M') as m:
        write_file(m.path(bid), data)

Nothing is ever left mounted and nothing hangs: every subprocess has a timeout, each case
runs under signal.alarm, and a watchdog thread SIGKILLs the daemons of a case that is still
stuck in the kernel after its time is up (a request to a dead daemon fails with ENOTCONN).

Environment: UCMFS_BIN (the daemon; default: the build directory's ucmfs), UCMFS_TEST_SLOW
(a factor for every timeout, e.g. 3 under a sanitizer; default 1), UCMFS_TEST_KEEP=1 (keep
each case's temporary directory: STORE and daemon logs), UCMFS_TEST_OPTS (options added to
every Mount's, unless the case sets that option itself: passthrough=off runs every case on
the path through the daemon).
Run one case: python3 tests/mount/basic.py touch
"""
import contextlib
import errno
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zlib

SLOW = float(os.environ.get('UCMFS_TEST_SLOW', '1') or 1)
CASE_TIMEOUT = 120          # seconds per case, times SLOW
MOUNT_TIMEOUT = 10          # seconds for a daemon to mount
EXIT_TIMEOUT = 120          # seconds for a daemon to exit after fusermount3 -u
SANITIZER_MARKS = ('AddressSanitizer', 'LeakSanitizer', 'runtime error:', 'ThreadSanitizer')
DAEMON_ENV = {
    'ASAN_OPTIONS': 'detect_leaks=1:abort_on_error=0',
    'UBSAN_OPTIONS': 'halt_on_error=1:print_stacktrace=1',
}
KiB = 1 << 10
MiB = 1 << 20

_live_mounts = []           # Mount objects with a daemon or a mount still up
_live_procs = []            # helper processes started by the current case
_deaths = []                # daemons of the current case found dead while mounted


class CaseTimeout(Exception):
    pass


def daemon_bin():
    b = os.environ.get('UCMFS_BIN')
    if b:
        return b
    here = os.path.dirname(os.path.abspath(__file__))
    for d in ('build', 'build-mt'):
        cand = os.path.join(here, '..', '..', d, 'ucmfs')
        if os.path.exists(cand):
            return os.path.abspath(cand)
    return 'ucmfs'


def daemon_env():
    env = dict(os.environ)
    env.update(DAEMON_ENV)
    return env


def rand_id():
    """A fresh, valid block name: 32 lowercase hex characters."""
    return os.urandom(16).hex()


def pattern(n, seed):
    """n reproducible pseudo-random bytes (incompressible) for a seed."""
    return random.Random(seed).randbytes(n)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def errname(e):
    return errno.errorcode.get(e, str(e))


def expect_errno(want, fn, *args, **kw):
    """Call fn; it must fail with OSError errno `want` (an int or a tuple of ints)."""
    wants = want if isinstance(want, tuple) else (want,)
    try:
        r = fn(*args, **kw)
    except OSError as e:
        if e.errno in wants:
            return e
        raise AssertionError('%s%r: expected %s, got %s (%s)' % (
            getattr(fn, '__name__', fn), args, '/'.join(errname(w) for w in wants),
            errname(e.errno), e))
    raise AssertionError('%s%r: expected %s, but it succeeded (returned %r)' % (
        getattr(fn, '__name__', fn), args, '/'.join(errname(w) for w in wants), r))


def cmd(args, timeout=60, check_rc=True, **kw):
    """Run a command with a timeout; returns CompletedProcess (text output, C locale)."""
    kw.setdefault('env', dict(os.environ, LC_ALL='C'))
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout * SLOW, **kw)
    if check_rc and r.returncode != 0:
        raise AssertionError('%s exited %d: %s' % (' '.join(map(str, args)), r.returncode,
                                                   (r.stderr or r.stdout).strip()[-500:]))
    return r


def popen(args, **kw):
    """A helper process that the watchdog kills if the case overruns its time."""
    p = subprocess.Popen(args, **kw)
    _live_procs.append(p)
    return p


@contextlib.contextmanager
def held_elsewhere(fd):
    """Another process holds the open file of fd for the duration of the with block, so
    the kernel does not release it when this process closes fd."""
    holder = popen([sys.executable, '-c', 'import sys; sys.stdin.read()'],
                   stdin=subprocess.PIPE, pass_fds=(fd,))
    try:
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=60 * SLOW)


def write_file(path, data, chunk=MiB, flags=os.O_WRONLY | os.O_CREAT, fsync=False):
    """Write a whole block through open/write/close (close commits it)."""
    fd = os.open(path, flags, 0o644)
    try:
        mv = memoryview(data)
        off = 0
        while off < len(data):
            n = os.write(fd, mv[off:off + chunk])
            check(n > 0, 'write of %s returned %d' % (path, n))
            off += n
        if fsync:
            os.fsync(fd)
    except BaseException:
        try:
            os.close(fd)
        except OSError:
            pass
        raise
    os.close(fd)


def read_file(path, chunk=MiB):
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_fd(fd, chunk)
    finally:
        os.close(fd)


def read_fd(fd, chunk=MiB, off=0):
    """Everything from offset off to end of file, by pread."""
    out = []
    while True:
        b = os.pread(fd, chunk, off)
        if not b:
            return b''.join(out)
        out.append(b)
        off += len(b)


def try_write(path, data, declare=False, chunk=MiB):
    """Write a block (open, [ftruncate to its size,] writes of chunk bytes, close); returns
    None, or (step, errno) of the first step that failed. Nothing is left open."""
    step = 'open'
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    except OSError as e:
        return step, e.errno
    err = None
    try:
        if declare:
            step = 'ftruncate'
            os.ftruncate(fd, len(data))
        step = 'write'
        off = 0
        while off < len(data):
            off += os.write(fd, data[off:off + chunk])
    except OSError as e:
        err = (step, e.errno)
    try:
        os.close(fd)
    except OSError as e:
        if err is None:
            err = ('close', e.errno)
    return err


def flip(path, off):
    """Flip the bits of the byte at off of a file (a store's block file, unmounted)."""
    with open(path, 'r+b') as f:
        f.seek(off)
        b = f.read(1)
        check(len(b) == 1, 'flip: %s has no byte at %d' % (path, off))
        f.seek(off)
        f.write(bytes([b[0] ^ 0x5a]))


def same(got, want, what):
    """Byte-exact comparison with a useful message."""
    if got == want:
        return
    if len(got) != len(want):
        raise AssertionError('%s: %d bytes read, %d expected' % (what, len(got), len(want)))
    first = next(i for i in range(len(got)) if got[i] != want[i])
    raise AssertionError('%s: bytes differ from offset %d' % (what, first))


def wait_until(pred, timeout, step=0.02):
    """Poll pred() until it is true or timeout seconds (times SLOW) pass; returns its value."""
    end = time.monotonic() + timeout * SLOW
    while True:
        v = pred()
        if v or time.monotonic() > end:
            return v
        time.sleep(step)


def exists(path):
    try:
        os.stat(path)
        return True
    except FileNotFoundError:
        return False


# A helper process driven line by line: open/write/read/close on its own descriptors, so
# that "another process" holds a writer or reader while the test looks from outside.
_PEER = r"""
import os, random, subprocess, sys, zlib
fds = {}
for line in sys.stdin:
    a = line.split()
    try:
        r = ''
        if a[0] == 'open':                       # open NAME PATH FLAGS
            fds[a[1]] = os.open(a[2], int(a[3]), 0o644)
        elif a[0] == 'write':                    # write NAME SEED SIZE OFF
            data = random.Random(int(a[2])).randbytes(int(a[3]))
            off, done = int(a[4]), 0
            while done < len(data):
                done += os.pwrite(fds[a[1]], data[done:done + (1 << 20)], off + done)
        elif a[0] == 'writepart':                # writepart NAME SEED TOTAL OFF LEN
            data = random.Random(int(a[2])).randbytes(int(a[3]))
            off, end = int(a[4]), int(a[4]) + int(a[5])
            while off < end:
                off += os.pwrite(fds[a[1]], data[off:min(end, off + (1 << 20))], off)
        elif a[0] == 'ftruncate':                # ftruncate NAME SIZE
            os.ftruncate(fds[a[1]], int(a[2]))
        elif a[0] == 'fsync':
            os.fsync(fds[a[1]])
        elif a[0] == 'read':                     # read NAME -> LEN CRC32 (from offset 0)
            out, off = [], 0
            while True:
                b = os.pread(fds[a[1]], 1 << 20, off)
                if not b:
                    break
                out.append(b)
                off += len(b)
            data = b''.join(out)
            r = '%d %d' % (len(data), zlib.crc32(data))
        elif a[0] == 'close':
            os.close(fds.pop(a[1]))
        elif a[0] == 'spawn':                    # spawn CMD...: run a child (fork + exec)
            r = str(subprocess.run(a[1:]).returncode)
        print('ok', r, flush=True)
    except OSError as e:
        print('err', e.errno, flush=True)
"""


class Peer:
    """Another process that opens, writes, reads and closes files on command."""

    def __init__(self):
        self.p = popen([sys.executable, '-c', _PEER], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, text=True)

    def do(self, *words, timeout=60):
        """Run one command; returns its result text, raises OSError with the peer's errno."""
        self.p.stdin.write(' '.join(map(str, words)) + '\n')
        self.p.stdin.flush()
        r, _, _ = select.select([self.p.stdout], [], [], timeout * SLOW)
        check(r, 'helper process: no answer to %r within %gs' % (words[0], timeout * SLOW))
        line = self.p.stdout.readline().split()
        check(line, 'helper process died during %r' % (words,))
        if line[0] == 'err':
            e = int(line[1])
            raise OSError(e, '%s (in another process: %s)' % (os.strerror(e), words[0]))
        return ' '.join(line[1:])

    def open(self, name, path, flags):
        return self.do('open', name, path, flags)

    def write(self, name, seed, size, off=0):
        """Write pattern(size, seed) at offset off."""
        return self.do('write', name, seed, size, off)

    def write_part(self, name, seed, total, off, length):
        """Write pattern(total, seed)[off:off + length] at offset off."""
        return self.do('writepart', name, seed, total, off, length)

    def read(self, name):
        n, crc = self.do('read', name).split()
        return int(n), int(crc)

    def close(self, name):
        return self.do('close', name)

    def stop(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(timeout=10 * SLOW)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.stop()
        else:
            self.p.kill()
            self.p.wait()
        return False


def crc(data):
    """(length, crc32) of bytes: what Peer.read() returns."""
    return len(data), zlib.crc32(data)


def with_test_opts(opts):
    """opts plus those of UCMFS_TEST_OPTS whose key opts does not set already."""
    keys = {o.split('=', 1)[0] for o in opts.split(',') if o}
    extra = [o for o in os.environ.get('UCMFS_TEST_OPTS', '').split(',')
             if o and o.split('=', 1)[0] not in keys]
    return ','.join([o for o in opts.split(',') if o] + extra)


class Mount:
    """A ucmfs daemon mounted on a fresh temporary directory (STORE and mountpoint inside).

    Mount(opts, store, host): opts is the -o list ('' for none); store None means a fresh
    directory STORE, 'none' memory only, any other string is used as given; host, if given,
    is the host name the daemon sees (it runs in a UTS namespace of its own: several hosts
    on one machine).
    """

    def __init__(self, opts='', store=None, host=None):
        self.tmp = tempfile.mkdtemp(prefix='ucmfs-mt-')
        self.mnt = os.path.join(self.tmp, 'mnt')
        os.mkdir(self.mnt)
        if store is None:
            self.store = os.path.join(self.tmp, 'store')
        else:
            self.store = store
        self.opts = opts
        self.host = host
        self.proc = None
        self.log = None
        self.nstarts = 0
        self.old = []          # (proc, log) of daemons unmounted without waiting
        _live_mounts.append(self)

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, et, ev, tb):
        try:
            if et is None:
                self.unmount()
            elif self.log:
                tail = self.log_text()[-1500:].strip()
                if tail:
                    sys.stderr.write('--- daemon log (%s) ---\n%s\n' % (self.log, tail))
        finally:
            self.cleanup()
        return False

    def start(self, opts=None, timeout=MOUNT_TIMEOUT):
        if opts is not None:
            self.opts = opts
        self.nstarts += 1
        self.log = os.path.join(self.tmp, 'daemon%d.log' % self.nstarts)
        args = [daemon_bin(), '-f']
        opts = with_test_opts(self.opts)
        if opts:
            args += ['-o', opts]
        args += [self.store, self.mnt]
        if self.host:
            args = ['unshare', '--uts', '--', 'sh', '-c', 'hostname "$0" && exec "$@"',
                    self.host] + args
        with open(self.log, 'wb') as logf:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf,
                                         stderr=logf, env=daemon_env())
        end = time.monotonic() + timeout * SLOW
        while not os.path.ismount(self.mnt):
            rc = self.proc.poll()
            if rc is not None:
                self.proc = None
                raise AssertionError('ucmfs -o %s exited %d before mounting: %s' % (
                    self.opts, rc, self.log_text()[-800:]))
            if time.monotonic() > end:
                raise AssertionError('ucmfs did not mount within %gs: %s' % (
                    timeout * SLOW, self.log_text()[-800:]))
            time.sleep(0.02)

    def log_text(self, log=None):
        try:
            with open(log or self.log, 'rb') as f:
                return f.read().decode(errors='replace')
        except (OSError, TypeError):
            return ''

    def _fusermount(self, lazy=False):
        args = ['fusermount3', '-u'] + (['-z'] if lazy else []) + [self.mnt]
        return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=30 * SLOW)

    def _detach(self):
        """Ask the kernel to unmount (fusermount3 -u, retried while busy). True on success."""
        err = ''
        for _ in range(100):
            if not os.path.ismount(self.mnt):
                return True
            r = self._fusermount()
            if r.returncode == 0:
                return True
            err = r.stderr.strip()
            if 'busy' not in err:
                break
            time.sleep(0.05)
        self._fusermount(lazy=True)
        raise AssertionError('fusermount3 -u %s failed: %s' % (self.mnt, err))

    def _reap(self, proc, log):
        """Wait for an unmounted daemon; it must exit 0 with no sanitizer report."""
        try:
            rc = proc.wait(timeout=EXIT_TIMEOUT * SLOW)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError('ucmfs did not exit within %gs of its unmount' %
                                 (EXIT_TIMEOUT * SLOW))
        text = self.log_text(log)
        for mark in SANITIZER_MARKS:
            if mark in text:
                i = text.index(mark)
                raise AssertionError('daemon stderr has a sanitizer report (%s): %s' % (
                    mark, text[max(0, i - 200):i + 1500]))
        check(rc == 0, 'ucmfs exited with status %d after unmount: %s' % (rc, text[-800:]))

    def unmount(self, wait=True):
        """Unmount cleanly. wait=False returns as soon as the kernel has let go, as
        `fusermount3 -u` does; the daemon is then checked by a later unmount/cleanup."""
        if not self.proc:
            return
        proc, log = self.proc, self.log
        if proc.poll() is not None:
            self.proc = None
            self._fusermount(lazy=True)
            raise AssertionError('ucmfs died while mounted (status %d): %s' % (
                proc.returncode, self.log_text(log)[-1500:]))
        self._detach()
        self.proc = None
        if wait:
            self._reap(proc, log)
        else:
            self.old.append((proc, log))

    def reap_old(self):
        while self.old:
            proc, log = self.old.pop(0)
            self._reap(proc, log)

    def terminate(self):
        """SIGTERM the daemon, as a service manager stops it (files may still be open): it
        must exit 0 with no sanitizer report; then clear what is left of the mount."""
        proc, log = self.proc, self.log
        self.proc = None
        proc.send_signal(signal.SIGTERM)
        self._reap(proc, log)
        if os.path.ismount(self.mnt) or _is_dead_mount(self.mnt):
            self._fusermount(lazy=True)
        wait_until(lambda: not os.path.ismount(self.mnt), 5)

    def kill9(self):
        """SIGKILL the daemon (a crash), then clear the dead mount."""
        if self.proc:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None
        if os.path.ismount(self.mnt) or _is_dead_mount(self.mnt):
            self._fusermount(lazy=True)
        wait_until(lambda: not os.path.ismount(self.mnt), 5)

    def remount(self, opts=None, wait=True):
        """A new daemon on the same STORE (after a clean unmount). wait=False starts it right
        after fusermount3 returns, as a user would; it waits for the old one's store lock."""
        self.unmount(wait=wait)
        self.start(opts, timeout=MOUNT_TIMEOUT if wait else 60)
        self.reap_old()

    def cleanup(self):
        """Never leave a mount or a daemon behind (used on failures too)."""
        if self.proc and self.proc.poll() is not None:
            text = self.log_text()
            mark = next((m for m in SANITIZER_MARKS if m in text), None)
            detail = text[text.index(mark):].split('\n')[0] if mark else \
                (text.strip().split('\n') or [''])[-1]
            _deaths.append('ucmfs died while mounted, status %d: %s' % (
                self.proc.returncode, detail[:300]))
        if self.proc and self.proc.poll() is None:
            try:
                self._detach()
                self.proc.wait(timeout=20 * SLOW)
            except Exception:
                pass
        for p in [self.proc] + [o[0] for o in self.old]:
            if p and p.poll() is None:
                p.kill()
                p.wait()
        self.proc = None
        self.old = []
        if os.path.ismount(self.mnt) or _is_dead_mount(self.mnt):
            self._fusermount(lazy=True)
        if self in _live_mounts:
            _live_mounts.remove(self)
        if os.environ.get('UCMFS_TEST_KEEP'):
            # keep the store and the daemon logs, drop the (large) copies of the data
            shutil.rmtree(os.path.join(self.tmp, 'src'), ignore_errors=True)
        elif not os.path.ismount(self.mnt):
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- use -----------------------------------------------------------------------------

    def path(self, name=''):
        return os.path.join(self.mnt, name)

    def blocks(self):
        """Block names listed by readdir (os.listdir), sorted, without .ucm."""
        return sorted(n for n in os.listdir(self.mnt) if n != '.ucm')

    def alive(self):
        return self.proc is not None and self.proc.poll() is None


def _is_dead_mount(path):
    try:
        os.stat(path)
    except OSError as e:
        return e.errno in (errno.ENOTCONN, errno.ECONNABORTED)
    return False


def _kill_everything():
    """Watchdog: SIGKILL the daemons and helpers of a stuck case (unblocks the kernel)."""
    for p in list(_live_procs):
        if p.poll() is None:
            p.kill()
    for m in list(_live_mounts):
        for p in [m.proc] + [o[0] for o in m.old]:
            if p and p.poll() is None:
                p.kill()


def _on_alarm(signum, frame):
    raise CaseTimeout('case did not finish within its time')


def _on_term(signum, frame):
    raise SystemExit('terminated by signal %d' % signum)


def case(timeout=None):
    """Decorator: a per-case time limit in seconds (before SLOW)."""
    def deco(fn):
        fn.timeout = timeout
        return fn
    return deco


def run(cases):
    """Run the cases of one test file; print `ok NAME` / `FAIL NAME: reason` each; exit."""
    if not os.path.exists('/dev/fuse'):
        print('SKIP: /dev/fuse is missing: the mount tests need FUSE')
        sys.exit(77)
    b = daemon_bin()
    if not os.path.exists(b) and not shutil.which(b):
        print('FAIL setup: ucmfs not found (set UCMFS_BIN): %s' % b)
        sys.exit(1)
    only = sys.argv[1:]
    names = [fn.__name__.replace('test_', '', 1).replace('_', '-') for fn in cases]
    unknown = [n for n in only if n not in names]
    if unknown:
        print('FAIL setup: no case named %s (cases: %s)' % (', '.join(unknown), ' '.join(names)))
        sys.exit(1)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGTERM, _on_term)
    failed = 0
    t_all = time.monotonic()
    try:
        for fn in cases:
            name = fn.__name__.replace('test_', '', 1).replace('_', '-')
            if only and name not in only:
                continue
            limit = int((getattr(fn, 'timeout', None) or CASE_TIMEOUT) * SLOW)
            dog = threading.Timer(limit + 15, _kill_everything)
            dog.daemon = True
            t0 = time.monotonic()
            err, tb = None, ''
            try:
                dog.start()
                signal.alarm(limit)
                fn()
            except (Exception, CaseTimeout) as e:
                err = e
                tb = traceback.format_exc()
            finally:
                signal.alarm(0)
                dog.cancel()
                for p in _live_procs:
                    if p.poll() is None:
                        p.kill()
                    try:
                        p.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        pass
                del _live_procs[:]
                for m in list(_live_mounts):
                    m.cleanup()
            dt = time.monotonic() - t0
            if err is None and _deaths:
                err = AssertionError('')
            if _deaths:
                err = AssertionError(('%s [%s]' % (err, '; '.join(_deaths))).strip())
                del _deaths[:]
            if err is None:
                print('ok %s  # %.1fs' % (name, dt), flush=True)
            else:
                failed += 1
                msg = str(err) or type(err).__name__
                print('FAIL %s: %s' % (name, msg.replace('\n', ' | ')), flush=True)
                sys.stderr.write(tb)
                sys.stderr.flush()
    finally:
        signal.alarm(0)
        for m in list(_live_mounts):
            m.cleanup()
    print('# %d failed, %.1fs' % (failed, time.monotonic() - t_all), flush=True)
    sys.exit(1 if failed else 0)
