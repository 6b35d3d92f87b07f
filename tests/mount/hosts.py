#!/usr/bin/env python3
"""Several hosts, one STORE (-o shared, ucmfs(8) SEVERAL HOSTS), on a real distributed
filesystem: a GlusterFS volume on loopback, each simulated host with its own GlusterFS client
mount and its own ucmfs daemon in a UTS namespace of its own (its own host name).

The volumes (a 2-brick distribute one and a replica 2 one) are brought up once for the file
and torn down on every way out. Without the GlusterFS packages (glusterfs-server,
glusterfs-client) the file is skipped with that reason.
"""
import atexit
import errno
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (KiB, MiB, SLOW, Mount, case, check, expect_errno, pattern, rand_id,
                     read_file, run, same, wait_until, write_file)

# how long a host may go on answering from what it knew: the shared= bound of these mounts,
# plus the time a dump takes to reach the volume
BOUND = 0.5
SHARED = 'shared=%dms' % int(BOUND * 1000)
SETTLE = 10 * SLOW
# a host name GlusterFS takes for this machine: it refuses 'localhost' and '127.0.0.1'
SERVER = '127.0.0.2'
GLUSTER_MOUNT_OPTS = 'attribute-timeout=0,entry-timeout=0,negative-timeout=0'
# blocks each host writes in the model check: 100 in the test run, 1,000 in suite 'slow'
# (mount-hosts-model-long), any number by hand
MODEL_BLOCKS = int(os.environ.get('UCMFS_HOSTS_BLOCKS', '100'))


def sh(args, timeout=60, check_rc=True):
    r = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout * SLOW)
    if check_rc and r.returncode:
        raise AssertionError('%s: exit %d: %s' % (' '.join(args), r.returncode,
                                                  r.stdout.strip()[-400:]))
    return r


def gluster(*words, timeout=60, check_rc=True):
    return sh(['gluster', '--mode=script'] + list(words), timeout, check_rc)


class Gluster:
    """glusterd (started here if it is not running) and the volumes of this file."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix='ucmfs-gl-', dir='/var/tmp')
        self.started_glusterd = False
        self.volumes = []      # names
        self.mounts = []       # client mount points
        atexit.register(self.teardown)

    def start(self):
        if gluster('volume', 'list', timeout=30, check_rc=False).returncode:
            sh(['glusterd', '--log-level=WARNING'])
            self.started_glusterd = True
            if not wait_until(lambda: gluster('volume', 'list', timeout=10,
                                              check_rc=False).returncode == 0, 30 * SLOW):
                raise AssertionError('glusterd did not answer within 30 s')

    def volume(self, kind):
        """Create and start a volume: 'distribute' (2 bricks) or 'replica' (replica 2)."""
        name = 'ucmt%d%s' % (os.getpid(), kind[0])
        bricks = []
        for i in range(2):
            d = os.path.join(self.tmp, '%s-b%d' % (name, i))
            os.mkdir(d)
            bricks.append('%s:%s' % (SERVER, d))
        words = ['volume', 'create', name] + (['replica', '2'] if kind == 'replica' else [])
        gluster(*(words + bricks + ['force']))
        self.volumes.append(name)
        # close-to-open for stat() too: md-cache would answer from what it saw up to 1 s ago
        gluster('volume', 'set', name, 'performance.stat-prefetch', 'off')
        gluster('volume', 'start', name)
        return name

    def client(self, volume):
        """A client mount of the volume, with the kernel's caches of names and attributes off."""
        mnt = tempfile.mkdtemp(prefix='c', dir=self.tmp)
        sh(['mount', '-t', 'glusterfs', '-o', GLUSTER_MOUNT_OPTS, '%s:/%s' % (SERVER, volume),
            mnt])
        self.mounts.append(mnt)
        return mnt

    def teardown(self):
        for mnt in self.mounts:
            if os.path.ismount(mnt):
                if sh(['umount', mnt], check_rc=False).returncode:
                    sh(['umount', '-l', mnt], check_rc=False)
        self.mounts = []
        for v in self.volumes:
            gluster('volume', 'stop', v, 'force', check_rc=False)
            gluster('volume', 'delete', v, check_rc=False)
        self.volumes = []
        if self.started_glusterd:
            # glusterd and what it started: the self-heal daemon of replica volumes
            sh(['pkill', '-x', 'glusterd'], check_rc=False)
            sh(['pkill', '-f', 'glustershd'], check_rc=False)
            self.started_glusterd = False
        shutil.rmtree(self.tmp, ignore_errors=True)


