"""The field suite: layers drawn, seeded, from the kinds of layers real networks have.

The fixed suites (:mod:`.suites`) hold the layers the kernels were tuned on; this one holds layers they
were not. Each family below is a kind of layer found in published networks, with its parameters drawn
from the ranges those networks use; ``field_suite(seed)`` draws the same layers for the same seed.
Every layer is float32 and at most :data:`MAX_GFLOP` GFLOP (a drawn layer above it loses batch,
then spatial size, then channels until it fits), so the whole suite runs in minutes.

=================  =====  ==========================================================================
family             count  what is drawn (N, H x W, C_in -> C_out, kernel / stride / padding)
=================  =====  ==========================================================================
vocoder_up         16     ConvTranspose1d of HiFi-GAN / MelGAN upsampling: H = 1, W 32-2048 frames,
                          C_in 64-512 -> C_in/2, k (1, 2s), s (1, s) with s in {2, 4, 5, 8, 10}
vocoder_res        16     Conv1d of their residual stacks: H = 1, W 256-8192, C 32-512, k (1, 3/7/11),
                          dilation (1, 1/3/5), "same" padding
audio_enc          8      strided Conv1d encoders (EnCodec, Demucs): H = 1, k (1, 2s), s (1, s)
head_up            10     probability-map heads (DBNet, CenterNet): transposed k2 s2 or k4 s2,
                          C_in 32-256 -> 1-4, 40-160 px
head_conv          10     detection and segmentation heads: k3 s1 or k1, C_in 64-256 -> 1-4, 32-160 px
sr_tail            12     super-resolution tails (FSRCNN, ESPCN-like): transposed k5-9, s2-4,
                          C_in 16-64 -> 1 or 3, 32-128 px
mask               14     Mask R-CNN mask heads: N 50-200 RoIs, 7-28 px, C 64-256: k3 s1 convs,
                          k2 s2 transposed convs, k1 to 1-80 classes
decoder            18     GAN and U-Net decoders: transposed k4 s2 p1, k3 s2 p1 (output_padding 1),
                          k3 s1 p1; 2-256 px, 3-1024 channels, N 1-16
encoder            18     their encoders and discriminators: k4 s2 p1, k3 s1 p1, k3 s2 p1; 2-256 px,
                          3-1024 channels, N 1-16
grouped            8      grouped layers (ResNeXt, grouped decoders): groups 2-32, both kinds
depthwise          8      depthwise layers (MobileNet k3/k5 s1/s2; bilinear-style transposed k4 s2)
dilated            8      dilated k3 (DeepLab ASPP, dilation 2-12; transposed with dilation 2-3)
nonsquare          10     non-square kernels and strides: (1, 7), (7, 1), (3, 1), (1, 3), (2, 1);
                          strides (2, 1), (1, 2) (CRNN, Inception); both kinds
tiny_big           8      a tiny input (1-4 px) with large weights (9-64 MiB), both kinds
=================  =====  ==========================================================================
"""

from __future__ import annotations

import numpy as np

from .cases import Case

#: The default seed of ``bench --suite field``.
SEED = 2026
#: No drawn layer exceeds this many GFLOP.
MAX_GFLOP = 2.0

