"""wbaudit.torch_ops (the write-back in torch operations) against the C++ kernels (wbaudit.writeback, wbaudit.round):
bit-identical w_next and equal counts for every per-tensor format, policy, sr_bits and SR stream on adversarial
inputs (subnormals to saturation, exact ties of both signs, zeros and -0, updates crossing zero, erasures, draws that
need further Philox words)."""
import numpy as np
import pytest
import torch

import wbaudit
from wbaudit import torch_ops

from torch_ops_cases import FORMATS, N, N_VARIANT, SEED, STEP, TENSOR_ID, inputs, scale_of


def check(w, u, fmt, policy, sr_bits=0, sr_stream="philox", first_coordinate=0, device="cpu"):
    scale = scale_of(fmt)
    ref, ref_counts = wbaudit.writeback(w, u, fmt, policy, SEED, STEP, TENSOR_ID, sr_bits, scale, None,
                                        first_coordinate, "", sr_stream)
    tw = torch.from_numpy(w).to(device)
    tu = torch.from_numpy(u).to(device)
    got, counts = torch_ops.writeback(tw, tu, fmt, policy, SEED, STEP, TENSOR_ID, sr_bits, scale, sr_stream,
                                      first_coordinate=first_coordinate)
    assert got.dtype == torch.float32 and got.shape == tw.shape and got.device == tw.device
    got = got.cpu().numpy()
    bad = np.flatnonzero(ref.view(np.int32) != got.view(np.int32))
    assert bad.size == 0, (f"{fmt} {policy} sr_bits={sr_bits} {sr_stream}: {bad.size} mismatches, first at {bad[0]}: "
                           f"w={w[bad[0]]!r} u={u[bad[0]]!r} C++ {ref[bad[0]]!r} torch {got[bad[0]]!r}")
    assert counts == ref_counts
    assert all(type(v) is int for v in counts.values())
    return ref_counts


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_policy_matches_the_cpp_kernel(fmt):
    """10^6 coordinates for each policy (exact SR on the default stream), and every further (sr_bits, stream)."""
    w, u = inputs(fmt, N)
    c = check(w, u, fmt, "nearest")
    assert c["saturated"] > 0 and c["erased"] > 0 and c["applied"] > 0
    c = check(w, u, fmt, "stochastic")
    assert c["sr_applied"] > 0
    check(w, u, fmt, "deadzone-sr")
    wv, uv = w[:N_VARIANT], u[:N_VARIANT]
    for policy in ("stochastic", "deadzone-sr"):
        for sr_bits in (0, 1, 3, 8, 16):
            if sr_bits:
                c = check(wv, uv, fmt, policy, sr_bits, "philox")
                if policy == "stochastic" and fmt != "fp32":
                    assert c["sr_truncated"] > 0
            check(wv, uv, fmt, policy, sr_bits, "philox-packed")
    check(wv, uv, fmt, "stochastic", 32, "philox")


def test_high_coordinates_and_chunk_edges():
    """Coordinates beyond 2^34 (the high counter words) and lengths that are not multiples of the pass size."""
    w, u = inputs("bf16", N)
    n = (1 << 16) * 3 + 5
    for policy, sr_bits, stream in (("stochastic", 0, "philox"), ("stochastic", 0, "philox-packed"),
                                    ("stochastic", 3, "philox-packed"), ("deadzone-sr", 8, "philox")):
        for first in (0, 3, (1 << 34) + 7, (1 << 47) - n - 1):
            check(w[:n], u[:n], "bf16", policy, sr_bits, stream, first_coordinate=first)


def test_shapes_and_scalars():
    w, u = inputs("e4m3", N)
    check(w[:24].reshape(2, 3, 4).copy(), u[:24].reshape(2, 3, 4).copy(), "e4m3", "stochastic", 0, "philox")
    check(w[:1].copy(), u[:1].copy(), "e4m3", "nearest")
    got, counts = torch_ops.writeback(torch.zeros(0), torch.zeros(0), "bf16")
    assert got.numel() == 0 and counts == dict.fromkeys(counts, 0) and len(counts) == 6


