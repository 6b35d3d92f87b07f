#!/usr/bin/env python3
"""Crash campaign (DESIGN.md sections 3 and 5): rounds of writers and readers on a mount
whose daemon is SIGKILLed at a random moment, then a new daemon on the same STORE.

Each round: mount with the round's options, start writer and reader processes, SIGKILL the
daemon (even rounds: after a random delay; odd rounds: within a millisecond of the k-th
fsync + close returning, k random), let the processes see the dead mount and exit,
`fusermount3 -u -z` it, mount again (the daemon must recover alone) and check:
  - every block whose fsync + close returned before the kill is there, byte-exact (with
    `durable`, every block whose close returned);
  - every other block is absent or byte-exact, never torn: the content of a block is derived
    from its id, so any listed block can be checked;
  - no name that no writer ever created is listed, no temp file (*.tmp*) is left in STORE,
    nothing went to quarantine;
  - readers never saw wrong bytes before the kill;
  - a few blocks of each round are kept and must survive all later rounds; the rest are
    removed with rm (through the mount) so that STORE stays small.

Environment: UCMFS_CRASH_ROUNDS (default 16, about 15 s; the slow suite runs 50),
UCMFS_CRASH_SEED (default: a fresh one, printed; a failure names the round and its seed).
"""
import errno
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compress import kv_bytes, stat_sum
from ucmtest import (KiB, MiB, SLOW, Mount, case, check, popen, read_file, run, wait_until)

ROUNDS = int(os.environ.get('UCMFS_CRASH_ROUNDS', '16') or 16)
SEED = int(os.environ.get('UCMFS_CRASH_SEED', '0') or 0) or random.SystemRandom().randrange(
    1, 1 << 31)
SIZES = [0, 1, 4 * KiB + 1, 64 * KiB, 256 * KiB + 3, MiB, 2 * MiB, 3 * MiB + 17, 6 * MiB + 1]
BLOCKS_PER_WRITER = 60        # per round, so that a late kill does not write gigabytes
KEEP = 4                      # blocks kept from each round, checked in every later round
# the round's options cycle through these
OPTIONS = ['', 'mem_size=8M', 'durable', 'pipeline=cache:posix', 'mem_size=1M',
           'mem_size=4M,durable', 'shuffle=2,io=psync,io_depth=2', 'mem_size=16M,policy=lru']
# writer kinds: (fsync before close, declare the size with ftruncate, chunks out of order)
WRITERS = [(True, True, False), (False, False, False), (True, False, True),
           (False, True, True)]
READERS = 2
# what a dead daemon's mount answers; EIO too, for a direct write in flight when it died
GONE = (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO)


def intended(bid):
    """The content a writer puts in block bid: size, kind and bytes all follow from the id."""
    r = random.Random(bid)
    n = r.choice(SIZES)
    if r.random() < 0.6:
        return kv_bytes(n, int(bid[:16], 16))
    return r.randbytes(n)


def block_ids(rnd, w):
    r = random.Random('%d-%d-%d' % (SEED, rnd, w))
    return [r.randbytes(16).hex() for _ in range(BLOCKS_PER_WRITER)]


# --- the processes ------------------------------------------------------------------------

def log_line(f, text, sync=False):
    f.write(text + '\n')
    f.flush()
    if sync:
        os.fsync(f.fileno())


def writer_main(mnt, logpath, rnd, w):
    """Write this writer's blocks one after the other; log 'S id' before each, and 'C id'
    once close returned ('F id' if fsync returned before it). Exits at the first error."""
    do_fsync, declare, shuffled = WRITERS[w]
    rng = random.Random('%d-%d-%d-order' % (SEED, rnd, w))
    with open(logpath, 'a') as log:
        for bid in block_ids(rnd, w):
            data = intended(bid)
            log_line(log, 'S ' + bid)
            try:
                fd = os.open(os.path.join(mnt, bid), os.O_WRONLY | os.O_CREAT, 0o644)
            except OSError as e:
                log_line(log, 'E %s %d %f' % (bid, e.errno, time.monotonic()))
                return
            try:
                if declare:
                    os.ftruncate(fd, len(data))
                pieces = [(o, data[o:o + 256 * KiB]) for o in range(0, len(data), 256 * KiB)]
                if shuffled:
                    rng.shuffle(pieces)
                for off, piece in pieces:
                    done = 0
                    while done < len(piece):
                        done += os.pwrite(fd, piece[done:], off + done)
                if do_fsync:
                    os.fsync(fd)
            except OSError as e:
                log_line(log, 'E %s %d %f' % (bid, e.errno, time.monotonic()))
                try:
                    os.close(fd)
                except OSError:
                    pass
                return
            try:
                os.close(fd)
            except OSError as e:
                log_line(log, 'E %s %d %f' % (bid, e.errno, time.monotonic()))
                return
            log_line(log, ('F ' if do_fsync else 'C ') + bid, sync=True)


