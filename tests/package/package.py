#!/usr/bin/env python3
"""The Debian package, the way an operator meets it: built from this tree with
dpkg-buildpackage, checked by lintian, installed onto the machine with dpkg, used (an
/etc/fstab-style `mount -t fuse.ucmfs`, the installed C and Python clients against the
installed daemon, `systemd-analyze verify` of the units, the service's own commands run as
systemd runs them, through a crash and a stop), then purged, leaving nothing.

It changes the machine (dpkg -i, then dpkg --purge), so it is suite 'package', outside a
plain `meson test`; tools/setup.sh test runs it. It skips (77) when not root or when
dpkg-buildpackage, debhelper or lintian is missing, and when a ucmfs package is already
installed (it would not remove an operator's). The packages are built in a temporary copy
of the tree; UCMFS_PKG_KEEP=1 keeps it."""
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, 'tests', 'mount'))
from ucmtest import (KiB, case, check, cmd, pattern, rand_id, read_file, run, wait_until,
                     write_file)

PACKAGES = ['ucmfs', 'libucmfs-client0', 'libucmfs-client-dev', 'python3-ucmfs']
PY = '/usr/bin/python3'    # Debian's python3: the one python3-ucmfs is for
ARCH_LIB = None            # /usr/lib/<multiarch>, once dpkg-architecture said
S = {}                     # what one step leaves for the next: the tree copy, the .debs


def skip(why):
    print('# skipped: ' + why)
    sys.exit(77)


def installed(pkg):
    r = subprocess.run(['dpkg-query', '-W', '-f=${Status}', pkg], capture_output=True,
                       text=True)
    return 'install ok installed' in r.stdout


def tree_copy(dest):
    """The tree as committed or changed (git's view when it is a checkout), with the
    libfuse that tools/setup.sh built (deps/fuse3), so the build needs no download."""
    r = subprocess.run(['git', '-C', TOP, 'ls-files', '-co', '--exclude-standard', '-z'],
                       capture_output=True)
    if r.returncode == 0:
        names = [n for n in r.stdout.decode().split('\0') if n]
    else:
        names = []
        for root, dirs, files in os.walk(TOP):
            rel = os.path.relpath(root, TOP)
            dirs[:] = [d for d in dirs if not (rel == '.' and (d.startswith('build') or
                                                                d in ('deps', '.git')))]
            names += [os.path.normpath(os.path.join(rel, f)) for f in files]
    for n in names:
        src = os.path.join(TOP, n)
        if not os.path.isfile(src):
            continue                                   # deleted, not yet committed
        os.makedirs(os.path.join(dest, os.path.dirname(n)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, n))
    if os.path.isdir(os.path.join(TOP, 'deps', 'fuse3')):
        shutil.copytree(os.path.join(TOP, 'deps', 'fuse3'), os.path.join(dest, 'deps', 'fuse3'),
                        symlinks=True)


def cmdlines():
    """(pid, argv) of every process (those that end while being read are left out)."""
    out = []
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as f:
                out.append((pid, [a.decode(errors='replace')
                                  for a in f.read().split(b'\0') if a]))
        except OSError:
            pass
    return out


@case(timeout=900)
def test_build():
    """dpkg-buildpackage -b -us -uc builds the four packages."""
    tmp = S['tmp']
    src = os.path.join(tmp, 'ucmfs')
    tree_copy(src)
    t0 = time.monotonic()
    r = cmd(['dpkg-buildpackage', '-b', '-us', '-uc'], timeout=900, check_rc=False, cwd=src)
    print('# dpkg-buildpackage: %.0f s' % (time.monotonic() - t0))
    check(r.returncode == 0, 'dpkg-buildpackage exited %d: %s' % (
        r.returncode, (r.stdout + r.stderr)[-3000:]))
    for p in PACKAGES:
        debs = glob.glob(os.path.join(tmp, '%s_*.deb' % p))
        check(len(debs) == 1, 'no single %s .deb: %r' % (p, os.listdir(tmp)))
        S[p] = debs[0]
    changes = glob.glob(os.path.join(tmp, '*.changes'))
    check(len(changes) == 1, 'no .changes file: %r' % os.listdir(tmp))
    S['changes'] = changes[0]
    deps = cmd(['dpkg-deb', '-f', S['ucmfs'], 'Depends']).stdout
    check('fuse3' in deps and 'libzstd1' in deps, 'ucmfs Depends: %r' % deps)
    check('libfuse3' not in deps, 'ucmfs depends on a libfuse3 package (Debian 12 has no '
          '3.17): %r' % deps)