def test_philox_known_answers():
    """Random123's known-answer vectors for Philox4x32-10 (kat_vectors)."""
    cases = [((0, 0, 0, 0), 0, (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
             ((0xffffffff,) * 4, 0xffffffffffffffff, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
             ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), 0x299f31d0a4093822,
              (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]
    for ctr, key, expected in cases:
        assert tuple(int(x) for x in torch_ops.philox4x32(*ctr, key)) == expected
        out = torch_ops.philox4x32(torch.tensor([ctr[0]]), *ctr[1:], key)
        assert tuple(int(x[0]) if torch.is_tensor(x) else x for x in out) == expected


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_tensor_matches_wbaudit_round(fmt):
    w, u = inputs(fmt, N_VARIANT)
    scale = scale_of(fmt)
    for x in (u, w.astype(np.float64) + u.astype(np.float64) * 0.75, np.arange(-300, 300) * 0.37):
        ref = wbaudit.round(x, fmt, scale=scale)
        got = torch_ops.round_tensor(torch.from_numpy(x), fmt, scale=scale).numpy()
        assert np.array_equal(ref.view(np.int32), got.view(np.int32))
    x = torch.tensor([1.0, 2.5, -3.25], dtype=torch.bfloat16)
    ref = wbaudit.round(x.float().numpy(), fmt, scale=scale)
    assert np.array_equal(ref.view(np.int32), torch_ops.round_tensor(x, fmt, scale=scale).numpy().view(np.int32))


def cpp_error(fn):
    with pytest.raises(Exception) as e:
        fn()
    return e


@pytest.mark.parametrize("bad_w", [True, False])
def test_nonfinite_message_is_the_cpp_message(bad_w):
    w, u = inputs("bf16", N_VARIANT)
    w, u = w.copy(), u.copy()
    (w if bad_w else u)[1234] = np.nan
    u[4321] = np.inf
    ref = cpp_error(lambda: wbaudit.writeback(w, u, "bf16", "stochastic", 1, 9, 3, tensor="layer.weight"))
    with pytest.raises(ValueError) as e:
        torch_ops.writeback(torch.from_numpy(w), torch.from_numpy(u), "bf16", "stochastic", 1, 9, 3,
                            tensor="layer.weight")
    assert ref.type is ValueError and str(e.value) == str(ref.value)
    assert "tensor layer.weight, step 9" in str(e.value) and "coordinate 1234" in str(e.value)
    with pytest.raises(ValueError, match="non-finite value at index 1234"):
        torch_ops.round_tensor(torch.from_numpy(w if bad_w else u), "e4m3")


def test_unknown_names_and_bad_arguments():
    z = torch.zeros(4)
    for args in (("bf17", "nearest", 0, "philox"), ("bf16", "nearst", 0, "philox"), ("bf16", "master", 0, "philox"),
                 ("bf16", "nearest", 3, "philox"), ("bf16", "stochastic", 17, "philox-packed"),
                 ("bf16", "stochastic", 0, "philox-compact"), ("int4x", "nearest", 0, "philox"),
                 ("mxfp4_e2m1:ceil", "nearest", 0, "philox"), ("nvfp4:3d", "nearest", 0, "philox"),
                 ("nvfp4", "master", 0, "philox"), ("mxint8", "stochastic", 17, "philox-packed"),
                 ("bf16:skip_unchanged_blocks", "nearest", 0, "philox")):
        fmt, policy, sr_bits, stream = args
        ref = cpp_error(lambda: wbaudit.writeback(z.numpy(), z.numpy(), fmt, policy, sr_bits=sr_bits,
                                                  sr_stream=stream))
        with pytest.raises(ref.type) as e:
            torch_ops.writeback(z, z, fmt, policy, sr_bits=sr_bits, sr_stream=stream)
        assert str(e.value) == str(ref.value)
    with pytest.raises(ValueError, match="unknown format"):
        torch_ops.round_tensor(z, "fp33")
    with pytest.raises(ValueError, match="scale applies only to integer formats"):
        torch_ops.writeback(z, z, "bf16", scale=0.5)
    for block in ("mxfp8_e4m3", "nvfp4", "mxfp4_e2m1:rceil"):  # block formats: tests/python/test_torch_ops_blocks.py
        got, counts = torch_ops.writeback(z.reshape(1, 4), z.reshape(1, 4), block)
        assert torch.equal(got, z.reshape(1, 4)) and counts["blocks"] == 1
        assert torch.equal(torch_ops.round_tensor(z, block), z)
    with pytest.raises(TypeError, match="float32"):
        torch_ops.writeback(z.half(), z.half(), "fp16")
    with pytest.raises(ValueError, match="shape mismatch"):
        torch_ops.writeback(z, torch.zeros(5), "bf16")