GL = None
VOLUMES = {}   # kind -> (client mount of host A, of host B): each case its own STORE in it


def setup():
    global GL
    missing = [b for b in ('glusterd', 'gluster', 'mount.glusterfs') if not shutil.which(b)]
    if missing:
        print('SKIP: GlusterFS is not installed (%s missing): apt-get install '
              'glusterfs-server glusterfs-client' % ', '.join(missing))
        sys.exit(77)
    GL = Gluster()
    GL.start()
    for kind in ('distribute', 'replica'):
        v = GL.volume(kind)
        VOLUMES[kind] = (GL.client(v), GL.client(v))


def hosts(kind='distribute', opts='mem_size=64M', n=2, first=''):
    """n ucmfs hosts (hA, hB, ...) sharing one fresh STORE on the volume, each through its
    own client mount; not yet mounted. `first`: options of hA alone."""
    a, b = VOLUMES[kind]
    store = 'store-%s' % rand_id()[:8]
    return [Mount(','.join(o for o in (SHARED, opts, first if i == 0 else '') if o),
                  store=os.path.join((a, b)[i % 2], store), host='h%c' % (ord('A') + i))
            for i in range(n)]


def samples(m, name):
    """{labels: value} of a metric in /.ucm/stats."""
    text = read_file(m.path('.ucm/stats')).decode()
    return {k: float(v) for k, v in
            re.findall(r'^%s(\{[^}]*\})? (\S+)$' % re.escape(name), text, re.M)}


def metric(m, name):
    """The sum of a metric's samples in /.ucm/stats."""
    return sum(samples(m, name).values())


def store_files(store):
    """{id: bytes on disk} of the block files of a STORE."""
    data = os.path.join(store, 'data')
    out = {}
    for d in os.listdir(data):
        if len(d) != 3:
            continue
        for n in os.listdir(os.path.join(data, d)):
            if '.tmp' not in n:
                try:
                    out[n] = os.stat(os.path.join(data, d, n)).st_blocks * 512
                except FileNotFoundError:
                    pass
    return out


def served(m, bid, want):
    """True once the host m serves exactly `want` for bid (None: no such block)."""
    try:
        got = read_file(m.path(bid))
    except FileNotFoundError:
        return want is None
    return got == want


def tier_xattr(m, bid):
    return os.getxattr(m.path(bid), 'user.ucm.tier').decode()


# --- the cases -------------------------------------------------------------------------------

def test_commit_seen_by_other_host():
    """A block copied in through hA is served by hB without a remount: by name, in ls, and
    counted by a query, on both kinds of volume."""
    for kind in ('distribute', 'replica'):
        ha, hb = hosts(kind)
        with ha, hb:
            bid, data = rand_id(), pattern(4 * MiB, 1)
            write_file(ha.path(bid), data)
            check(wait_until(lambda: served(hb, bid, data), SETTLE),
                  '%s: hB does not serve the block hA wrote' % kind)
            check(bid in hb.blocks(), '%s: hB does not list it' % kind)
            q = hb.path('.ucm/query/q-' + rand_id()[:8])
            with open(q, 'w') as f:
                f.write(bid + '\n' + rand_id())
            got = [os.getxattr(q, 'user.ucm.' + a).decode() for a in ('prefix', 'hits')]
            check(got == ['1', '10'], '%s: prefix and hits of a query on hB: %r' % (kind, got))


