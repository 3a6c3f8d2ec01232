"""SyncBatchNorm's five kernels for the test device (PrivateUse1), as compositions of CPU ops.

torch has them for CUDA (and a few accelerators) only, so nn.SyncBatchNorm cannot run on the CPU;
a torch accelerator brings its own. These are the test device's: its tensors are copied to the
CPU, computed in float64 where torch accumulates, and copied back by the device's copy function.
Importing this module registers them (test_torch_training.check_sync_batchnorm's users)."""
import torch

_LIB = torch.library.Library("aten", "IMPL")  # kept alive: the registrations live as long as it does


def _dims(x):  # every dimension but the channels
    return [0] + list(range(2, x.dim()))


def _per_channel(t, x):  # a channel vector broadcast over x
    return t.cpu().view([1, -1] + [1] * (x.dim() - 2))


def _on(t, like):
    return None if t is None else t.to(like.device)


def batch_norm_stats(input, eps):
    x = input.cpu().double()
    mean, var = x.mean(_dims(x)), x.var(_dims(x), unbiased=False)
    return _on(mean.float(), input), _on((var + eps).rsqrt().float(), input)


def batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean, running_var, momentum, eps, counts):
    m, s, c = mean.cpu().double(), invstd.cpu().double(), counts.cpu().double()[:, None]
    total = c.sum()
    gmean = (m * c).sum(0) / total
    gvar = ((1.0 / s.square() - eps + (m - gmean).square()) * c).sum(0) / total
    if running_mean is not None:
        running_mean.copy_(_on(running_mean.cpu() * (1 - momentum) + momentum * gmean.float(), running_mean))
    if running_var is not None:
        unbiased = gvar * total / (total - 1)
        running_var.copy_(_on(running_var.cpu() * (1 - momentum) + momentum * unbiased.float(), running_var))
    return _on(gmean.float(), input), _on((gvar + eps).rsqrt().float(), input)


def batch_norm_elemt(input, weight, bias, mean, invstd, eps):
    x = input.cpu()
    y = (x - _per_channel(mean, x)) * _per_channel(invstd, x)
    if weight is not None:
        y = y * _per_channel(weight, x)
    if bias is not None:
        y = y + _per_channel(bias, x)
    return _on(y, input)


def batch_norm_backward_reduce(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g):
    g, x = grad_out.cpu(), input.cpu()
    sum_dy = g.sum(_dims(x))
    sum_dy_xmu = (g * (x - _per_channel(mean, x))).sum(_dims(x))
    grad_weight = sum_dy_xmu * invstd.cpu() if weight_g else None
    grad_bias = sum_dy if bias_g else None
    return _on(sum_dy, input), _on(sum_dy_xmu, input), _on(grad_weight, input), _on(grad_bias, input)


def batch_norm_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    g, x = grad_out.cpu(), input.cpu()
    n = count.cpu().double().sum()
    s = _per_channel(invstd, x)
    mean_dy = _per_channel((sum_dy.cpu() / n).float(), x)
    mean_dy_xmu = _per_channel((sum_dy_xmu.cpu() / n).float(), x)
    grad = (g - mean_dy - (x - _per_channel(mean, x)) * s * s * mean_dy_xmu) * s
    if weight is not None:
        grad = grad * _per_channel(weight, x)
    return _on(grad, input)


for _fn in (batch_norm_stats, batch_norm_gather_stats_with_counts, batch_norm_elemt, batch_norm_backward_reduce,
            batch_norm_backward_elemt):
    _LIB.impl(_fn.__name__, _fn, "PrivateUse1")