def reader_main(mnt, logpath, seed):
    """Read random listed blocks whole and compare them with their intended content; log
    'B id' for wrong bytes, 'E id errno time' for an error. Exits when the mount is dead."""
    rng = random.Random(seed)
    with open(logpath, 'a') as log:
        while True:
            try:
                names = [n for n in os.listdir(mnt) if len(n) == 32]
            except OSError as e:
                log_line(log, 'E - %d %f' % (e.errno, time.monotonic()))
                return
            if not names:
                time.sleep(0.01)
                continue
            for bid in rng.sample(names, min(4, len(names))):
                try:
                    fd = os.open(os.path.join(mnt, bid), os.O_RDONLY)
                except FileNotFoundError:
                    continue                      # removed meanwhile (never during a round)
                except OSError as e:
                    log_line(log, 'E %s %d %f' % (bid, e.errno, time.monotonic()))
                    return
                try:
                    parts, off = [], 0
                    while True:
                        b = os.pread(fd, MiB, off)
                        if not b:
                            break
                        parts.append(b)
                        off += len(b)
                except OSError as e:
                    log_line(log, 'E %s %d %f' % (bid, e.errno, time.monotonic()))
                    return
                finally:
                    os.close(fd)
                if b''.join(parts) != intended(bid):
                    log_line(log, 'B %s %d' % (bid, off))
                else:
                    log_line(log, 'R ' + bid)