def test_miss_costs_one_store_lookup():
    """Each id a host does not know costs one lookup on the shared filesystem, found or not;
    asking again within the bound costs nothing more; ls costs none per block."""
    ha, hb = hosts()
    with ha, hb:
        ids = [rand_id() for _ in range(4)]
        for i, bid in enumerate(ids[:2]):
            write_file(ha.path(bid), pattern(64 * KiB, i), fsync=True)
        before = metric(hb, 'ucmfs_disk_store_lookups_total')
        for bid in ids:
            try:
                os.stat(hb.path(bid))
            except FileNotFoundError:
                pass
        after = metric(hb, 'ucmfs_disk_store_lookups_total')
        check(after - before == len(ids), '%d store lookups for %d ids hB did not know' % (
            after - before, len(ids)))
        size = os.stat(hb.path(ids[0])).st_size
        check(size == 64 * KiB, 'size of a block found on the store: %d' % size)
        check(metric(hb, 'ucmfs_disk_store_lookups_total') == after,
              'a second stat within the bound asked the store again')
        time.sleep(BOUND * 2)
        for bid in ids[:2]:
            read_file(hb.path(bid))
        time.sleep(BOUND * 2)   # what hB knows is old now: a lookup would ask the store
        before = metric(hb, 'ucmfs_disk_store_lookups_total')
        listed = hb.blocks()
        check(listed == sorted(ids[:2]), 'hB lists %r' % listed)
        check(metric(hb, 'ucmfs_disk_store_lookups_total') == before,
              'ls cost %d store lookups' % (metric(hb, 'ucmfs_disk_store_lookups_total') -
                                            before))


def test_replacement_by_other_host():
    """hA writes 4 MiB, hB replaces it with 1 MiB: within the bound hA's stat says 1 MiB and
    cat returns hB's bytes, never a short or a mixed read; a reader that had the old version
    open on hA reads all of the old one."""
    ha, hb = hosts()
    with ha, hb:
        bid, old, new = rand_id(), pattern(4 * MiB, 2), pattern(1 * MiB, 3)
        write_file(ha.path(bid), old, fsync=True)
        check(wait_until(lambda: served(hb, bid, old), SETTLE), 'hB never saw the first version')
        same(read_file(ha.path(bid)), old, 'hA reads its version')
        fd = os.open(ha.path(bid), os.O_RDONLY)
        try:
            first = os.pread(fd, MiB, 0)
            write_file(hb.path(bid), new, flags=os.O_WRONLY | os.O_TRUNC, fsync=True)
            check(wait_until(lambda: os.stat(ha.path(bid)).st_size == len(new), SETTLE),
                  'hA still says %d bytes after hB replaced the block' %
                  os.stat(ha.path(bid)).st_size)
            same(read_file(ha.path(bid)), new, 'hA reads the replacement')
            rest = b''.join(os.pread(fd, MiB, off) for off in range(MiB, len(old), MiB))
            same(first + rest, old, 'the reader that had the old version open')
        finally:
            os.close(fd)
        check(metric(ha, 'ucmfs_mem_stale_dropped_total') >= 1,
              'hA never dropped its out-of-date copy from memory')


def test_same_id_on_both_hosts():
    """Both hosts write one id at once, each its own bytes: once the dumps are in, both hosts
    serve one and the same version, one of the two."""
    ha, hb = hosts()
    with ha, hb:
        bid, va, vb = rand_id(), pattern(2 * MiB, 4), pattern(2 * MiB, 5)
        write_file(ha.path(bid), va)
        write_file(hb.path(bid), vb)

        def agree():
            a, b = read_file(ha.path(bid)), read_file(hb.path(bid))
            return a == b and a in (va, vb)
        check(wait_until(agree, SETTLE), 'the hosts serve different versions of one id')


