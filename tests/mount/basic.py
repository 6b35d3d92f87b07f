#!/usr/bin/env python3
"""Basic use of a mount: round trips, listing, stat, touch, shell redirects, /.ucm/config,
statfs and du (DESIGN.md sections 2 and 3), and what the daemon logs (log_level=)."""
import os
import random
import re
import socket
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (KiB, MiB, Mount, case, check, cmd, daemon_bin, daemon_env, pattern,
                     rand_id, read_file, run, same, wait_until, with_test_opts, write_file)


def mixed_sizes(n, rng):
    """n block sizes from 4 KiB to 8 MiB: the edges, odd sizes, and log-uniform ones."""
    edges = [4 * KiB, 4 * KiB + 1, 64 * KiB - 1, 64 * KiB + 1, 128 * KiB, MiB - 1, MiB,
             MiB + 1, 2 * MiB + 12345, 3 * MiB + 4095, 8 * MiB - 1, 8 * MiB]
    sizes = list(edges)
    while len(sizes) < n:
        s = int(2 ** rng.uniform(12, 23))
        if rng.random() < 0.5:
            s |= 1                       # odd
        sizes.append(max(4 * KiB, min(8 * MiB, s)))
    rng.shuffle(sizes)
    return sizes


@case(timeout=240)
def test_roundtrip_200_blocks():
    rng = random.Random(1)
    sizes = mixed_sizes(200, rng)
    with Mount() as m:
        src = os.path.join(m.tmp, 'src')
        os.mkdir(src)
        blocks = {}
        for i, n in enumerate(sizes):
            bid = rand_id()
            blocks[bid] = pattern(n, i)
            with open(os.path.join(src, bid), 'wb') as f:
                f.write(blocks[bid])
        ids = sorted(blocks)
        by_cp, by_py = ids[0::2], ids[1::2]
        # half through cp (one process, many files), half through open/write/close
        cmd(['cp'] + [os.path.join(src, b) for b in by_cp] + [m.mnt], timeout=120)
        for b in by_py:
            write_file(m.path(b), blocks[b])

        # readdir: exactly the blocks, plus the hidden .ucm
        out = cmd(['ls', m.mnt]).stdout.split()
        check(out == ids, 'ls lists %d names, %d blocks written (extra %s, missing %s)' % (
            len(out), len(ids), sorted(set(out) - set(ids))[:3],
            sorted(set(ids) - set(out))[:3]))
        out = cmd(['ls', '-A', m.mnt]).stdout.split()
        check(sorted(out) == sorted(ids + ['.ucm']),
              'ls -A lists %s beside the blocks' % sorted(set(out) - set(ids)))
        check(m.blocks() == ids, 'os.listdir differs from the blocks written')

        for b in ids:
            st = os.stat(m.path(b))
            check(st.st_size == len(blocks[b]),
                  '%s: st_size %d, wrote %d' % (b, st.st_size, len(blocks[b])))
            check(stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644,
                  '%s: mode %o, expected regular 0644' % (b, st.st_mode))
            check(st.st_uid == os.getuid() and st.st_gid == os.getgid(),
                  '%s: owner %d:%d, mounted by %d:%d' % (b, st.st_uid, st.st_gid,
                                                        os.getuid(), os.getgid()))
        # every block both ways: cmp(1) against the source, and Python reads
        for b in ids:
            r = cmd(['cmp', os.path.join(src, b), m.path(b)], check_rc=False)
            check(r.returncode == 0, 'cmp %s: %s' % (b, (r.stdout + r.stderr).strip()))
            same(read_file(m.path(b)), blocks[b], b)
        # and a copy back out with cp
        out_dir = os.path.join(m.tmp, 'out')
        os.mkdir(out_dir)
        cmd(['cp'] + [m.path(b) for b in by_py[:20]] + [out_dir], timeout=120)
        for b in by_py[:20]:
            with open(os.path.join(out_dir, b), 'rb') as f:
                same(f.read(), blocks[b], 'cp out of the mount: ' + b)
        shell_stat = cmd(['stat', '-c', '%s %a %u', m.path(ids[0])]).stdout.split()
        check(shell_stat == [str(len(blocks[ids[0]])), '644', str(os.getuid())],
              'stat(1) says %s' % shell_stat)