def read_log(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.endswith('\n'):
                    out.append(line.split())
    except FileNotFoundError:
        pass
    return out


# --- the campaign -------------------------------------------------------------------------

def temp_files(store):
    out = []
    for root, dirs, files in os.walk(store):
        out += [os.path.join(root, n) for n in files + dirs if '.tmp' in n]
    return out


def quarantine(store):
    try:
        return os.listdir(os.path.join(store, 'quarantine'))
    except FileNotFoundError:
        return []


def one_round(m, rnd, rng, attempted, survivors):
    opts = OPTIONS[rnd % len(OPTIONS)]
    where = 'round %d (seed %d, -o %s)' % (rnd, SEED, opts or 'default')
    logs = os.path.join(m.tmp, 'logs%d' % rnd)
    os.mkdir(logs)
    m.start(opts)
    me = os.path.abspath(__file__)
    procs = []
    for w in range(len(WRITERS)):
        procs.append(popen([sys.executable, me, '--writer', m.mnt, os.path.join(logs, 'w%d' % w),
                            str(rnd), str(w)]))
    for k in range(READERS):
        procs.append(popen([sys.executable, me, '--reader', m.mnt, os.path.join(logs, 'r%d' % k),
                            str(rng.randrange(1 << 30))]))
    t0 = time.monotonic()
    if rnd % 2 == 0:
        how = 'at random'
        time.sleep(rng.uniform(0.1, 1.2) * SLOW)
    else:
        # right after the target-th fsync + close returned (the log is polled every 1 ms):
        # the block that was just made durable is the one most likely lost if it is not
        target = rng.randrange(1, 16)
        how = 'after fsync %d' % target
        fsync_logs = [os.path.join(logs, 'w%d' % w) for w in range(len(WRITERS))
                      if WRITERS[w][0]]
        wait_until(lambda: sum(1 for f in fsync_logs for r in read_log(f) if r[0] == 'F')
                   >= target, 3, step=0.001)
    t_kill = time.monotonic()
    delay = t_kill - t0
    m.proc.kill()                                   # the crash
    m.proc.wait(timeout=30)
    # the processes see the dead mount (ENOTCONN) and exit; only then is it detached, so that
    # none of them can create a file in the bare mountpoint directory
    wait_until(lambda: all(p.poll() is not None for p in procs[:len(WRITERS)]), 20)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    m.kill9()                                       # fusermount3 -u -z of the dead mount
    check(not os.path.ismount(m.mnt), '%s: still mounted after fusermount3 -u -z' % where)

    started, closed, synced = [], set(), set()
    early = []
    for w in range(len(WRITERS)):
        for rec in read_log(os.path.join(logs, 'w%d' % w)):
            if rec[0] == 'S':
                started.append(rec[1])
            elif rec[0] == 'C':
                closed.add(rec[1])
            elif rec[0] == 'F':
                closed.add(rec[1])
                synced.add(rec[1])
            elif rec[0] == 'E' and (int(rec[2]) not in GONE or float(rec[3]) < t_kill):
                early.append('writer %d: %s on %s, %+.3fs from the kill' % (
                    w, errno.errorcode.get(int(rec[2])), rec[1], float(rec[3]) - t_kill))
    reads, bad = 0, []
    for k in range(READERS):
        for rec in read_log(os.path.join(logs, 'r%d' % k)):
            if rec[0] == 'R':
                reads += 1
            elif rec[0] == 'B':
                bad.append(rec[1])
            elif rec[0] == 'E' and (int(rec[2]) not in GONE or float(rec[3]) < t_kill):
                early.append('reader %d: %s on %s' % (k, errno.errorcode.get(int(rec[2])),
                                                       rec[1]))
    attempted.update(started)
    check(not bad, '%s: readers saw wrong bytes in %d blocks before the kill (%s)' % (
        where, len(bad), bad[:3]))
    check(not early, '%s: errors before the kill: %s' % (where, early[:3]))

    # a new daemon on the same STORE, with no help
    m.start(opts)
    removed = stat_sum(m, 'ucmfs_temp_files_removed_total')
    temps = temp_files(m.store)
    check(not temps, '%s: temp files left after the remount: %s' % (
        where, [os.path.relpath(t, m.store) for t in temps[:3]]))
    check(not quarantine(m.store), '%s: files in quarantine: %s' % (where, quarantine(m.store)))
    listed = set(m.blocks())
    stray = listed - attempted
    check(not stray, '%s: listed names no writer created: %s' % (where, sorted(stray)[:3]))
    must = synced | (closed if 'durable' in opts else set())
    lost = sorted(must - listed)
    check(not lost, '%s: %d of %d blocks whose %s returned before the kill are missing '
          '(%s)' % (where, len(lost), len(must), 'close' if 'durable' in opts else
                    'fsync + close', lost[:3]))
    present = [b for b in started if b in listed]
    for bid in present:
        want = intended(bid)
        try:
            got = read_file(m.path(bid))
        except OSError as e:
            raise AssertionError('%s: block %s (%s, %d bytes) cannot be read after the '
                                 'crash: %s' % (where, bid, 'fsynced' if bid in synced else
                                                'closed' if bid in closed else 'in flight',
                                                len(want), e))
        check(got == want, '%s: block %s (%s) is torn: %d bytes read, %d intended%s' % (
            where, bid, 'fsynced' if bid in synced else 'closed' if bid in closed else
            'in flight', len(got), len(want), '' if len(got) != len(want) else
            ', other bytes'))
    for bid in sorted(survivors):
        check(bid in listed, '%s: block %s kept from an earlier round is gone' % (where, bid))
        check(read_file(m.path(bid)) == intended(bid), '%s: block %s kept from an earlier '
              'round changed' % (where, bid))
    # keep a few, remove the rest through the mount
    keep = rng.sample(present, min(KEEP, len(present)))
    survivors.update(keep)
    for bid in present:
        if bid not in keep:
            os.unlink(m.path(bid))
    m.unmount()
    return ('# %s: killed %s, after %.2fs; %d started, %d closed, %d fsynced, %d present '
            'after the crash, %d temp files removed at mount, %d reads\n' % (
                where, how, delay, len(started), len(closed), len(synced), len(present),
                removed, reads))


@case(timeout=60 + 6 * ROUNDS)
def test_crash_rounds():
    sys.stderr.write('# crash campaign: %d rounds, UCMFS_CRASH_SEED=%d\n' % (ROUNDS, SEED))
    rng = random.Random(SEED)
    attempted, survivors = set(), set()
    with Mount() as m:
        m.unmount()                                 # each round mounts with its options
        for rnd in range(ROUNDS):
            sys.stderr.write(one_round(m, rnd, rng, attempted, survivors))
            sys.stderr.flush()
        m.start('')
        check(set(m.blocks()) == survivors, 'at the end: %d blocks listed, %d kept' % (
            len(m.blocks()), len(survivors)))


if __name__ == '__main__':
    if len(sys.argv) > 1 and sys.argv[1] == '--writer':
        writer_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        sys.exit(0)
    if len(sys.argv) > 1 and sys.argv[1] == '--reader':
        reader_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        sys.exit(0)
    run([test_crash_rounds])