_CHANNELS = (3, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


def _pick(rng, values):
    return values[int(rng.integers(len(values)))]


def _log_int(rng, low, high):
    """An integer drawn log-uniformly from [low, high]."""
    return int(round(float(np.exp(rng.uniform(np.log(low), np.log(high))))))


def _vocoder_up(rng, i):
    s = _pick(rng, (2, 4, 5, 8, 8, 10))
    cin = _pick(rng, (64, 128, 256, 512))
    return dict(input_shape=(1, 1, _log_int(rng, 32, 2048), cin), out_channels=cin // 2, kernel=(1, 2 * s),
                stride=(1, s), padding=(0, s // 2 + s % 2), output_padding=(0, s % 2), op="deconv")


def _vocoder_res(rng, i):
    k, d = _pick(rng, (3, 3, 7, 11)), _pick(rng, (1, 3, 5))
    c = _pick(rng, (32, 64, 128, 256, 512))
    return dict(input_shape=(1, 1, _log_int(rng, 256, 8192), c), out_channels=c, kernel=(1, k), stride=1,
                padding=(0, d * (k - 1) // 2), dilation=(1, d), op="conv")


def _audio_enc(rng, i):
    s = _pick(rng, (2, 4, 5, 8))
    cin = _pick(rng, (32, 64, 128, 256))
    return dict(input_shape=(1, 1, _log_int(rng, 1024, 16384), cin), out_channels=2 * cin, kernel=(1, 2 * s),
                stride=(1, s), padding=(0, s // 2), op="conv")


def _head_up(rng, i):
    k = _pick(rng, (2, 2, 4))
    size = _log_int(rng, 40, 160)
    return dict(input_shape=(_pick(rng, (1, 1, 2)), size, size, _pick(rng, (32, 64, 128, 256))),
                out_channels=int(rng.integers(1, 5)), kernel=k, stride=2, padding=0 if k == 2 else 1, op="deconv")


def _head_conv(rng, i):
    k = _pick(rng, (1, 3, 3))
    size = _log_int(rng, 32, 160)
    return dict(input_shape=(1, size, size, _pick(rng, (64, 128, 256))), out_channels=int(rng.integers(1, 5)),
                kernel=k, stride=1, padding=k // 2, op="conv")


def _sr_tail(rng, i):
    s = _pick(rng, (2, 3, 4))
    k = _pick(rng, (5, 6, 7, 8, 9, 9))
    k = max(k, s)
    size = _log_int(rng, 32, 128)
    pad = (k - s + 1) // 2
    output_padding = (s + 2 * pad - k) % s
    return dict(input_shape=(1, size, size, _pick(rng, (16, 32, 56, 64))), out_channels=_pick(rng, (1, 3)),
                kernel=k, stride=s, padding=pad, output_padding=output_padding, op="deconv")


def _mask(rng, i):
    n, c = int(rng.integers(50, 201)), _pick(rng, (64, 128, 256))
    kind = i % 3
    if kind == 0:
        size = _pick(rng, (7, 14, 14))
        return dict(input_shape=(n, size, size, c), out_channels=c, kernel=3, stride=1, padding=1, op="conv")
    if kind == 1:
        size = _pick(rng, (7, 14, 14))
        return dict(input_shape=(n, size, size, c), out_channels=c, kernel=2, stride=2, padding=0, op="deconv")
    return dict(input_shape=(n, 28, 28, c), out_channels=_pick(rng, (1, 1, 80)), kernel=1, stride=1, padding=0,
                op="conv")


def _decoder_encoder(op):
    def draw(rng, i):
        kind = _pick(rng, ("k4s2", "k4s2", "k3s2", "k3s1"))
        size = _pick(rng, (2, 4, 8, 16, 32, 64, 128, 256))
        cin = _pick(rng, _CHANNELS)
        cout = _pick(rng, _CHANNELS)
        n = _pick(rng, (1, 1, 1, 2, 4, 8, 16))
        k, s = (4, 2) if kind == "k4s2" else (3, 2) if kind == "k3s2" else (3, 1)
        if op == "conv" and size < k:
            size = k
        extra = {"output_padding": 1} if op == "deconv" and kind == "k3s2" else {}
        return dict(input_shape=(n, size, size, cin), out_channels=cout, kernel=k, stride=s, padding=1, op=op,
                    **extra)
    return draw


def _grouped(rng, i):
    g = _pick(rng, (2, 4, 8, 32))
    per = _pick(rng, (4, 8, 16, 32))
    size = _pick(rng, (14, 28, 56))
    if i % 2 == 0:
        return dict(input_shape=(1, size, size, g * per), out_channels=g * per, kernel=3, stride=1, padding=1,
                    groups=g, op="conv")
    return dict(input_shape=(_pick(rng, (1, 4)), size, size, g * per), out_channels=g * per, kernel=4, stride=2,
                padding=1, groups=g, op="deconv")


def _depthwise(rng, i):
    c = _pick(rng, (32, 64, 96, 144, 192, 384))
    size = _pick(rng, (14, 28, 56, 112))
    if i % 4 == 3:
        return dict(input_shape=(1, size, size, c), out_channels=c, kernel=4, stride=2, padding=1, groups=c,
                    op="deconv")
    k, s = _pick(rng, (3, 3, 5)), _pick(rng, (1, 2))
    return dict(input_shape=(1, size, size, c), out_channels=c, kernel=k, stride=s, padding=k // 2, groups=c,
                op="conv")


def _dilated(rng, i):
    c = _pick(rng, (64, 128, 256))
    size = _pick(rng, (32, 48, 64))
    if i % 4 == 3:
        d = _pick(rng, (2, 3))
        return dict(input_shape=(1, size, size, c), out_channels=c, kernel=3, stride=1, padding=d, dilation=d,
                    op="deconv")
    d = _pick(rng, (2, 4, 6, 12))
    return dict(input_shape=(1, size, size, c), out_channels=c, kernel=3, stride=1, padding=d, dilation=d,
                op="conv")


def _nonsquare(rng, i):
    kernel = _pick(rng, ((1, 7), (7, 1), (3, 1), (1, 3), (2, 1)))
    stride = _pick(rng, (1, 1, (2, 1), (1, 2)))
    c = _pick(rng, (64, 128, 192, 256))
    h, w = _pick(rng, ((17, 17), (32, 100), (8, 64), (35, 35)))
    padding = (kernel[0] // 2, kernel[1] // 2)
    if i % 2 == 0:
        return dict(input_shape=(1, h, w, c), out_channels=_pick(rng, (64, 128, 192)), kernel=kernel,
                    stride=stride, padding=padding, op="conv")
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    output_padding = ((sh + 2 * padding[0] - kernel[0]) % sh, (sw + 2 * padding[1] - kernel[1]) % sw)
    return dict(input_shape=(1, h, w, c), out_channels=_pick(rng, (64, 128, 192)), kernel=kernel, stride=stride,
                padding=padding, output_padding=output_padding, op="deconv")


def _tiny_big(rng, i):
    size = _pick(rng, (1, 2, 4))
    cin, cout = _pick(rng, (512, 1024)), _pick(rng, (512, 1024))
    if i % 2 == 0:
        return dict(input_shape=(1, size, size, cin), out_channels=cout, kernel=4, stride=2, padding=1, op="deconv")
    size = max(size, 2)
    return dict(input_shape=(1, size, size, cin), out_channels=cout, kernel=_pick(rng, (3, 4)), stride=2,
                padding=1, op="conv")


#: (family, count, draw(rng, index) -> Case fields): the table in the module docstring.
FAMILIES = (
    ("vocoder_up", 16, _vocoder_up),
    ("vocoder_res", 16, _vocoder_res),
    ("audio_enc", 8, _audio_enc),
    ("head_up", 10, _head_up),
    ("head_conv", 10, _head_conv),
    ("sr_tail", 12, _sr_tail),
    ("mask", 14, _mask),
    ("decoder", 18, _decoder_encoder("deconv")),
    ("encoder", 18, _decoder_encoder("conv")),
    ("grouped", 8, _grouped),
    ("depthwise", 8, _depthwise),
    ("dilated", 8, _dilated),
    ("nonsquare", 10, _nonsquare),
    ("tiny_big", 8, _tiny_big),
)


def _fit(fields):
    """The drawn layer, shrunk (batch, then spatial size, then channels) until it is at most MAX_GFLOP."""
    case = Case("", **fields)
    while case.flops > MAX_GFLOP * 1e9:
        n, h, w, c = case.input_shape
        if n > 1 and case.family != "mask":
            n = max(1, n // 2)
        elif case.family == "mask" and n > 50:
            n = max(50, n // 2)
        elif h * w > 64 and case.family not in ("tiny_big",):
            h, w = (h if h == 1 else max(1, h * 3 // 4)), max(1, w * 3 // 4)
        elif c > case.groups * 8 and case.groups == 1:
            c = c // 2
            fields["out_channels"] = max(1, fields["out_channels"] // 2)
        else:
            break
        fields["input_shape"] = (n, h, w, c)
        case = Case("", **fields)
    return fields


def field_suite(seed: int = SEED) -> list:
    """The field suite's layers (:data:`FAMILIES`), drawn with ``seed``: the same seed, the same layers."""
    rng = np.random.default_rng(seed)
    cases = []
    for family, count, draw in FAMILIES:
        for i in range(count):
            fields = _fit({**draw(rng, i), "family": family})
            cases.append(Case(f"{family}{i:02d}", **fields))
    return cases


def summary(ratios) -> dict:
    """min, p10, median and geometric mean of per-layer speed ratios (> 1: fastdeconv faster)."""
    values = np.asarray(ratios, dtype=np.float64)
    if values.size == 0:
        return {}
    return {"layers": int(values.size), "min": float(values.min()), "p10": float(np.percentile(values, 10)),
            "median": float(np.median(values)), "geomean": float(np.exp(np.mean(np.log(values))))}