def test_remove_by_other_host():
    """rm through hA of a block in hB's memory: within the bound hB has no such block: stat,
    open, xattrs and ls agree."""
    ha, hb = hosts()
    with ha, hb:
        bid, data = rand_id(), pattern(1 * MiB, 6)
        write_file(ha.path(bid), data, fsync=True)
        check(wait_until(lambda: served(hb, bid, data), SETTLE), 'hB never saw the block')
        check('mem' in tier_xattr(hb, bid), 'hB should hold it in memory: %s' %
              tier_xattr(hb, bid))
        os.unlink(ha.path(bid))
        check(wait_until(lambda: not os.path.exists(hb.path(bid)), SETTLE),
              'hB still has a block that hA removed')
        expect_errno(errno.ENOENT, open, hb.path(bid), 'rb')
        expect_errno(errno.ENOENT, tier_xattr, hb, bid)
        check(bid not in hb.blocks(), 'hB still lists the removed block')


def test_dead_store_file_not_served():
    """A block removed on the volume behind both hosts' backs (by an operator) is gone for
    them within the bound; the next copy in through either host is served by both."""
    ha, hb = hosts()
    with ha, hb:
        bid, data = rand_id(), pattern(256 * KiB, 7)
        write_file(ha.path(bid), data, fsync=True)
        check(wait_until(lambda: served(hb, bid, data), SETTLE), 'hB never saw the block')
        shard = os.path.join(ha.store, 'data', bid[:3])
        os.unlink(os.path.join(shard, bid))
        for h in (ha, hb):
            check(wait_until(lambda: not os.path.exists(h.path(bid)), SETTLE),
                  '%s still serves a block whose file is gone' % h.host)
        data2 = pattern(256 * KiB, 8)
        write_file(hb.path(bid), data2, fsync=True)
        check(wait_until(lambda: served(ha, bid, data2), SETTLE), 'hA never saw the new copy')


def test_index_across_mount_paths():
    """hA stops cleanly and starts again through another client mount of the same volume: it
    takes the index it saved (no header read per block) and serves every block."""
    ha, = hosts(n=1)
    with ha:
        blocks = {rand_id(): pattern(64 * KiB, i) for i in range(20)}
        for bid, data in blocks.items():
            # on disk before the pause: a dump still queued behind a busy machine would
            # rename its file within the second before the save
            write_file(ha.path(bid), data, fsync=True)
        time.sleep(1.5)  # a file changed within a second of the save is read again
        ha.unmount()
        a, b = VOLUMES['distribute']
        check(ha.store.startswith(a + '/'), 'hA was not on the first client mount')
        ha.store = b + ha.store[len(a):]
        ha.start()
        got = metric(ha, 'ucmfs_start_blocks_from_index_total')
        check(got == len(blocks), 'through another mount path %d of %d blocks came from the '
              'saved index' % (got, len(blocks)))
        for bid, data in blocks.items():
            same(read_file(ha.path(bid)), data, 'block %s after the restart' % bid)


def temp_files(store, host):
    """The temp files of `host` in a STORE."""
    data = os.path.join(store, 'data')
    return [n for d in os.listdir(data) if len(d) == 3
            for n in os.listdir(os.path.join(data, d)) if '.tmp.%s.' % host in n]


def test_killed_host_temp_files_removed():
    """kill -9 of hA in the middle of writing a 128 MiB block (larger than its memory, so it
    goes to the STORE as it comes): hB removes the temp file it left within seconds, and
    never one of a host that is alive."""
    ha, hb = hosts(opts='mem_size=32M')
    with ha, hb:
        live = rand_id()
        fb = os.open(hb.path(live), os.O_WRONLY | os.O_CREAT)
        try:
            os.ftruncate(fb, 128 * MiB)
            os.pwrite(fb, pattern(40 * MiB, 9), 0)   # hB's own temp file, in the STORE
            fa = os.open(ha.path(rand_id()), os.O_WRONLY | os.O_CREAT)
            os.ftruncate(fa, 128 * MiB)
            for off in range(0, 64 * MiB, 4 * MiB):
                os.pwrite(fa, pattern(4 * MiB, off), off)
            check(wait_until(lambda: temp_files(ha.store, 'hA'), SETTLE),
                  'hA wrote no temp file into the STORE')
            ha.kill9()
            try:
                os.close(fa)
            except OSError:
                pass
            check(wait_until(lambda: not temp_files(ha.store, 'hA'), 15 * SLOW),
                  'the temp files of the killed hA are still there: %s' %
                  temp_files(ha.store, 'hA'))
            check(temp_files(hb.store, 'hB'), 'the temp file of hB, which is alive, is gone')
            os.pwrite(fb, pattern(88 * MiB, 10), 40 * MiB)
        finally:
            try:
                os.close(fb)   # after a failure above the block is incomplete: EIO
            except OSError:
                pass
        want = pattern(40 * MiB, 9) + pattern(88 * MiB, 10)
        same(read_file(hb.path(live)), want, 'the block hB wrote meanwhile')
        check(metric(hb, 'ucmfs_temp_files_removed_total') >= 1,
              'ucmfs_temp_files_removed_total did not count it')