def test_config_file():
    with Mount('mem_size=64M,policy=lru') as m:
        cfg = m.path('.ucm/config')
        text = read_file(cfg).decode()
        lines = [l for l in text.split('\n') if l]
        check(lines, '/.ucm/config is empty')
        for l in lines:
            check(re.fullmatch(r'[a-z_]+=.*', l), '/.ucm/config line is not key=value: %r' % l)
        kv = dict(l.split('=', 1) for l in lines)
        for key in ('mem_size', 'policy', 'store'):
            check(key in kv, '/.ucm/config has no %s= line: %r' % (key, text))
        check(kv['mem_size'] in ('64M', str(64 * MiB)),
              'mem_size=%s in /.ucm/config, mounted with 64M' % kv['mem_size'])
        check(kv['policy'] == 'lru', 'policy=%s in /.ucm/config, mounted with lru' % kv['policy'])
        check(os.stat(cfg).st_size in (0, len(text.encode())),
              'st_size of /.ucm/config is %d, %d bytes read' % (os.stat(cfg).st_size, len(text)))
        for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC, os.O_WRONLY | os.O_APPEND):
            try:
                fd = os.open(cfg, flags)
            except OSError:
                continue                           # refused at open: fine
            try:
                n = os.write(fd, b'mem_size=1T\n')
            except OSError:
                n = 0
            finally:
                try:
                    os.close(fd)
                except OSError:
                    pass
            check(n <= 0, '/.ucm/config accepted a write (open flags %#o)' % flags)
        r = cmd(['sh', '-c', 'echo mem_size=1T > "$1"', 'sh', cfg], check_rc=False)
        check(r.returncode != 0, 'echo > /.ucm/config succeeded')
        check(read_file(cfg).decode() == text, '/.ucm/config changed after a write attempt')


def test_statfs_and_du():
    sizes = [MiB, 2 * MiB + 1, 3 * MiB - 7, 64 * KiB, 5 * MiB]
    with Mount() as m:
        before = os.statvfs(m.mnt)
        check(before.f_files == 0, 'f_files %d on an empty store' % before.f_files)
        ids = [rand_id() for _ in sizes]
        for i, (b, n) in enumerate(zip(ids, sizes)):
            write_file(m.path(b), pattern(n, i))
        sv = os.statvfs(m.mnt)
        check(sv.f_files == len(ids), 'f_files %d right after writing %d blocks' % (
            sv.f_files, len(ids)))
        for b in ids:                              # make them durable on the disk tier
            fd = os.open(m.path(b), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        sv = os.statvfs(m.mnt)
        check(sv.f_files == len(ids), 'f_files %d with %d blocks on disk' % (
            sv.f_files, len(ids)))
        check(sv.f_bsize > 0 and sv.f_frsize > 0, 'block sizes %d/%d' % (sv.f_bsize,
                                                                        sv.f_frsize))
        check(sv.f_blocks > 0 and sv.f_bfree <= sv.f_blocks and sv.f_bavail <= sv.f_blocks,
              'f_blocks %d, f_bfree %d, f_bavail %d' % (sv.f_blocks, sv.f_bfree, sv.f_bavail))
        used0 = (before.f_blocks - before.f_bfree) * before.f_frsize
        used = (sv.f_blocks - sv.f_bfree) * sv.f_frsize
        check(used - used0 >= sum(sizes) * 9 // 10,
              'statfs use grew by %d bytes for %d bytes of random blocks' % (used - used0,
                                                                            sum(sizes)))
        check(sv.f_blocks * sv.f_frsize >= used, 'capacity below use')
        for b, n in zip(ids, sizes):
            blocks = wait_until(lambda: os.stat(m.path(b)).st_blocks, 10)
            check(blocks * 512 >= n // 2, '%s: st_blocks %d for %d bytes on disk' % (
                b, blocks, n))
            du = int(cmd(['du', '-k', m.path(b)]).stdout.split()[0])
            check(du > 0, 'du -k %s says %d' % (b, du))
        os.unlink(m.path(ids[0]))
        check(os.statvfs(m.mnt).f_files == len(ids) - 1, 'f_files %d after an unlink' %
              os.statvfs(m.mnt).f_files)
    with Mount(store='none') as m:
        for i in range(3):
            write_file(m.path(rand_id()), pattern(MiB, i))
        sv = os.statvfs(m.mnt)
        check(sv.f_files == 3, 'memory only: f_files %d with 3 blocks' % sv.f_files)


