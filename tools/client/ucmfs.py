"""ucmfs client for Python (standard library only): the calls an inference engine makes on a
mounted ucmfs. The same calls as the C client (tools/client/ucmfs.h).

    import ucmfs
    u = ucmfs.Client('/mnt/ucm')
    u.put(block_id, memoryview(tensor_bytes))        # write and publish, no copy
    buf = bytearray(u.size(block_id))
    u.get(block_id, buf)                             # read into a caller buffer, no copy
    r = u.lookup(ids)                                # r.prefix, r.last, r.hits

Ids are 16-byte `bytes` (a 32-character lowercase hex `str` is accepted too). Buffers are
anything with the buffer protocol: bytes, bytearray, memoryview, array.array, a numpy array,
a torch CPU tensor through `memoryview(t.numpy())`; they are written and read in place
(os.pwritev / os.preadv), never copied. Errors are OSError with the errno of the filesystem:
FileNotFoundError for a miss, FileExistsError, OSError(EIO) for an incomplete commit or a
damaged block. A Client may be shared by threads.
"""
import collections
import errno
import itertools
import os
import threading
import time

__all__ = ['Client', 'Writer', 'Prefetch', 'LookupResult', 'Info', 'id_hex', 'id_bytes']

ID_LEN = 16
QUERY_BATCH = 30000        # ids per query file (the daemon's limit is 1 MiB of hex per file)
IO_CHUNK = 64 << 20
TTL_NONE = None

LookupResult = collections.namedtuple('LookupResult', 'prefix last hits mask')
LookupResult.__doc__ = """prefix: number of leading ids stored; last: index of the last stored
id or -1; hits: number of stored ids; mask: list of bool, one per id."""

Info = collections.namedtuple('Info', 'size stored ttl_ms pins tier codec')
Info.__doc__ = """size: block length; stored: bytes on disk (0 if none yet); ttl_ms: ms left or
None; pins: open readers; tier: 'mem', 'disk' or 'mem,disk'; codec: 'raw', 'zstd', ..."""


def id_hex(block_id):
    """The file name of an id: 32 lowercase hex characters."""
    if isinstance(block_id, str):
        h = block_id
    else:
        b = bytes(block_id)
        if len(b) != ID_LEN:
            raise ValueError('a block id is %d bytes, not %d' % (ID_LEN, len(b)))
        h = b.hex()
    if len(h) != 2 * ID_LEN or h.strip('0123456789abcdef'):
        raise ValueError('not a block id (32 lowercase hex characters): %r' % (block_id,))
    return h


def id_bytes(block_id):
    """The 16 bytes of an id given as bytes or hex."""
    return bytes.fromhex(id_hex(block_id))


