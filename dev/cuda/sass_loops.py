#!/usr/bin/env python3
"""sass_loops.py — static instruction counts of a kernel's loops, from cuobjdump's SASS.

Used for dev/cuda/README.md step 15: before spending GPU time on a change to a kernel's inner
loop, compare the loop's instruction mix before and after (no GPU needed). The SASS comes from
a cubin built on the CPU host:

    nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc \
         -cubin src/ops/cuda/attention.cu -o att.cubin
    cuobjdump -sass att.cubin > att.sass     # cuobjdump: CUDA toolkit, or the PyPI wheel
                                             # nvidia-cuda-cuobjdump (bin/ inside it)
    dev/cuda/sass_loops.py att.sass fwd_tma_kernelILi5 [--dump]

A loop is a backward branch (BRA to a lower address); for each of the largest loops of the
first function whose mangled name contains the given text, the script prints its address
range, its instruction count and the opcode histogram (opcode before the first '.'). Static
counts: both sides of a branch inside the loop are counted, so compare like with like (the
same kernel before and after a change), not against ncu's executed counts. --dump prints the
function's instructions with their addresses. Written by hand: a few lines of parsing that no
packaged tool offers.
"""
import collections
import re
import sys


def parse(path, name):
    lines = open(path).read().split('\n')
    start = next((i for i, l in enumerate(lines) if 'Function :' in l and name in l), None)
    if start is None:
        sys.exit(f'sass_loops.py: no function matching "{name}" in {path}')
    end = next((i for i in range(start + 1, len(lines)) if 'Function :' in lines[i]), len(lines))
    rx = re.compile(r'/\*([0-9a-f]{4,})\*/\s+(.*?);')
    ins = []  # (address, opcode, text)
    for l in lines[start:end]:
        m = rx.search(l)
        if not m:
            continue
        text = m.group(2).strip()
        body = re.sub(r'^@!?U?P\w+\s+', '', text)  # drop a predicate guard
        ins.append((int(m.group(1), 16), body.split()[0] if body else '', text))
    return lines[start].strip(), ins


def loops(ins):
    found = []
    for addr, op, text in ins:
        if op.startswith('BRA'):
            m = re.search(r'0x([0-9a-f]+)', text)
            if m and int(m.group(1), 16) <= addr:
                found.append((int(m.group(1), 16), addr))
    return sorted(set(found), key=lambda x: x[0] - x[1])


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    title, ins = parse(sys.argv[1], sys.argv[2])
    print(f'{title}: {len(ins)} instructions')
    for lo, hi in loops(ins)[:6]:
        body = [x for x in ins if lo <= x[0] <= hi]
        hist = collections.Counter(x[1].split('.')[0] for x in body)
        top = ', '.join(f'{k} {v}' for k, v in hist.most_common(24))
        print(f'loop 0x{lo:x}-0x{hi:x}: {len(body)} instructions: {top}')
    if '--dump' in sys.argv:
        for addr, _, text in ins:
            print(f'{addr:6x}  {text}')


if __name__ == '__main__':
    main()
