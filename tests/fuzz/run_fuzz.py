#!/usr/bin/env python3
"""Run one libFuzzer target for a bounded time over its checked-in corpus.

    run_fuzz.py TARGET CORPUS_DIR ARTIFACT_DIR [DICT]

libFuzzer writes the inputs it finds into the first corpus directory it is given, so that
one is a fresh temporary directory (or $UCM_FUZZ_OUT/<target> to keep them) and the
checked-in corpus comes second, read only: every file in it is replayed first, so a crash
kept there as a regression input fails the test at once.

$UCM_FUZZ_SECONDS sets the fuzzing time (default 20); 0 only replays the corpus.
$UCM_FUZZ_ARGS adds libFuzzer options (split at spaces), e.g. "-jobs=2 -workers=2".
"""
import os
import shutil
import subprocess
import sys
import tempfile


def main():
    if len(sys.argv) not in (4, 5):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    target, corpus, artifacts = sys.argv[1:4]
    name = os.path.basename(target)
    seconds = int(os.environ.get('UCM_FUZZ_SECONDS', '20'))
    os.makedirs(artifacts, exist_ok=True)

    env = dict(os.environ)
    # a sanitizer report must end the run as a crash that libFuzzer saves as an artifact
    env.setdefault('ASAN_OPTIONS', 'abort_on_error=1:detect_leaks=1')
    env.setdefault('UBSAN_OPTIONS', 'halt_on_error=1:abort_on_error=1:print_stacktrace=1')

    keep = os.environ.get('UCM_FUZZ_OUT')
    if keep:
        work = os.path.join(keep, name)
        os.makedirs(work, exist_ok=True)
        tmp = None
    else:
        tmp = tempfile.mkdtemp(prefix=name + '-')
        work = tmp

    args = [target,
            '-timeout=10', '-rss_limit_mb=2048', '-print_final_stats=1',
            '-artifact_prefix=' + os.path.join(artifacts, name + '-')]
    if seconds > 0:
        args.append('-max_total_time=%d' % seconds)
    else:
        args.append('-runs=0')
    if len(sys.argv) == 5:
        args.append('-dict=' + sys.argv[4])
    args += os.environ.get('UCM_FUZZ_ARGS', '').split()
    args += [work, corpus]
    print(' '.join(args), flush=True)
    try:
        # libFuzzer stops itself; the limit here only catches a run that hangs outside it
        rc = subprocess.run(args, env=env, timeout=max(seconds, 10) * 3 + 120).returncode
    except subprocess.TimeoutExpired:
        print('%s: did not stop in time' % name, file=sys.stderr)
        rc = 1
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    if rc != 0:
        print('%s: failed (exit %d); the crashing input is in %s' % (name, rc, artifacts),
              file=sys.stderr)
    return 1 if rc else 0


if __name__ == '__main__':
    sys.exit(main())
