#!/usr/bin/env python3
"""fio on the mount (DESIGN.md: benchmarkers run fio on it): write jobs with verification,
then read jobs that verify what was written."""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ucmtest import (MiB, Mount, check, cmd, rand_id, run, write_file, pattern)

SIZE = 16 * MiB


def fio(m, *args):
    # run in the test's temporary directory: fio may leave verify state files in its cwd
    return cmd(['fio', '--output-format=terse', '--terse-version=3',
                '--verify_state_save=0'] + list(args), timeout=120, check_rc=False, cwd=m.tmp)


def fio_ok(m, *args):
    r = fio(m, *args)
    check(r.returncode == 0, 'fio %s exited %d: %s' % (' '.join(args), r.returncode,
                                                      (r.stderr + r.stdout).strip()[-600:]))


def test_fio_write_verify_then_read():
    if not shutil.which('fio'):
        raise AssertionError('fio is not installed')
    with Mount() as m:
        jobs = [['--rw=write'], ['--rw=write', '--direct=1'], ['--rw=randwrite'],
                ['--rw=write', '--direct=1', '--ioengine=libaio', '--iodepth=8']]
        files = []
        for extra in jobs:
            f = m.path(rand_id())
            files.append(f)
            fio_ok(m, '--name=v', '--filename=' + f, '--bs=1M', '--size=16M',
                   '--verify=crc32c', '--do_verify=1', *extra)
            check(os.stat(f).st_size == SIZE, 'size after fio %s: %d' % (
                ' '.join(extra), os.stat(f).st_size))
        check(m.blocks() == sorted(os.path.basename(f) for f in files),
              'listing after the fio jobs: %s' % m.blocks())
        for f in files:
            fio_ok(m, '--name=r', '--filename=' + f, '--rw=read', '--bs=1M', '--size=16M',
                   '--verify=crc32c')
            fio_ok(m, '--name=d', '--filename=' + f, '--rw=randread', '--bs=1M', '--size=16M',
                   '--direct=1', '--verify=crc32c')
        m.remount()                                     # and once more from the disk tier
        for f in files[:2]:
            fio_ok(m, '--name=r', '--filename=' + f, '--rw=read', '--bs=1M', '--size=16M',
                   '--verify=crc32c')
        # the read jobs really verify: a block of other bytes fails
        other = m.path(rand_id())
        write_file(other, pattern(SIZE, 1))
        r = fio(m, '--name=r', '--filename=' + other, '--rw=read', '--bs=1M', '--size=16M',
                '--verify=crc32c')
        check(r.returncode != 0, 'fio verified a block it did not write (test is blind)')


if __name__ == '__main__':
    run([test_fio_write_verify_then_read])