def test_lintian():
    """lintian: no error, no warning."""
    check('changes' in S, 'nothing built')
    r = cmd(['lintian', '--fail-on', 'error,warning', S['changes']], timeout=300,
            check_rc=False)
    check(r.returncode == 0, 'lintian: %s' % (r.stdout + r.stderr)[-2000:])


def test_install():
    """dpkg -i of the four packages puts each file where Debian's tools look for it."""
    check(all(p in S for p in PACKAGES), 'nothing built')
    cmd(['dpkg', '-i'] + [S[p] for p in PACKAGES], timeout=300)
    for p in PACKAGES:
        check(installed(p), '%s is not installed after dpkg -i' % p)
    for path in ('/usr/sbin/ucmfs', '/usr/bin/ucmctl', '/lib/systemd/system/ucmfs@.service',
                 '/usr/include/ucmfs/ucmfs.h', '/usr/lib/python3/dist-packages/ucmfs.py',
                 '/usr/share/man/man8/ucmfs.8.gz', '/usr/share/man/man1/ucmctl.1.gz',
                 os.path.join(ARCH_LIB, 'libucmfs-client.so.0'),
                 os.path.join(ARCH_LIB, 'pkgconfig', 'ucmfs-client.pc')):
        check(os.path.exists(path), '%s is missing after the install' % path)
    r = cmd(['pkg-config', '--cflags', '--libs', 'ucmfs-client'])
    check('-lucmfs-client' in r.stdout, 'pkg-config --libs ucmfs-client: %r' % r.stdout)
    r = cmd(['man', '-w', 'ucmfs'], check_rc=False)
    check(r.stdout.strip().startswith('/usr/share/man/man8/ucmfs.8'),
          'man -w ucmfs: %r' % r.stdout)


def test_fstab_mount():
    """mount -t fuse.ucmfs with the words of an /etc/fstab line: mount.fuse3 finds the
    installed daemon, which serves in the background; umount stops it."""
    check(installed('ucmfs'), 'ucmfs not installed')
    store, mnt = os.path.join(S['tmp'], 'store'), os.path.join(S['tmp'], 'mnt')
    os.makedirs(mnt, exist_ok=True)
    r = cmd(['mount', '-t', 'fuse.ucmfs', store, mnt, '-o',
             'defaults,nofail,_netdev,x-systemd.automount,mem_size=64M'], check_rc=False)
    check(r.returncode == 0, 'mount -t fuse.ucmfs exited %d: %s' % (r.returncode,
                                                                   r.stderr.strip()))
    try:
        check(os.path.ismount(mnt), 'no mount after mount -t fuse.ucmfs')
        check(r.stderr == '', 'mount -t fuse.ucmfs wrote to stderr: %r' % r.stderr)
        fs = cmd(['findmnt', '-n', '-o', 'FSTYPE', mnt]).stdout.strip()
        check(fs == 'fuse.ucmfs', 'findmnt says %r' % fs)
        bid, data = rand_id(), pattern(300 * KiB + 5, 3)
        write_file(os.path.join(mnt, bid), data)
        check(read_file(os.path.join(mnt, bid)) == data, 'a block read back differs')
        daemons = [c for c in cmdlines() if c[1][:1] == ['ucmfs'] and mnt in c[1]]
        check(len(daemons) == 1, 'not one ucmfs process serving %s: %r' % (mnt, daemons))
    finally:
        cmd(['umount', mnt], check_rc=False)
    check(not os.path.ismount(mnt), 'still mounted after umount')
    # umount returns at once; the daemon then writes what is only in memory, and exits
    pid = daemons[0][0]
    check(wait_until(lambda: not os.path.exists('/proc/%s' % pid), 60),
          'the daemon is still running a minute after umount')
    files = [f for _, _, fs in os.walk(os.path.join(store, 'data')) for f in fs]
    check(bid in files, 'the block is not in the store after umount: %r' % files)