def test_touch():
    with Mount() as m:
        new = rand_id()
        cmd(['touch', m.path(new)])
        st = os.stat(m.path(new))
        check(st.st_size == 0, 'touch NEWID: size %d' % st.st_size)
        check(read_file(m.path(new)) == b'', 'touch NEWID: not empty')
        check(new in m.blocks(), 'touch NEWID: not listed')
        old = rand_id()
        data = pattern(3 * MiB + 5, 7)
        write_file(m.path(old), data)
        mtime = os.stat(m.path(old)).st_mtime
        r = cmd(['touch', m.path(old)], check_rc=False)
        check(r.returncode == 0, 'touch of an existing block failed: %s' % r.stderr.strip())
        cmd(['touch', '-c', m.path(old)])
        st = os.stat(m.path(old))
        check(st.st_size == len(data), 'touch changed the size to %d' % st.st_size)
        same(read_file(m.path(old)), data, 'block after touch')
        check(st.st_mtime >= mtime, 'touch moved mtime back')
        os.utime(m.path(old))
        same(read_file(m.path(old)), data, 'block after utime')


def test_shell_redirect():
    with Mount() as m:
        src = os.path.join(m.tmp, 'blk')
        for i, n in enumerate([5 * MiB + 3, 64 * KiB, 1]):
            data = pattern(n, 40 + i)
            with open(src, 'wb') as f:
                f.write(data)
            bid = rand_id()
            cmd(['sh', '-c', 'cat "$1" > "$2"', 'sh', src, m.path(bid)])
            same(read_file(m.path(bid)), data, 'cat > mnt/ID (%d bytes)' % n)
            check(os.stat(m.path(bid)).st_size == n, 'stat size after cat >')
        # >> on a new id, and a pipeline writing through dd
        bid = rand_id()
        data = pattern(2 * MiB + 1, 50)
        with open(src, 'wb') as f:
            f.write(data)
        cmd(['sh', '-c', 'cat "$1" | dd of="$2" bs=64k status=none', 'sh', src, m.path(bid)])
        same(read_file(m.path(bid)), data, 'cat | dd of=mnt/ID')


def as_service(opts):
    """Mount and unmount the way ucmfs@.service runs the daemon: in the foreground, stderr
    a journald stream (JOURNAL_STREAM names the file it goes to), NOTIFY_SOCKET set. Returns
    (what it logged, the datagrams it sent while mounted, those it sent after)."""
    tmp = tempfile.mkdtemp(prefix='ucmfs-svc-')
    mnt, log = os.path.join(tmp, 'mnt'), os.path.join(tmp, 'log')
    os.mkdir(mnt)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(os.path.join(tmp, 'notify'))
    sock.setblocking(False)

    def received():
        got = []
        while True:
            try:
                got.append(sock.recv(4096).decode())
            except BlockingIOError:
                return got

    with open(log, 'wb') as f:
        st = os.fstat(f.fileno())
        env = dict(daemon_env(), JOURNAL_STREAM='%d:%d' % (st.st_dev, st.st_ino),
                   NOTIFY_SOCKET=os.path.join(tmp, 'notify'))
        p = subprocess.Popen([daemon_bin(), '-f', '-o', with_test_opts(opts),
                              os.path.join(tmp, 'store'), mnt], stdin=subprocess.DEVNULL,
                             stdout=f, stderr=f, env=env)
    try:
        wait_until(lambda: os.path.ismount(mnt) or p.poll() is not None, 20)
        check(p.poll() is None, 'ucmfs exited %s' % p.returncode)
        during = []
        wait_until(lambda: during.extend(received()) or 'READY=1' in during, 5)
        cmd(['fusermount3', '-u', mnt])
        p.wait(timeout=60)
        after = received()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        sock.close()
    with open(log, 'rb') as f:
        text = f.read().decode(errors='replace')
    subprocess.run(['rm', '-rf', tmp])
    return text, during, after


