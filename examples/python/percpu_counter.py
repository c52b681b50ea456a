#!/usr/bin/env python3
"""percpu's C API from Python through ctypes: a per-CPU counter that several threads add to.

ctypes releases the GIL around each foreign call, so the threads' adds run in parallel, each on
the counter slot of the CPU (or concurrency id) its thread runs on, with no atomic instruction
and no shared cache line; the load sums the slots. Run:

    python3 examples/python/percpu_counter.py [--library path/to/libpercpu.so]
        [--threads 8] [--adds 100000] [--mode cpu_id|mm_cid]

It prints the mode percpu runs in and the total, and exits 1 when the total is not exactly
threads x adds. (A ctypes call costs about a hundred nanoseconds; the counter's add, a few.)
"""
import argparse
import ctypes
import ctypes.util
import os
import sys
import threading

CPU_ID, MM_CID = 0, 1


class Info(ctypes.Structure):
    """struct percpu_info of <percpu.h>, field for field."""
    _fields_ = [
        ("rseq_active", ctypes.c_int),
        ("area_owner", ctypes.c_char_p),
        ("fallback_reason", ctypes.c_char * 256),
        ("registration_errno", ctypes.c_int),
        ("glibc_reason", ctypes.c_char * 256),
        ("glibc_rseq_size", ctypes.c_uint),
        ("feature_size", ctypes.c_ulong),
        ("node_id_usable", ctypes.c_int),
        ("mm_cid_usable", ctypes.c_int),
        ("cpu_id_bound", ctypes.c_int),
        ("mm_cid_bound", ctypes.c_int),
        ("possible_cpus", ctypes.c_int),
        ("online_cpus", ctypes.c_int),
        ("nodes", ctypes.c_int),
    ]


def load(path):
    """libpercpu with the prototypes this example uses."""
    lib = ctypes.CDLL(path or ctypes.util.find_library("percpu") or "libpercpu.so.0",
                      use_errno=True)
    lib.percpu_info.argtypes = [ctypes.POINTER(Info)]
    lib.percpu_info.restype = ctypes.c_int
    lib.percpu_counter_create.argtypes = [ctypes.c_int]
    lib.percpu_counter_create.restype = ctypes.c_void_p
    lib.percpu_counter_add.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.percpu_counter_add.restype = ctypes.c_int
    lib.percpu_counter_load.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]
    lib.percpu_counter_load.restype = ctypes.c_int
    lib.percpu_counter_destroy.argtypes = [ctypes.c_void_p]
    lib.percpu_counter_destroy.restype = None
    return lib


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", help="path of libpercpu.so (default: the linker's search)")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--adds", type=int, default=100000, help="adds per thread")
    parser.add_argument("--mode", choices=["cpu_id", "mm_cid"], default="cpu_id")
    args = parser.parse_args()

    lib = load(args.library)
    info = Info()
    if lib.percpu_info(ctypes.byref(info)) != 0:
        sys.exit("percpu_info failed")
    mode = "rseq" if info.rseq_active else "fallback (" + info.fallback_reason.decode() + ")"
    print(f"percpu: {mode}, area {info.area_owner.decode()}, {info.possible_cpus} possible CPUs")

    counter = lib.percpu_counter_create(CPU_ID if args.mode == "cpu_id" else MM_CID)
    if not counter:
        sys.exit("percpu_counter_create: " + os.strerror(ctypes.get_errno()))
    errors = []

    def worker():
        for _ in range(args.adds):
            rc = lib.percpu_counter_add(counter, 1)
            if rc != 0:
                errors.append(rc)
                return

    threads = [threading.Thread(target=worker) for _ in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    total = ctypes.c_int64()
    rc = lib.percpu_counter_load(counter, ctypes.byref(total))
    lib.percpu_counter_destroy(counter)
    expected = args.threads * args.adds
    print(f"{args.threads} threads x {args.adds} adds ({args.mode}): total {total.value}, "
          f"expected {expected}")
    if rc != 0 or errors or total.value != expected:
        print(f"FAILED: load {rc}, add errors {errors[:3]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