def test_installed_clients():
    """tests/mount/clients.py against the installed daemon, the Python module that Debian's
    python3 finds, and the C client test built with pkg-config against the library."""
    check(installed('libucmfs-client-dev'), 'libucmfs-client-dev not installed')
    bins = os.path.join(S['tmp'], 'clients')
    os.makedirs(bins, exist_ok=True)
    flags = cmd(['pkg-config', '--cflags', '--libs', 'ucmfs-client']).stdout.split()
    for prog, src in (('client-test', 'client-test.c'), ('client-example', 'example.c')):
        # copied alone, so that "ucmfs.h" can only be the installed header
        shutil.copy(os.path.join(TOP, 'tools', 'client', src), bins)
        cmd(['cc', '-O2', '-Wall', '-Werror', '-o', os.path.join(bins, prog),
             os.path.join(bins, src)] + flags)
        ldd = cmd(['ldd', os.path.join(bins, prog)]).stdout
        lib = [l.split('=>')[1].split()[0] for l in ldd.split('\n')
               if l.strip().startswith('libucmfs-client.so.0 =>')]
        check(lib and os.path.realpath(lib[0]) ==
              os.path.realpath(os.path.join(ARCH_LIB, 'libucmfs-client.so.0')),
              '%s does not load the installed library: %s' % (prog, ldd))
    env = dict(os.environ, UCMFS_CLIENT='installed', UCMFS_BIN='/usr/sbin/ucmfs',
               CLIENT_TEST_BIN=os.path.join(bins, 'client-test'),
               CLIENT_EXAMPLE_BIN=os.path.join(bins, 'client-example'),
               PYTHONDONTWRITEBYTECODE='1')
    r = cmd([PY, os.path.join(TOP, 'tests', 'mount', 'clients.py')], timeout=300,
            check_rc=False, env=env, cwd='/')
    check(r.returncode == 0, 'clients.py against the installed copies: %s' % (
        r.stdout + r.stderr)[-2000:])
    r = cmd([PY, '-I', '-c', 'import ucmfs; print(ucmfs.__file__)'], cwd='/')
    check(r.stdout.strip() == '/usr/lib/python3/dist-packages/ucmfs.py',
          'python3 imports ucmfs from %r' % r.stdout)


def test_units_verify():
    """systemd-analyze verify: the installed template (as an instance) and the example
    mount unit."""
    check(installed('ucmfs'), 'ucmfs not installed')
    d = os.path.join(S['tmp'], 'units')
    os.makedirs(d, exist_ok=True)
    shutil.copy('/usr/share/doc/ucmfs/examples/mnt-ucm.mount', d)
    for unit in ('ucmfs@mnt-ucm.service', os.path.join(d, 'mnt-ucm.mount')):
        r = cmd(['systemd-analyze', 'verify', unit], check_rc=False, cwd=d)
        check(r.returncode == 0 and not r.stderr.strip(),
              'systemd-analyze verify %s: exit %d: %s' % (unit, r.returncode, r.stderr))


def unit_commands(path, instance, mountpoint):
    """The environment and the ExecStartPre/ExecStart commands of a service unit, with %i, %f
    and ${VAR} replaced the way systemd does (argv lists; a leading '-' kept apart)."""
    env, pre, start = {}, [], None
    with open(path) as f:
        lines = [l.strip() for l in f if '=' in l and not l.startswith('#')]
    spec = lambda v: v.replace('%i', instance).replace('%f', mountpoint)
    for l in lines:
        key, val = l.split('=', 1)
        if key == 'Environment':
            env.update(a.split('=', 1) for a in spec(val).split())
        elif key == 'EnvironmentFile':
            conf = spec(val).lstrip('-')
            if os.path.exists(conf):
                with open(conf) as c:
                    env.update(a.strip().split('=', 1) for a in c if '=' in a)
        elif key in ('ExecStartPre', 'ExecStart'):
            ignore = val.startswith('-')
            argv = [spec(a) for a in val.lstrip('-').split()]
            argv = [env.get(a[2:-1], '') if a.startswith('${') else a for a in argv]
            if key == 'ExecStart':
                start = argv
            else:
                pre.append((ignore, argv))
    return env, pre, start


