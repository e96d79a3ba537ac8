#!/usr/bin/env python3
"""The innermost loops of compiled GEMM kernels, counted from `objdump -d`: per loop of at least 8 FMAs,
its instructions, FMAs, loads and stack accesses (spills), and the steady-state instructions per FMA
(the loop's instructions less its prefetches and alignment nops, which sit behind a branch taken once per
cache line of A). An estimate of a kernel's throughput, not a measurement.

    tests/c/fma_loops.py OBJDUMP OBJECT [--functions REGEX] [--max-stack N] [--max-per-fma X] [--mul-add]

With --mul-add a vector multiply counts as a multiply-add step too (x86 below AVX2 has no FMA: the portable
GEMM's SSE2 loop is MULPS/MULPD + ADDPS/ADDPD), so the count is instructions per vector multiply-add. Scalar
multiplies never count: a loop the compiler did not vectorise has no FMAs here and so matches nothing.

Exit status 1 when a loop of a function matching REGEX has more than N stack accesses or more than X
steady-state instructions per FMA (the regressions a compiler change or a tile change could bring), or
when no loop matched at all.
"""
import argparse
import re
import subprocess
import sys

FMA = re.compile(r"^(fmla|fmadd|vfmadd\w*)$")
MUL_ADD = re.compile(r"^(fmla|vfmadd\w*p[sd]|v?mulp[sd])$")
BRANCH = re.compile(r"^(b\.\w+|b|cbz|cbnz|tbz|tbnz|j\w+)$")


def loops(objdump, path):
    text = subprocess.run([objdump, "-d", "--no-show-raw-insn", path], check=True, capture_output=True,
                          text=True).stdout
    function, code = None, []
    for line in text.splitlines():
        head = re.match(r"[0-9a-f]+ <(\S+)>:", line)
        if head:
            function = head.group(1)
            continue
        ins = re.match(r"\s+([0-9a-f]+):\s+(\S+)\s*(.*)", line)
        if ins and function:
            code.append((function, int(ins.group(1), 16), ins.group(2), ins.group(3)))
    at = {address: i for i, (_, address, _, _) in enumerate(code)}
    spans = []
    for i, (function, address, op, args) in enumerate(code):
        target = re.search(r"\b([0-9a-f]+) <", args)
        if BRANCH.match(op) and target and int(target.group(1), 16) <= address and int(target.group(1), 16) in at:
            start = at[int(target.group(1), 16)]
            if code[start][0] == function:
                spans.append((start, i))
    # innermost only: no other loop inside
    for start, end in spans:
        if any(start <= s and e <= end and (s, e) != (start, end) for s, e in spans):
            continue
        yield code[start][0], code[start:end + 1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("objdump")
    parser.add_argument("object")
    parser.add_argument("--functions", default=".")
    parser.add_argument("--max-stack", type=int, default=None)
    parser.add_argument("--max-per-fma", type=float, default=None)
    parser.add_argument("--mul-add", action="store_true")
    args = parser.parse_args()
    pattern = re.compile(args.functions)
    bad = matched = 0
    for function, body in loops(args.objdump, args.object):
        fmas = sum(1 for _, _, op, _ in body if (MUL_ADD if args.mul_add else FMA).match(op))
        if fmas < 8 or not pattern.search(function):
            continue
        matched += 1
        loads = sum(1 for _, _, op, a in body if op.startswith("ld") and "sp" not in a)
        # sp-relative, or below AArch64's frame pointer (clang's frame locals: [x29, #-160])
        stack = sum(1 for _, _, op, a in body if re.search(r"\[sp\b|\[x29, #-|\(%rsp\)", a))
        steady = sum(1 for _, _, op, _ in body if not op.startswith(("prfm", "prefetch", "nop")))
        per_fma = steady / fmas
        flag = ""
        if (args.max_stack is not None and stack > args.max_stack) or \
                (args.max_per_fma is not None and per_fma > args.max_per_fma):
            flag = "  <-- over the limit"
            bad += 1
        print(f"{function:34s} {len(body):4d} instructions, {steady:4d} steady, {fmas:3d} FMA, {loads:3d} loads, "
              f"{stack:2d} stack: {per_fma:.2f} per FMA{flag}")
    if matched == 0:
        print(f"no loop of >= 8 FMAs in a function matching {args.functions!r}", file=sys.stderr)
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
