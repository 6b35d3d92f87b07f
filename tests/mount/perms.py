#!/usr/bin/env python3
"""Permissions with a second user (DESIGN.md section 2): mounted by root with allow_other,
`nobody` can read blocks and run its own queries, but cannot create, replace, unlink or
retime blocks, nor read root's query files. Without allow_other it cannot enter the mount."""
import errno
import json
import os
import select
import shutil
import stat
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, '..', '..', 'tools', 'client'))
from ucmtest import (KiB, Mount, SLOW, check, daemon_bin, pattern, rand_id, run, write_file)
import ucmfs as ucmclient

NOBODY = 65534


def as_nobody(fn, timeout=30):
    """Run fn() in a forked child with uid/gid 65534 and no groups; returns what it returned
    (JSON-able). An exception in the child is raised here."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = {'ok': fn()}
        except BaseException as e:   # report everything, exit without cleanup handlers
            out = {'err': '%s: %s' % (type(e).__name__, e)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([r], [], [], timeout * SLOW)
            if not ready:
                os.kill(pid, 9)
                raise AssertionError('the child running as nobody did not answer in %gs' %
                                     (timeout * SLOW))
            b = os.read(r, 65536)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    out = json.loads(b''.join(chunks) or b'{"err": "the child died"}')
    if 'err' in out:
        raise AssertionError('as nobody: ' + out['err'])
    return out['ok']


def attempt(fn, *args):
    """'ok' or the errno name of fn(*args)."""
    try:
        fn(*args)
        return 'ok'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def shared_mount(opts):
    """A Mount whose temporary directory other users can traverse."""
    m = Mount(opts)
    os.chmod(m.tmp, 0o755)
    return m


def expect(results, want):
    """results: {op: outcome}; want: {op: allowed outcomes (a str or a tuple)}."""
    bad = []
    for op, allowed in want.items():
        allowed = allowed if isinstance(allowed, tuple) else (allowed,)
        if results.get(op) not in allowed:
            bad.append('%s: %s (expected %s)' % (op, results.get(op), '/'.join(allowed)))
    check(not bad, 'as nobody: ' + '; '.join(bad))


def test_reader_and_queries():
    with shared_mount('allow_other,mem_size=16M') as m:
        bid = rand_id()
        data = pattern(300 * KiB, 1)
        write_file(m.path(bid), data)
        missing = rand_id()
        mine = m.path('.ucm/query/roots')
        with open(mine, 'w') as f:
            f.write(bid)

        def child():
            res = {}
            with open(m.path(bid), 'rb') as f:
                res['read'] = 'ok' if f.read() == data else 'wrong bytes'
            res['stat'] = attempt(os.stat, m.path(bid))
            res['getxattr tier'] = attempt(os.getxattr, m.path(bid), 'user.ucm.tier')
            res['listdir'] = 'ok' if bid in os.listdir(m.mnt) else 'not listed'
            res['read stats'] = attempt(lambda: open(m.path('.ucm/stats')).read())
            # a query of its own
            q = m.path('.ucm/query/nobodys')
            with open(q, 'w') as f:
                f.write('%s\n%s\n%s' % (bid, missing, bid))
            st = os.stat(q)
            res['own query owner'] = [st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)]
            res['answers'] = [os.getxattr(q, 'user.ucm.' + a).decode()
                              for a in ('prefix', 'hits', 'last')]
            os.setxattr(q, 'user.ucm.prefetch', b'1')
            res['own prefetch'] = 'ok'
            os.unlink(q)
            # the Python client as an ordinary user
            with ucmclient.Client(m.mnt) as c:
                r = c.lookup([bytes.fromhex(bid), bytes.fromhex(missing)])
                res['client lookup'] = [r.prefix, r.last, r.hits]
                res['client get'] = 'ok' if c.get(bytes.fromhex(bid)) == data else 'wrong'
                res['client put'] = attempt(c.put, os.urandom(16), b'abc')
            return res

        res = as_nobody(child)
        expect(res, {'read': 'ok', 'stat': 'ok', 'getxattr tier': 'ok', 'listdir': 'ok',
                     'read stats': 'ok', 'own prefetch': 'ok', 'client get': 'ok',
                     'client put': 'EACCES'})
        check(res['own query owner'] == [NOBODY, NOBODY, 0o600],
              'a query file of nobody: uid, gid, mode = %r' % res['own query owner'])
        check(res['answers'] == ['1', '101', '2'], 'answers to nobody: %r' % res['answers'])
        check(res['client lookup'] == [1, 0, 1], 'client lookup as nobody: %r' %
              res['client lookup'])
        check(os.listdir(m.path('.ucm/query')) == ['roots'],
              'query files left: %r' % os.listdir(m.path('.ucm/query')))


def test_cannot_touch_others():
    with shared_mount('allow_other,mem_size=16M') as m:
        bid = rand_id()
        write_file(m.path(bid), pattern(64 * KiB, 2))
        rq = m.path('.ucm/query/roots')
        with open(rq, 'w') as f:
            f.write(bid)

        def child():
            new = m.path(rand_id())
            return {
                # root's query file
                'open root query': attempt(os.open, rq, os.O_RDONLY),
                'getxattr root query': attempt(os.getxattr, rq, 'user.ucm.hits'),
                'write root query': attempt(os.open, rq, os.O_WRONLY),
                'truncate root query': attempt(os.truncate, rq, 0),
                'prefetch root query': attempt(os.setxattr, rq, 'user.ucm.prefetch', b'1'),
                'ttl root query': attempt(os.setxattr, rq, 'user.ucm.ttl', b'1000'),
                'unlink root query': attempt(os.unlink, rq),
                # blocks
                'create block': attempt(os.open, new, os.O_WRONLY | os.O_CREAT, 0o644),
                'exclusive create': attempt(os.open, new,
                                            os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644),
                'replace block': attempt(os.open, m.path(bid), os.O_WRONLY | os.O_TRUNC),
                'write block': attempt(os.open, m.path(bid), os.O_RDWR),
                'unlink block': attempt(os.unlink, m.path(bid)),
                'set ttl': attempt(os.setxattr, m.path(bid), 'user.ucm.ttl', b'1'),
                'remove ttl': attempt(os.removexattr, m.path(bid), 'user.ucm.ttl'),
                'touch block': attempt(os.utime, m.path(bid)),
                'set times': attempt(os.utime, m.path(bid), (1, 1)),
                'truncate block': attempt(os.truncate, m.path(bid), 0),
                'chmod block': attempt(os.chmod, m.path(bid), 0o666),
                'write stats': attempt(os.open, m.path('.ucm/stats'), os.O_WRONLY),
            }

        res = as_nobody(child)
        denied = ('EACCES', 'EPERM')
        expect(res, {'open root query': 'EACCES', 'getxattr root query': 'EACCES',
                     'write root query': 'EACCES', 'truncate root query': 'EACCES',
                     'prefetch root query': denied, 'ttl root query': denied,
                     'unlink root query': denied, 'create block': 'EACCES',
                     'exclusive create': 'EACCES', 'replace block': 'EACCES',
                     'write block': 'EACCES', 'unlink block': 'EACCES', 'set ttl': denied,
                     'remove ttl': denied, 'touch block': denied, 'set times': denied,
                     'truncate block': denied, 'chmod block': denied,
                     'write stats': 'EACCES'})
        # nothing changed
        check(os.path.exists(rq), "root's query file is gone")
        check(os.getxattr(rq, 'user.ucm.hits') == b'1', "root's query answers differently")
        check(os.getxattr(m.path(bid), 'user.ucm.ttl') == b'none', 'the block got a TTL')
        check(m.blocks() == [bid], 'blocks after the attempts: %r' % m.blocks())


def test_ucmctl_as_nobody():
    ucmctl = os.environ.get('UCMCTL_BIN') or os.path.join(
        os.path.dirname(os.path.abspath(daemon_bin())), 'ucmctl')
    check(os.path.exists(ucmctl), 'ucmctl not found beside the daemon: %s' % ucmctl)
    setpriv = shutil.which('setpriv')
    check(setpriv, 'setpriv(1) is needed to run a command as another user')
    with shared_mount('allow_other,mem_size=16M') as m:
        a, b = rand_id(), rand_id()
        write_file(m.path(a), b'x' * 1000)
        write_file(m.path(b), b'y' * 1000)
        as_user = [setpriv, '--reuid=%d' % NOBODY, '--regid=%d' % NOBODY, '--clear-groups']
        r = subprocess.run(as_user + [ucmctl, 'lookup', m.mnt, a, rand_id(), b],
                           capture_output=True, text=True, timeout=30 * SLOW)
        check(r.returncode == 0, 'ucmctl lookup as nobody exited %d: %s' % (r.returncode,
                                                                          r.stderr.strip()))
        out = dict(line.split(None, 1) for line in r.stdout.strip().splitlines())
        check(out.get('prefix') == '1' and out.get('mask') == '101' and out.get('last') == '2',
              'ucmctl lookup as nobody: %r' % out)
        r = subprocess.run(as_user + [ucmctl, 'ls', '-b', m.mnt], capture_output=True, text=True,
                           timeout=30 * SLOW)
        check(r.returncode == 0 and a in r.stdout and b in r.stdout,
              'ucmctl ls as nobody: %d %s' % (r.returncode, r.stderr.strip()))
        check(os.listdir(m.path('.ucm/query')) == [], 'ucmctl left query files behind')


def test_without_allow_other():
    with shared_mount('mem_size=8M') as m:
        bid = rand_id()
        write_file(m.path(bid), b'z')

        def child():
            return {'stat root': attempt(os.stat, m.mnt + '/'),
                    'stat block': attempt(os.stat, m.path(bid)),
                    'listdir': attempt(os.listdir, m.mnt + '/')}

        expect(as_nobody(child), {'stat root': 'EACCES', 'stat block': 'EACCES',
                                  'listdir': 'EACCES'})


if __name__ == '__main__':
    run([test_reader_and_queries, test_cannot_touch_others, test_ucmctl_as_nobody,
         test_without_allow_other])