def _bytes_view(buf):
    """A flat unsigned-byte view of any buffer (C-contiguous), without a copy."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.ndim != 1 or mv.format not in ('B', 'b', 'c'):
        mv = mv.cast('B')
    return mv


def _pwrite_all(fd, mv, off):
    done = 0
    while done < len(mv):
        n = os.pwritev(fd, [mv[done:done + IO_CHUNK]], off + done)
        if n <= 0:
            raise OSError(errno.EIO, 'short write')
        done += n


def _pread_into(fd, mv, off):
    done = 0
    while done < len(mv):
        n = os.preadv(fd, [mv[done:done + IO_CHUNK]], off + done)
        if n == 0:
            break
        done += n
    return done


class Writer:
    """A block written in pieces (shards), published by commit(). Use as a context manager:
    leaving the block normally commits, an exception aborts."""

    def __init__(self, client, block_id, size, ttl_ms=None, durable=False, replace=False):
        self.client, self.size = client, size
        self.ttl_ms, self.durable = ttl_ms, durable
        self.name = id_hex(block_id)
        flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if replace else os.O_EXCL)
        self.fd = os.open(self.name, flags, 0o644, dir_fd=client.dfd)
        try:
            # the TTL first (it counts from the commit all the same): a mount whose topology
            # routes by TTL then places the block in its branch before its first byte
            if ttl_ms:
                os.setxattr(self.fd, 'user.ucm.ttl', str(int(ttl_ms)).encode())
            os.ftruncate(self.fd, size)   # declare the size: the commit needs every byte
        except BaseException:
            os.close(self.fd)
            raise

    def write(self, buf, offset=0):
        """Write a buffer at offset (any order; shard i of size s: offset = i * s)."""
        mv = _bytes_view(buf)
        if offset < 0 or offset + len(mv) > self.size:
            raise OSError(errno.EFBIG, 'write past the declared size %d' % self.size)
        _pwrite_all(self.fd, mv, offset)

    def commit(self):
        """Publish the block. OSError(EIO) if a byte of it was never written."""
        fd, self.fd = self.fd, None
        try:
            if self.durable:
                os.fsync(fd)
        except BaseException:
            self.fd = fd
            self.abort()
            raise
        os.close(fd)

    def abort(self):
        """Publish nothing."""
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            os.ftruncate(fd, self.size + 1)  # one byte never written: the commit fails
        except OSError:
            pass
        try:
            os.close(fd)
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if et is None:
            self.commit()
        else:
            self.abort()
        return False


class Prefetch:
    """A prefetch under way: poll() or wait() until the daemon has promoted every block."""

    def __init__(self, fds):
        self.fds = fds

    def poll(self):
        """True once the daemon is done with every id."""
        left = []
        for fd in self.fds:
            if os.getxattr(fd, 'user.ucm.prefetch') == b'done':
                os.close(fd)
            else:
                left.append(fd)
        self.fds = left
        return not left

    def wait(self, timeout=None):
        """Wait until done; TimeoutError after timeout seconds (None: no limit)."""
        end = None if timeout is None else time.monotonic() + timeout
        nap = 0.0002
        while not self.poll():
            if end is not None and time.monotonic() >= end:
                raise TimeoutError('prefetch not done after %gs' % timeout)
            time.sleep(nap)
            nap = min(nap * 2, 0.02)

    def close(self):
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Client:
    """A mounted ucmfs. close() (or a `with` block) releases its descriptors."""

    def __init__(self, mountpoint):
        self.root = os.path.abspath(mountpoint)
        self.dfd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.qfd = os.open('.ucm/query', os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC,
                               dir_fd=self.dfd)
        except FileNotFoundError:
            os.close(self.dfd)
            raise NotADirectoryError(errno.ENOTDIR, 'not a ucmfs mount (no .ucm/query)',
                                     mountpoint) from None
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def close(self):
        for fd in (self.dfd, self.qfd):
            if fd >= 0:
                os.close(fd)
        self.dfd = self.qfd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def path(self, block_id):
        return os.path.join(self.root, id_hex(block_id))

    # -- writing ------------------------------------------------------------------------

    def put(self, block_id, buf, ttl_ms=None, durable=False, replace=False):
        """Write a buffer as block_id and publish it. Returns True when written, False when
        the block is already stored or being written by someone else (ids are content
        hashes: nothing to do), unless replace=True."""
        mv = _bytes_view(buf)
        try:
            w = Writer(self, block_id, len(mv), ttl_ms, durable, replace)
        except FileExistsError:
            return False
        try:
            _pwrite_all(w.fd, mv, 0)
        except BaseException:
            w.abort()
            raise
        w.commit()
        return True

    def writer(self, block_id, size, ttl_ms=None, durable=False, replace=False):
        """A Writer for a block of `size` bytes written in pieces. FileExistsError if the
        block is already stored or being written."""
        return Writer(self, block_id, size, ttl_ms, durable, replace)

    # -- reading ------------------------------------------------------------------------

    def size(self, block_id):
        return os.stat(id_hex(block_id), dir_fd=self.dfd).st_size

    def get(self, block_id, out=None, offset=0, length=None, direct=False):
        """Read a block (or `length` bytes at `offset`). With out (a writable buffer), read
        into it in place and return the number of bytes read (less than len(out) only at the
        end of the block); without, return bytes."""
        flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECT if direct else 0)
        fd = os.open(id_hex(block_id), flags, dir_fd=self.dfd)
        try:
            if out is None:
                n = os.fstat(fd).st_size - offset if length is None else length
                out = bytearray(max(n, 0))
                got = _pread_into(fd, memoryview(out), offset)
                del out[got:]
                return bytes(out)
            mv = _bytes_view(out)
            if mv.readonly:
                raise TypeError('get: the output buffer is read-only')
            if length is not None:
                mv = mv[:length]
            return _pread_into(fd, mv, offset)
        finally:
            os.close(fd)

    def get_shard(self, block_id, index, shard_size, out=None, direct=False):
        """Shard `index` of `shard_size` bytes (into out if given). OSError(EIO) if the block
        ends inside it, OSError(ENXIO) if it starts past the end."""
        if out is None:
            data = self.get(block_id, None, index * shard_size, shard_size, direct)
            n = len(data)
        else:
            mv = _bytes_view(out)[:shard_size]
            if len(mv) < shard_size:
                raise ValueError('out holds %d bytes, the shard %d' % (len(mv), shard_size))
            n = self.get(block_id, mv, index * shard_size, shard_size, direct)
            data = n
        if n == 0 and shard_size:
            raise OSError(errno.ENXIO, 'shard %d starts past the end of the block' % index)
        if n != shard_size:
            raise OSError(errno.EIO, 'the block ends inside shard %d' % index)
        return data

    def info(self, block_id):
        """Info(size, stored, ttl_ms, pins, tier, codec) of a stored block."""
        p = self.path(block_id)
        size = os.stat(p).st_size

        def x(name):
            try:
                return os.getxattr(p, 'user.ucm.' + name).decode()
            except OSError as e:
                if e.errno == errno.ENODATA:
                    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), p)
                raise
        ttl = x('ttl')
        return Info(size, int(x('stored')), None if ttl == 'none' else int(ttl), int(x('pins')),
                    x('tier'), x('codec'))

    def exists(self, block_id):
        try:
            os.stat(id_hex(block_id), dir_fd=self.dfd)
            return True
        except FileNotFoundError:
            return False

    # -- many ids: lookups, TTLs, prefetch -----------------------------------------------

    def _query(self, ids):
        """A fresh query file holding ids, already unlinked (nothing is left behind)."""
        text = ''.join(id_hex(i) + '\n' for i in ids).encode()
        with self._lock:
            seq = next(self._seq)
        name = '.client.%d.%d.%d' % (os.getpid(), threading.get_ident(), seq)
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600,
                     dir_fd=self.qfd)
        try:
            os.unlink(name, dir_fd=self.qfd)
            _pwrite_all(fd, memoryview(text), 0)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @staticmethod
    def _batches(ids):
        ids = list(ids)
        for i in range(0, len(ids), QUERY_BATCH):
            yield i, ids[i:i + QUERY_BATCH]

    def lookup(self, ids):
        """Which ids are stored: LookupResult(prefix, last, hits, mask), from one answer of
        the daemon per 30,000 ids."""
        mask = []
        for _, batch in self._batches(ids):
            fd = self._query(batch)
            try:
                v = os.getxattr(fd, 'user.ucm.hits')
            finally:
                os.close(fd)
            if len(v) != len(batch):
                raise OSError(errno.EPROTO, 'hit mask of %d for %d ids' % (len(v), len(batch)))
            mask.extend(c == 0x31 for c in v)
        prefix = next((i for i, h in enumerate(mask) if not h), len(mask))
        last = max((i for i, h in enumerate(mask) if h), default=-1)
        return LookupResult(prefix, last, sum(mask), mask)

    def set_ttl(self, block_id, ttl_ms):
        """TTL of a block: ms from now; None or 0 clears it."""
        v = b'none' if not ttl_ms else str(int(ttl_ms)).encode()
        os.setxattr(self.path(block_id), 'user.ucm.ttl', v)

    def extend_ttl(self, ids, ttl_ms):
        """Each stored id with a TTL gets at least ttl_ms more; blocks without keep none."""
        if not ttl_ms or ttl_ms <= 0:
            raise ValueError('ttl_ms must be positive')
        for _, batch in self._batches(ids):
            fd = self._query(batch)
            try:
                os.setxattr(fd, 'user.ucm.ttl', str(int(ttl_ms)).encode())
            finally:
                os.close(fd)

    def prefetch_start(self, ids):
        """Start promoting the disk-only blocks of ids into memory; returns a Prefetch."""
        fds = []
        try:
            for _, batch in self._batches(ids):
                fds.append(self._query(batch))
                os.setxattr(fds[-1], 'user.ucm.prefetch', b'1')
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return Prefetch(fds)

    def prefetch(self, ids, timeout=None):
        """Promote the disk-only blocks of ids into memory and wait until it is done."""
        with self.prefetch_start(ids) as p:
            p.wait(timeout)
