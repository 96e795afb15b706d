"""wbaudit.torch_ops for block-scaled formats (MX floor and rceil, NVFP4 1-D and 16x16 tiles) against the C++ kernels
(wbaudit.writeback, itself tested against the scalar reference): bit-identical w_next and every count equal, under every
policy, sr_bits and SR stream, with :skip_unchanged_blocks, on adversarial inputs (torch_ops_block_cases.py); exact SR
draws that continue past the first Philox word; bad input refused with the C++ message; round_tensor."""
import numpy as np
import pytest
import torch

import wbaudit
from wbaudit import torch_ops

from torch_ops_block_cases import BLOCK_FORMATS, SEED, STEP, TENSOR_ID, cases, continued_draws, stacked

N = 1_000_000  # coordinates per format for nearest and exact SR
N_VARIANT = 1 << 16  # per further policy / (sr_bits, stream) variant
VARIANTS = [("stochastic", 0, "philox-packed"), ("stochastic", 3, "philox"),
            ("stochastic", 5, "philox-packed"), ("stochastic", 16, "philox-packed"), ("stochastic", 32, "philox"),
            ("deadzone-sr", 8, "philox"), ("deadzone-sr", 0, "philox-packed")]


def check(w, u, fmt, policy, sr_bits=0, sr_stream="philox", first_coordinate=0):
    ref, ref_counts = wbaudit.writeback(w, u, fmt, policy, SEED, STEP, TENSOR_ID, sr_bits, None, None,
                                        first_coordinate, "", sr_stream)
    tw, tu = torch.from_numpy(w), torch.from_numpy(u)
    got, counts = torch_ops.writeback(tw, tu, fmt, policy, SEED, STEP, TENSOR_ID, sr_bits, None, sr_stream,
                                      first_coordinate=first_coordinate)
    assert got.dtype == torch.float32 and got.shape == tw.shape
    got = got.numpy()
    bad = np.flatnonzero(ref.view(np.int32) != got.view(np.int32))
    assert bad.size == 0, (f"{fmt} {policy} sr_bits={sr_bits} {sr_stream} shape {w.shape}: {bad.size} mismatches, "
                           f"first at {bad[0]}: w={w.flat[bad[0]]!r} u={u.flat[bad[0]]!r} C++ {ref.flat[bad[0]]!r} "
                           f"torch {got.flat[bad[0]]!r}")
    assert counts == ref_counts
    assert all(type(v) is int for v in counts.values())
    return ref_counts


def total(fmt, n, policy, sr_bits=0, sr_stream="philox", skip=False):
    out = {}
    name = fmt + (":skip_unchanged_blocks" if skip else "")
    for w, u in stacked(fmt, n):
        for k, v in check(w, u, name, policy, sr_bits, sr_stream).items():
            out[k] = out.get(k, 0) + v
    return out


@pytest.mark.parametrize("fmt", BLOCK_FORMATS)
def test_every_policy_matches_the_cpp_kernel(fmt):
    """10^6 coordinates under each policy (nearest, exact SR, deadzone-sr); 2^16 per further (sr_bits, stream) and
    for the :skip_unchanged_blocks option."""
    c = total(fmt, N, "nearest")
    for k in ("erased_grid", "erased_scale", "applied", "rescaled_up", "rescaled_down"):
        assert c[k] > 0, k
    if fmt.startswith(("mxfp4", "mxfp6", "mxint8", "nvfp4")):
        assert c["collateral"] > 0 and c["flushed"] > 0
    assert total(fmt, N, "stochastic")["sr_applied"] > 0
    assert total(fmt, N, "deadzone-sr")["sr_applied"] > 0
    for policy, sr_bits, stream in VARIANTS:
        c = total(fmt, N_VARIANT, policy, sr_bits, stream)
        if policy == "stochastic" and 0 < sr_bits < 16:
            assert c["sr_truncated"] > 0
    for policy in ("nearest", "stochastic"):
        c = total(fmt, N_VARIANT, policy, skip=True)
        assert c["blocks_skipped"] > 0


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp4_e2m1:rceil", "mxint8", "nvfp4", "nvfp4:2d"])
def test_single_tensors_and_high_coordinates(fmt):
    """The unstacked shapes one by one (1-D, short blocks and tiles), at coordinates beyond 2^34."""
    for w, u in cases(fmt, 20_000):
        check(w, u, fmt, "nearest")
        check(w, u, fmt, "stochastic", 0, "philox", first_coordinate=(1 << 34) + 7)
        check(w, u, fmt, "stochastic", 3, "philox-packed", first_coordinate=(1 << 47) - w.size - 1)


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4_e2m1", "mxint8",
                                 "nvfp4", "nvfp4:2d"])
def test_exact_sr_draws_that_continue(fmt):
    w, u, planted = continued_draws(fmt, 1 << 16)
    assert planted > 50
    c = check(w, u, fmt, "stochastic")
    assert c["sr_applied"] >= planted
    check(w, u, fmt, "deadzone-sr")


