#!/usr/bin/env python3
"""Decoder training step: wbaudit's C++ step against PyTorch CPU, same architecture, batch and threads.

Each round runs, at 1 and at 2 threads, bench/decoder_bench.cpp's DecoderStep/1M and DecoderTrainStep/1M (the binary
given as the first argument, --benchmark_format=json) and then the same architecture built with plain torch.nn
modules (tests/sim/model/test_decoder_torch.py's Decoder: RMSNorm, NeoX rotary attention, SwiGLU, untied head,
cross-entropy) on one random batch, in a fresh interpreter:
  - forward + backward: model.zero_grad(set_to_none=False); loss.backward() -- the work of
    DecoderModel::loss_and_gradient (DecoderStep);
  - training step: the same plus torch.optim.Adam(lr 1e-3).step() -- the work of DecoderTrainStep (Adam and the
    fp32 write-back w += u on every tensor).
"Same threads" means the whole process: torch.set_num_threads(T) sets torch's OpenMP pool only, while Debian's torch
runs its products in the system OpenBLAS (libblas.so.3 -> openblas-pthread), whose own thread pool defaults to every
core. The torch interpreter is therefore started with OPENBLAS_NUM_THREADS=T and OMP_NUM_THREADS=T. With --unpinned
it is also timed with OpenBLAS left at its default (what the figure before this script measured: at "1 thread" its
products ran on 2 cores).

Rounds interleave the two sides so that load from other processes hits both; the script prints every round and the
median ratio (wbaudit tokens/s over torch tokens/s, >= 1.0: wbaudit at least as fast) with its min..max spread.

With --cpu-time (one thread) both sides are timed in CPU time of their one thread (Google Benchmark's cpu_time,
torch's time.process_time), which other processes on a shared machine disturb far less than wall time.

Usage: /usr/bin/python3 bench/decoder_torch_bench.py build/release/bench/wbaudit_decoder_bench [--rounds N]
       [--threads 1 2] [--unpinned] [--cpu-time]
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
CFG = dict(vocab=256, width=192, heads=4, layers=2, mlp_hidden=512, seq_len=128, rotary_fraction=1.0,
           rotary_base=10000.0, norm_eps=1e-5, parallel_residual=False)
BATCH = 16
TOKENS = BATCH * CFG["seq_len"]


def torch_worker(threads, timings, steps, cpu_time=False):
    """Runs in a fresh interpreter: prints JSON {fwd_bwd, train} tokens/s, medians of `timings` x `steps` steps."""
    import torch

    sys.path.insert(0, str(HERE.parent / "tests" / "sim" / "model"))
    from test_decoder_torch import Decoder  # the independent PyTorch model of the comparison test

    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = Decoder(CFG, torch.float32)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.02)
    tokens = torch.randint(0, CFG["vocab"], (BATCH, CFG["seq_len"] + 1))
    adam = torch.optim.Adam(model.parameters(), lr=1e-3)

    def fwd_bwd():
        model.zero_grad(set_to_none=False)
        model(tokens).backward()

    def train():
        fwd_bwd()
        adam.step()

    clock = time.process_time if cpu_time else time.perf_counter
    result = {"params": sum(p.numel() for p in model.parameters()), "torch": torch.__version__}
    for name, fn in (("fwd_bwd", fwd_bwd), ("train", train)):
        for _ in range(3):  # warm-up
            fn()
        times = []
        for _ in range(timings):
            start = clock()
            for _ in range(steps):
                fn()
            times.append((clock() - start) / steps)
        result[name] = TOKENS / statistics.median(times)
    print(json.dumps(result))


def torch_tokens_per_s(threads, pin_blas, cpu_time=False):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if pin_blas:
        env["OPENBLAS_NUM_THREADS"] = str(threads)
    else:
        env.pop("OPENBLAS_NUM_THREADS", None)
    out = subprocess.run([sys.executable, __file__, "--torch-worker", str(threads)] + (["--cpu-time"] if cpu_time else []),
                         check=True, capture_output=True,
                         text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def wbaudit_tokens_per_s(binary, threads, cpu_time=False):
    suffix = "threads:1" if threads == 1 else "threads:N"
    names = {"fwd_bwd": f"DecoderStep/1M/{suffix}/real_time", "train": f"DecoderTrainStep/1M/{suffix}/real_time"}
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "bench.json"
        subprocess.run(
            [binary, f"--kokkos-threads={threads}", f"--benchmark_filter=^({'|'.join(names.values())})$",
             f"--benchmark_out={out}", "--benchmark_out_format=json", "--benchmark_min_time=1"],
            check=True, capture_output=True, text=True, env=dict(os.environ, OMP_PROC_BIND="false"))
        runs = {r["name"]: r for r in json.loads(out.read_text())["benchmarks"]}
    if cpu_time:  # Google Benchmark's cpu_time: per iteration, in time_unit (ms here)
        result = {key: TOKENS / (runs[name]["cpu_time"] * 1e-3) for key, name in names.items()}
    else:
        result = {key: runs[name]["tokens_per_s"] for key, name in names.items()}
    result["GFLOP_per_s"] = runs[names["fwd_bwd"]]["GFLOP_per_s"]
    return result


def summary(ratios):
    return f"median {statistics.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f}, n {len(ratios)})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary", nargs="?", help="path of wbaudit_decoder_bench")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default 1 2)")
    parser.add_argument("--unpinned", action="store_true", help="also time torch with OpenBLAS threads unpinned")
    parser.add_argument("--cpu-time", action="store_true",
                        help="tokens per second of CPU time instead of wall time (1 thread only; for a loaded machine)")
    parser.add_argument("--torch-worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_worker:
        torch_worker(args.torch_worker, timings=5, steps=5, cpu_time=args.cpu_time)
        return
    if args.cpu_time and (args.threads != [1] or args.unpinned):
        parser.error("--cpu-time measures one thread: use it with --threads 1 and without --unpinned")
    if not args.binary:
        parser.error("the path of wbaudit_decoder_bench is required")
    print(f"shape {CFG}, batch {BATCH}; uptime: {os.getloadavg()}")
    variants = [("pinned", True)] + ([("unpinned", False)] if args.unpinned else [])
    ratios = {}
    for r in range(args.rounds):
        for threads in args.threads:
            ours = wbaudit_tokens_per_s(args.binary, threads, args.cpu_time)
            for label, pin in variants:
                theirs = torch_tokens_per_s(threads, pin, args.cpu_time)
                for work in ("fwd_bwd", "train"):
                    ratio = ours[work] / theirs[work]
                    ratios.setdefault((threads, label, work), []).append(ratio)
                    print(f"round {r} threads {threads} {work:7s}: wbaudit {ours[work]:8,.0f} tokens/s, torch "
                          f"({label} OpenBLAS) {theirs[work]:8,.0f} tokens/s: {ratio:.2f}x", flush=True)
            print(f"round {r} threads {threads}: wbaudit step {ours['GFLOP_per_s']:.1f} GFLOP/s; torch "
                  f"{theirs['torch']}, {theirs['params']:,} parameters; load {os.getloadavg()[0]:.2f}", flush=True)
    for (threads, label, work), values in sorted(ratios.items()):
        print(f"threads {threads}, {work:7s} vs torch ({label} OpenBLAS): {summary(values)}")


if __name__ == "__main__":
    main()
