#!/usr/bin/python3
"""evopipe_gemmi.py — the gemmi peer of the EvoPipe benchmark's mmCIF reading (part 1b of
bench/evopipe.c): times gemmi reading the same files, one thread, median of REPS passes
over all files (each pass reads every file once; the first pass after a warm-up read, so
the page cache is warm for both readers):
  gemmi.cif.read(path)        the STAR/CIF parse (gzip inflated inside gemmi), peer of mf_cif_read
  gemmi.read_structure(path)  parse + Structure (ALL models; ours keeps the first, drops H and
                              waters), peer of mf_structure_read
Run with /usr/bin/python3 (Debian's python3-gemmi). Prints a table; with --json FILE writes
{"gemmi_version": ..., "rows": [...]} in the row format of bench/results/<bench>.json.
Usage: evopipe_gemmi.py [--data DIR] [--reps N] [--json FILE]
"""
import argparse
import glob
import json
import os
import statistics
import sys
import time

import gemmi


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--data', default='../shared/data')
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--json')
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.data, 'mmcif', '*.cif.gz')) +
                   glob.glob(os.path.join(a.data, 'mmcif', '*.cif')))
    if not files:
        sys.exit('evopipe_gemmi: no mmCIF files under %s/mmcif' % a.data)
    gz_bytes = sum(os.path.getsize(f) for f in files)
    for f in files:  # warm the page cache
        with open(f, 'rb') as fh:
            fh.read()
    rows = []
    print('gemmi %s, %d files (%.2f MB gz), median of %d passes' %
          (gemmi.__version__, len(files), gz_bytes / 1e6, a.reps))
    print('%-10s %-34s %10s %12s %14s' % ('variant', 'what', 'seconds', 'files/s', 'MB/s (gz)'))
    for what, label, fn in (('cif_parse', 'STAR parse (gemmi.cif.read)', gemmi.cif.read),
                            ('structure', 'structure (gemmi.read_structure)',
                             gemmi.read_structure)):
        fn(files[0])  # warm-up call
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            for f in files:
                fn(f)
            times.append(time.perf_counter() - t0)
        sec = statistics.median(times)
        print('%-10s %-34s %10.4f %12.1f %14.2f' % ('gemmi', label, sec, len(files) / sec,
                                                     gz_bytes / 1e6 / sec))
        rows.append({'variant': 'gemmi', 'what': what, 'pass': 'parse', 'N': len(files),
                     'ms': 1e3 * sec / len(files), 'peak_gib': None, 'threads': 1,
                     'files': len(files), 'seconds': round(sec, 5),
                     'files_per_s': round(len(files) / sec, 2), 'mb_gz': round(gz_bytes / 1e6, 3),
                     'mb_per_s': round(gz_bytes / 1e6 / sec, 3), 'reps': a.reps,
                     'call': 'gemmi.' + fn.__name__ if fn is gemmi.read_structure
                     else 'gemmi.cif.read'})
    if a.json:
        with open(a.json, 'w') as fh:
            json.dump({'gemmi_version': gemmi.__version__, 'rows': rows}, fh, indent=1)


if __name__ == '__main__':
    main()
