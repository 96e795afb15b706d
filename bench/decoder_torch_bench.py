#!/usr/bin/env python3
"""Decoder forward + backward: wbaudit's C++ step against PyTorch CPU, same architecture, batch and threads.

Runs bench/decoder_bench.cpp's DecoderStep/1M benchmarks (the binary given as the first argument) with
--benchmark_format=json at 1 and 2 threads, then times the same architecture built with plain torch.nn modules
(tests/sim/model/test_decoder_torch.py's Decoder: RMSNorm, NeoX rotary attention, SwiGLU, untied head, cross-entropy)
on one random batch: torch.set_num_threads(T), forward + loss.backward() with gradients zeroed each step, the same
work as DecoderModel::loss_and_gradient. Both are medians (3 Google Benchmark repetitions; 5 torch timings of 10 steps). Prints tokens/s
of both and their ratio (>= 1.0: wbaudit at least as fast).

Usage: /usr/bin/python3 bench/decoder_torch_bench.py build/release/bench/wbaudit_decoder_bench [--repeats N]
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "sim" / "model"))
from test_decoder_torch import Decoder  # noqa: E402  (the independent PyTorch model of the comparison test)

CFG = dict(vocab=256, width=192, heads=4, layers=2, mlp_hidden=512, seq_len=128, rotary_fraction=1.0,
           rotary_base=10000.0, norm_eps=1e-5, parallel_residual=False)
BATCH = 16


def torch_tokens_per_s(threads, repeats):
    """Median over `repeats` timings of 10 steps each."""
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = Decoder(CFG, torch.float32)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.02)
    tokens = torch.randint(0, CFG["vocab"], (BATCH, CFG["seq_len"] + 1))
    for _ in range(3):  # warm-up
        model.zero_grad(set_to_none=False)
        model(tokens).backward()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        steps = 10
        for _ in range(steps):
            model.zero_grad(set_to_none=False)
            model(tokens).backward()
        times.append((time.perf_counter() - start) / steps)
    times.sort()
    return BATCH * CFG["seq_len"] / times[len(times) // 2], sum(p.numel() for p in model.parameters())


def wbaudit_tokens_per_s(binary, threads):
    name = "DecoderStep/1M/threads:1" if threads == 1 else "DecoderStep/1M/threads:N"
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "bench.json"
        subprocess.run(
            [binary, f"--kokkos-threads={threads}", f"--benchmark_filter=^{name}", f"--benchmark_out={out}",
             "--benchmark_out_format=json", "--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true"],
            check=True, capture_output=True, text=True, env=dict(os.environ, OMP_PROC_BIND="false"))
        runs = json.loads(out.read_text())["benchmarks"]
    median = [r for r in runs if r.get("aggregate_name") == "median"] or runs
    best, gflops = median[0]["tokens_per_s"], median[0]["GFLOP_per_s"]
    return best, gflops


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary", help="path of wbaudit_decoder_bench")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, shape {CFG}, batch {BATCH}")
    for threads in (1, 2):
        ours, gflops = wbaudit_tokens_per_s(args.binary, threads)
        theirs, params = torch_tokens_per_s(threads, args.repeats)
        print(f"threads {threads}: wbaudit {ours:,.0f} tokens/s ({gflops:.1f} GFLOP/s), torch {theirs:,.0f} tokens/s "
              f"({params:,} parameters): ratio {ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