def test_log_level():
    """log_level= drops the less urgent lines; under journald every line carries its level."""
    with Mount('mem_size=16M') as m:
        check(re.search(r'^ucmfs: store .*: 0 blocks', m.log_text(), re.M),
              'no start line at the default log_level=info: %r' % m.log_text())
    with Mount('mem_size=16M,log_level=warn') as m:
        cfg = read_file(m.path('.ucm/config')).decode()
        check('log_level=warn\n' in cfg, '/.ucm/config lacks log_level=warn: %r' % cfg)
        check('store' not in m.log_text(), 'an info line at log_level=warn: %r' % m.log_text())
    text, _, _ = as_service('mem_size=16M')
    lines = [l for l in text.split('\n') if l]
    check(lines, 'nothing logged to the journal stream')
    check(all(re.match(r'<[0-7]>', l) for l in lines),
          'a line without its priority on a journal stream: %r' % text)
    check(any(re.match(r'<6>store .*: 0 blocks', l) for l in lines),
          'the start line is not at priority 6 (info): %r' % text)
    # in the background, as mount(8) starts it: info lines to syslog only, errors to both
    tmp = tempfile.mkdtemp(prefix='ucmfs-bg-')
    try:
        os.mkdir(os.path.join(tmp, 'mnt'))
        r = cmd([daemon_bin(), '-o', with_test_opts('mem_size=16M'), os.path.join(tmp, 's'),
                 os.path.join(tmp, 'mnt')])
        check(os.path.ismount(os.path.join(tmp, 'mnt')), 'ucmfs in the background: no mount')
        check(r.stderr == '', 'ucmfs in the background wrote to stderr: %r' % r.stderr)
    finally:
        subprocess.run(['fusermount3', '-u', os.path.join(tmp, 'mnt')])
    r = cmd([daemon_bin(), '-o', 'mem_size=16M', '/proc/no/such/store', os.path.join(tmp, 'mnt')],
            check_rc=False)
    check(r.returncode == 1 and 'STORE' in r.stderr,
          'a background start on a bad STORE: exit %d, %r' % (r.returncode, r.stderr))
    subprocess.run(['rm', '-rf', tmp])
    r = cmd([daemon_bin(), '-f', '-o', 'log_level=loud', 'none', '/nonexistent'],
            check_rc=False)
    check(r.returncode == 2 and 'log_level' in r.stderr and r.stderr.count('\n') == 1,
          'log_level=loud: exit %d, %r' % (r.returncode, r.stderr))


def test_service_readiness():
    """Under a Type=notify unit the daemon says READY=1 once it serves its mount and
    STOPPING=1 at unmount (sd_notify's protocol), so units after it start on a live mount."""
    _, during, after = as_service('mem_size=16M')
    check(during == ['READY=1'], 'while mounted the daemon sent %r, not READY=1' % during)
    check(after == ['STOPPING=1'], 'at unmount the daemon sent %r, not STOPPING=1' % after)


if __name__ == '__main__':
    run([test_roundtrip_200_blocks, test_config_file, test_statfs_and_du, test_touch,
         test_shell_redirect, test_log_level, test_service_readiness])