def test_zero_blocks_subnormal_block_scales_and_edge_cases():
    """NVFP4: a block at 2^-12 / 2^-20 of the tensor's max (E4M3-subnormal / zero block scale), all-zero w; 0-d, empty
    and single-element tensors; -0."""
    w = np.zeros((3, 16), np.float32)
    w[0, 0] = 6.0
    w[1] = 2.0 ** -12 * np.arange(16, dtype=np.float32) / 16
    w[2] = 2.0 ** -20
    u = np.full((3, 16), 2.0 ** -24, np.float32)
    for fmt in ("nvfp4", "nvfp4:2d", "mxfp4_e2m1"):
        w0 = wbaudit.round(w, fmt)
        for policy in ("nearest", "stochastic", "deadzone-sr"):
            check(w0, u, fmt, policy)
            check(np.zeros_like(w0), u, fmt, policy)
            check(-np.zeros_like(w0), -np.zeros_like(u), fmt, policy)
        check(np.array(1.5, np.float32), np.array(0.25, np.float32), fmt, "nearest")
        check(np.zeros((0, 5), np.float32), np.zeros((0, 5), np.float32), fmt, "nearest")
        check(np.float32([3.0]), np.float32([1.0]), fmt, "stochastic")


@pytest.mark.parametrize("fmt", ["nvfp4", "nvfp4:2d", "mxfp4_e2m1"])
def test_erased_by_saturation_at_an_unchanged_scale(fmt):
    """w at its block's largest decoded value 6 (S_enc = s_b = 448: the grid is E2M1's own), u outward and too small
    to move fl32(w + u): the scales stay, v saturates back to 6."""
    w = np.ones((16, 32), np.float32)
    w[:, 0] = 6.0
    w[:, 16] = 6.0
    u = np.zeros_like(w)
    u[:, 0] = 2.0 ** -30
    u[3, 16] = -(2.0 ** -30)  # inward: erased on the grid
    for policy in ("nearest", "stochastic", "deadzone-sr"):
        c = check(w, u, fmt, policy)
        assert c["erased_saturation"] == 16 and c["erased_grid"] == 1


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "nvfp4", "nvfp4:2d"])
def test_bad_input_raises_the_cpp_message(fmt):
    w = wbaudit.round(np.linspace(-3, 3, 70, dtype=np.float32).reshape(2, 35), fmt)
    for bad_w, bad_u in ((np.nan, 0.0), (0.0, np.inf), (1.0, -np.inf)):
        wb, ub = w.copy(), np.zeros_like(w)
        wb[1, 7] = bad_w
        ub[1, 7] = bad_u
        with pytest.raises(ValueError) as cpp:
            wbaudit.writeback(wb, ub, fmt, "nearest", 0, 3, 1, 0, None, None, 0, "layer.w")
        with pytest.raises(ValueError) as ours:
            torch_ops.writeback(torch.from_numpy(wb), torch.from_numpy(ub), fmt, "nearest", 0, 3, 1, tensor="layer.w")
        assert str(ours.value) == str(cpp.value)
        assert "non-finite" in str(ours.value)
    big = np.full((2, 35), 3.0e38, np.float32)  # |w + u| rounds to inf in fp32 / a block out of range
    with pytest.raises(ValueError) as cpp:
        wbaudit.writeback(big, big, fmt)
    with pytest.raises(ValueError) as ours:
        torch_ops.writeback(torch.from_numpy(big), torch.from_numpy(big), fmt)
    assert str(ours.value) == str(cpp.value)
    with pytest.raises(ValueError, match="scale applies only to intK"):
        torch_ops.writeback(torch.from_numpy(w), torch.from_numpy(w), fmt, scale=0.5)
    first = (1 << 48) - 10
    with pytest.raises(ValueError) as cpp:
        wbaudit.writeback(w, w, fmt, "stochastic", first_coordinate=first)
    with pytest.raises(ValueError) as ours:
        torch_ops.writeback(torch.from_numpy(w), torch.from_numpy(w), fmt, "stochastic", first_coordinate=first)
    assert str(ours.value) == str(cpp.value) and "2^48" in str(ours.value)


@pytest.mark.parametrize("fmt", BLOCK_FORMATS)
def test_round_tensor(fmt):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((7, 50)) * np.exp2(rng.uniform(-30, 30, (7, 1)))).astype(np.float32)
    got = torch_ops.round_tensor(torch.from_numpy(x), fmt).numpy()
    assert np.array_equal(got.view(np.int32), wbaudit.round(x, fmt).view(np.int32))
    with pytest.raises(ValueError, match="is not an fp32 value"):
        torch_ops.round_tensor(torch.tensor([[0.1, 2.0]], dtype=torch.float64), fmt)