def test_service_commands():
    """ucmfs@.service's own commands, run as systemd would run them for ucmfs@INSTANCE with
    /etc/ucmfs/INSTANCE.conf: ready (READY=1) on a live mount; after a SIGKILL, the restart's
    commands clear the dead mount point and serve the durable block again; SIGTERM stops it
    cleanly (exit 0)."""
    check(installed('ucmfs'), 'ucmfs not installed')
    mnt = os.path.join(S['tmp'], 'svc-mnt')
    inst = cmd(['systemd-escape', '--path', mnt]).stdout.strip()
    conf = '/etc/ucmfs/%s.conf' % inst
    made_etc = not os.path.isdir('/etc/ucmfs')
    os.makedirs('/etc/ucmfs', exist_ok=True)
    with open(conf, 'w') as f:
        f.write('UCMFS_STORE=%s\nUCMFS_OPTIONS=mem_size=64M\n' % os.path.join(S['tmp'], 'svc-store'))
    sock_path = os.path.join(S['tmp'], 'notify')
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(30)
    procs = []

    def start():
        _, pre, argv = unit_commands('/lib/systemd/system/ucmfs@.service', inst, mnt)
        for ignore, a in pre:
            r = cmd(a, check_rc=False)
            check(ignore or r.returncode == 0, 'ExecStartPre %s: %s' % (' '.join(a), r.stderr))
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=dict(os.environ, NOTIFY_SOCKET=sock_path))
        procs.append(p)
        check(sock.recv(64) == b'READY=1', 'the service did not say READY=1')
        check(os.path.ismount(mnt), 'READY=1 before the mount was there')
        return p

    try:
        p = start()
        bid, data = rand_id(), pattern(200 * KiB + 1, 5)
        write_file(os.path.join(mnt, bid), data, fsync=True)
        p.kill()                                   # a crash: Restart=on-failure follows
        p.wait()
        p = start()
        check(read_file(os.path.join(mnt, bid)) == data, 'the block after the restart differs')
        p.terminate()                              # systemctl stop
        check(p.wait(timeout=120) == 0, 'SIGTERM: exit %s' % p.returncode)
        check(sock.recv(64) == b'STOPPING=1', 'no STOPPING=1 at the stop')
        check(not os.path.ismount(mnt), 'still mounted after the stop')
    finally:
        for q in procs:
            if q.poll() is None:
                q.kill()
                q.wait()
        subprocess.run(['fusermount3', '-u', '-z', mnt], capture_output=True)
        sock.close()
        os.unlink(conf)
        if made_etc:
            os.rmdir('/etc/ucmfs')


def test_purge():
    """dpkg --purge takes every file back."""
    cmd(['dpkg', '--purge'] + PACKAGES[::-1], timeout=300)
    for p in PACKAGES:
        check(not installed(p), '%s still installed after --purge' % p)
    for path in ('/usr/sbin/ucmfs', '/lib/systemd/system/ucmfs@.service',
                 '/usr/lib/python3/dist-packages/ucmfs.py', '/usr/include/ucmfs',
                 os.path.join(ARCH_LIB, 'libucmfs-client.so.0')):
        check(not os.path.exists(path), '%s left after dpkg --purge' % path)


def main():
    global ARCH_LIB
    if os.geteuid() != 0:
        skip('not root: the test installs packages with dpkg')
    for tool in ('dpkg-buildpackage', 'dh', 'lintian', 'systemd-analyze', 'cc'):
        if not shutil.which(tool):
            skip('%s is missing (tools/setup.sh test installs it)' % tool)
    if not os.path.exists('/dev/fuse'):
        skip('/dev/fuse is missing')
    already = [p for p in PACKAGES if installed(p)]
    if already:
        skip('already installed, not ours to remove: %s' % ' '.join(already))
    ARCH_LIB = '/usr/lib/' + cmd(['dpkg-architecture', '-qDEB_HOST_MULTIARCH']).stdout.strip()
    S['tmp'] = tempfile.mkdtemp(prefix='ucmfs-pkg-')
    try:
        run([test_build, test_lintian, test_install, test_fstab_mount, test_installed_clients,
             test_units_verify, test_service_commands, test_purge])
    finally:
        left = [p for p in PACKAGES if installed(p)]
        if left:
            subprocess.run(['dpkg', '--purge'] + left[::-1], capture_output=True)
        if os.environ.get('UCMFS_PKG_KEEP'):
            print('# kept: ' + S['tmp'])
        else:
            shutil.rmtree(S['tmp'], ignore_errors=True)


if __name__ == '__main__':
    main()