def test_one_capacity_one_reclaimer():
    """hA mounts with disk_size=8M: one reclaimer keeps the STORE as a whole (both hosts'
    blocks) within 8 MiB, coldest first, never a block a host opened lately; both hosts
    report the same store figures under one store_id, and exactly one reclaims."""
    ha, hb = hosts(opts='mem_size=16M', first='disk_size=8M')
    with ha, hb:
        ids = [rand_id() for _ in range(12)]
        write_file(ha.path(ids[0]), pattern(MiB, 0), fsync=True)
        time.sleep(1.5)      # an open is told from the commit by the atime past the mtime
        fd = os.open(hb.path(ids[0]), os.O_RDONLY)   # hB reads the oldest block
        try:
            os.pread(fd, 4096, 0)
            for i, bid in enumerate(ids[1:], 1):
                write_file((ha, hb)[i % 2].path(bid), pattern(MiB, i), fsync=True)
            total = lambda: sum(store_files(ha.store).values())
            check(wait_until(lambda: total() <= 8 * MiB, 20 * SLOW),
                  'the STORE holds %d bytes, above disk_size=8M of hA' % total())
            left = store_files(ha.store)
            check(ids[0] in left, 'the block hB opened was evicted')
            check(all(b in left for b in ids[-3:]), 'the newest blocks were evicted')
            check(len(left) >= 6, 'only %d blocks left: more evicted than needed' % len(left))
        finally:
            os.close(fd)
        reclaimers = [metric(h, 'ucmfs_store_reclaimer') for h in (ha, hb)]
        check(sorted(reclaimers) == [0, 1], 'reclaimers per host: %r' % reclaimers)

        def figures_agree():
            got = [samples(h, 'ucmfs_store_blocks') for h in (ha, hb)]
            return got[0] == got[1] and list(got[0].values()) == [len(store_files(ha.store))]
        check(wait_until(figures_agree, 10 * SLOW), 'store figures: hA %r, hB %r, files %d' % (
            samples(ha, 'ucmfs_store_blocks'), samples(hb, 'ucmfs_store_blocks'),
            len(store_files(ha.store))))
        caps = [metric(h, 'ucmfs_store_capacity_bytes') for h in (ha, hb)]
        check(caps == [8 * MiB, 8 * MiB], 'store capacity per host: %r' % caps)


def lease_holder(ha, hb):
    """(the host that reclaims, the other) once exactly one of them holds the lease."""
    check(wait_until(lambda: metric(ha, 'ucmfs_store_reclaimer') +
                     metric(hb, 'ucmfs_store_reclaimer') == 1, 10 * SLOW),
          'no host took the lease')
    return (ha, hb) if metric(ha, 'ucmfs_store_reclaimer') else (hb, ha)


def test_reclaimer_killed():
    """kill -9 of the host that reclaims: another takes the lease within seconds and keeps
    the STORE within its capacity."""
    ha, hb = hosts(opts='mem_size=16M,disk_size=6M')
    with ha, hb:
        holder, other = lease_holder(ha, hb)
        holder.kill9()
        check(wait_until(lambda: metric(other, 'ucmfs_store_reclaimer') == 1, 10 * SLOW),
              '%s did not take over the lease' % other.host)
        for i in range(10):
            write_file(other.path(rand_id()), pattern(MiB, 20 + i), fsync=True)
        total = lambda: sum(store_files(other.store).values())
        check(wait_until(lambda: total() <= 6 * MiB, 20 * SLOW),
              'the STORE holds %d bytes after the reclaimer died' % total())


@case(timeout=900)
def test_model_two_hosts_sigkill():
    """The model check across hosts: hA and hB each write MODEL_BLOCKS blocks (half of them
    fsynced, some ids again on the other host with the same bytes, as content addressing
    has it) and read random ones through either host, while either host is SIGKILLed now and
    then, between operations or in the middle of a write, and started again. No fsynced block
    is ever missing on either host, and no read ever returns bytes other than its block's."""
    seed = int(os.environ.get('UCMFS_HOSTS_SEED', '0')) or random.randrange(1, 1 << 30)
    rng = random.Random(seed)
    where = 'seed %d (UCMFS_HOSTS_SEED=%d replays it)' % (seed, seed)
    hs = hosts(opts='mem_size=32M')
    content = {}      # id -> bytes: one content per id
    synced = set()    # fsynced: served whole by both hosts from then on
    torn = set()      # written in part when their host was killed: never served
    written = [0, 0]
    kills = 0

    def data_of(bid):
        if bid not in content:
            content[bid] = pattern(rng.choice((4 * KiB, 16 * KiB, 64 * KiB, 200 * KiB)),
                                   rng.randrange(1 << 30))
        return content[bid]

    def read_check(h, bid):
        try:
            got = read_file(h.path(bid))
        except FileNotFoundError:
            check(bid not in synced, '%s: %s lost fsynced block %s' % (where, h.host, bid))
            return
        check(bid not in torn, '%s: %s serves a block torn by a kill: %s' % (
            where, h.host, bid))
        same(got, content[bid], '%s: %s reading %s' % (where, h.host, bid))

    with hs[0], hs[1]:
        while min(written) < MODEL_BLOCKS:
            i = rng.randrange(2)
            h, r = hs[i], rng.random()
            if r < 0.45:
                again = content and rng.random() < 0.1
                bid = rng.choice(sorted(content)) if again else rand_id()
                if bid in torn:
                    continue
                fsync = rng.random() < 0.5
                write_file(h.path(bid), data_of(bid), fsync=fsync)
                if fsync:
                    synced.add(bid)
                written[i] += 1
            elif r < 0.985 and content:
                read_check(h, rng.choice(sorted(content)))
            elif r < 0.99:
                bid = rand_id()
                data = data_of(bid)
                fd = os.open(h.path(bid), os.O_WRONLY | os.O_CREAT)
                os.ftruncate(fd, len(data))
                os.pwrite(fd, data[:len(data) // 2], 0)
                torn.add(bid)
                h.kill9()
                try:
                    os.close(fd)
                except OSError:
                    pass
                h.start()
                kills += 1
            else:
                h.kill9()
                h.start()
                kills += 1
        for h in hs:
            for bid in content:
                read_check(h, bid)
    print('# model: %d blocks written, %d fsynced, %d kills, %s' % (
        sum(written), len(synced), kills, where))


def test_reclaimer_stalled():
    """The host that reclaims stops (SIGSTOP: a machine that hangs, whose lock the filesystem
    keeps): another host takes the lease over within seconds (it has no heartbeat); the
    stalled one, woken, finds its lease replaced and gives it up."""
    ha, hb = hosts(opts='mem_size=16M')
    with ha, hb:
        holder, other = lease_holder(ha, hb)
        t0 = time.monotonic()
        os.kill(holder.proc.pid, signal.SIGSTOP)
        try:
            check(wait_until(lambda: metric(other, 'ucmfs_store_reclaimer') == 1, 30 * SLOW),
                  '%s did not take over the lease of the stalled %s' % (other.host,
                                                                       holder.host))
            took = time.monotonic() - t0
        finally:
            os.kill(holder.proc.pid, signal.SIGCONT)
        check(took < 20, 'the lease took %.1f s to pass' % took)
        check(wait_until(lambda: metric(holder, 'ucmfs_store_reclaimer') == 0, 10 * SLOW),
              'the woken %s still says it reclaims' % holder.host)
        check(metric(other, 'ucmfs_store_reclaimer') == 1, 'the lease left %s' % other.host)


def brick_pids(volume):
    """[pid of brick 0, pid of brick 1] of a volume (0: down)."""
    xml = gluster('volume', 'status', volume, '--xml').stdout
    return [int(p) for p in re.findall(r'<node>.*?<path>[^<]*-b\d</path>.*?<pid>(-?\d+)</pid>',
                                       xml, re.S)]


def restart_brick(volume, i):
    """Start brick i again once glusterd has seen it die (started before that, glusterd
    takes the dying process for a running brick and leaves it down)."""
    check(wait_until(lambda: brick_pids(volume)[i] <= 0, 30 * SLOW, step=0.5),
          'glusterd never saw brick %d of %s die' % (i, volume))

    def up():
        gluster('volume', 'start', volume, 'force', check_rc=False)
        return brick_pids(volume)[i] > 0
    check(wait_until(up, 30 * SLOW, step=1), 'brick %d of %s did not start again' % (i, volume))


def test_brick_killed_and_healed():
    """On the replica 2 volume: a brick killed while the hosts write and read, started again
    and healed, then the other brick killed: every block is served with its bytes by both
    hosts throughout."""
    ha, hb = hosts('replica')
    vol = GL.volumes[1]
    with ha, hb:
        blocks = {}
        for i in range(6):
            bid = rand_id()
            blocks[bid] = pattern(512 * KiB, 40 + i)
            write_file((ha, hb)[i % 2].path(bid), blocks[bid], fsync=True)
        pids = brick_pids(vol)
        check(len(pids) == 2 and all(p > 0 for p in pids), 'bricks of %s: %r' % (vol, pids))
        os.kill(pids[1], 9)   # the second: replica 2 keeps writing while the first is up
        for i in range(6):
            bid = rand_id()
            blocks[bid] = pattern(512 * KiB, 50 + i)
            write_file((ha, hb)[i % 2].path(bid), blocks[bid], fsync=True)
        for h in (ha, hb):
            for bid, data in blocks.items():
                check(wait_until(lambda: served(h, bid, data), SETTLE),
                      '%s, one brick down: block %s' % (h.host, bid))
        restart_brick(vol, 1)
        info = ['']

        def healed():
            # asked again until the self-heal daemon has reconnected to the brick
            gluster('volume', 'heal', vol, check_rc=False)
            info[0] = gluster('volume', 'heal', vol, 'info', check_rc=False).stdout
            return re.findall(r'Number of entries: (\S+)', info[0]) == ['0', '0']
        check(wait_until(healed, 90 * SLOW, step=2), 'the volume did not heal within 90 s: %s'
              % ' '.join(info[0].split())[-300:])
        for h in (ha, hb):
            h.remount()       # memory empty: every read below comes from the volume
        pids = brick_pids(vol)
        os.kill(pids[0], 9)   # now only the healed brick has the bytes
        try:
            for h in (ha, hb):
                for bid, data in blocks.items():
                    same(read_file(h.path(bid)), data, '%s, healed brick alone: %s' % (h.host, bid))
        finally:
            restart_brick(vol, 0)


if __name__ == '__main__':
    if os.path.exists('/dev/fuse'):
        try:
            setup()
        except AssertionError as e:
            print('FAIL setup: %s' % e)
            if GL:
                GL.teardown()
            sys.exit(1)
    run([test_commit_seen_by_other_host, test_miss_costs_one_store_lookup,
         test_replacement_by_other_host, test_same_id_on_both_hosts, test_remove_by_other_host,
         test_dead_store_file_not_served, test_index_across_mount_paths,
         test_killed_host_temp_files_removed, test_one_capacity_one_reclaimer,
         test_reclaimer_killed, test_reclaimer_stalled, test_brick_killed_and_healed,
         test_model_two_hosts_sigkill])
