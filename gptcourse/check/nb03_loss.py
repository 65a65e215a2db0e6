"""笔记本 03 的第一组练习：自己写交叉熵与困惑度；本章检查器共用的小模型与数据。"""
from __future__ import annotations

import inspect
import io
import math
import re
import textwrap
import tokenize
from unittest import mock

import torch
import torch.nn.functional as F

from ..config import preset
from ..model import GPT
from ._common import _call, _fail, _got, _ok, exercise

_ORIGINAL_CE = F.cross_entropy
_FORBIDDEN = re.compile(r"\b(?:F|functional|nn)\s*\.\s*"
                        r"(?:cross_entropy|nll_loss|CrossEntropyLoss|NLLLoss)\b"
                        r"|\b(?:CrossEntropyLoss|NLLLoss|nll_loss)\s*\(")


def _tiny_model(seed: int = 0, **kw) -> GPT:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=30, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.0,
               attn_dropout=0.0, resid_dropout=0.0)
    return GPT(preset("mini", **(cfg | kw)))


def _batch(seed: int, B: int = 4, T: int = 8, V: int = 30):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(V, (B, T), generator=g), torch.randint(V, (B, T), generator=g)


def _ids(seed: int, n: int = 300, V: int = 30) -> torch.Tensor:
    """一条有规律的 id 序列（多数位置是 +1 递增，偶尔跳一下），让小模型学得动。"""
    g = torch.Generator().manual_seed(seed)
    jumps = torch.randint(V, (n,), generator=g) * (torch.rand(n, generator=g) < 0.2)
    return (torch.arange(n) + jumps.cumsum(0)) % V


def _uses_forbidden(fn) -> bool:
    """fn 是不是 F.cross_entropy 本身，或者源代码里调用了它（或 nll_loss / CrossEntropyLoss）。"""
    if fn is _ORIGINAL_CE or getattr(fn, "__module__", "") in ("torch.nn.functional",
                                                               "torch._C._nn"):
        return True
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        tokens = [t.string for t in tokenize.generate_tokens(io.StringIO(src).readline)
                  if t.type not in (tokenize.COMMENT, tokenize.STRING)]   # 注释和字符串不算
    except (OSError, TypeError, tokenize.TokenError, SyntaxError):
        return False
    return bool(_FORBIDDEN.search(" ".join(tokens)))


@exercise
def cross_entropy(fn) -> bool:
    """练习：``fn(logits [N, V], targets [N]) -> 标量张量``，不许调用 F.cross_entropy。"""
    ban = ("这道题要自己写：不许调用 F.cross_entropy、nll_loss 或 nn.CrossEntropyLoss——"
           "用 log-sum-exp 自己算")
    if _uses_forbidden(fn):
        return _fail(ban)
    g = torch.Generator().manual_seed(0)
    for logits, targets in ((torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([0])),
                            (torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([2])),
                            (torch.randn(6, 11, generator=g), torch.randint(11, (6,), generator=g)),
                            (torch.tensor([[1000.0, 999.0, 0.0], [-1000.0, 0.0, 5.0]]),
                             torch.tensor([1, 0]))):
        with mock.patch.object(F, "cross_entropy", wraps=_ORIGINAL_CE) as ce, \
                mock.patch.object(F, "nll_loss", wraps=F.nll_loss) as nll:   # 照常计算，但记下来
            got, err = _call(fn, logits.clone(), targets.clone())
        if ce.called or nll.called:
            return _fail(ban)
        if err:
            return _fail(err)
        want = _ORIGINAL_CE(logits, targets)
        got = torch.as_tensor(got, dtype=torch.float32)
        if got.numel() != 1:
            return _fail(f"应返回一个标量（所有位置的平均），收到形状 {tuple(got.shape)}")
        if not torch.isfinite(got):
            return _fail(f"logits 很大（{logits.max().item():g}）时得到 {got.item()}："
                         "先减去每行的最大值再求 exp")
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
            p_target = logits.softmax(-1)[torch.arange(len(targets)), targets]
            if torch.allclose(got.abs(), p_target.mean(), rtol=1e-4):
                return _fail("看起来你返回的是目标概率的平均，别忘了取对数再加负号")
            if torch.allclose(got, -want, rtol=1e-4, atol=1e-5):
                return _fail("符号反了：损失是 −ln p（正数），不是 ln p")
            if torch.allclose(got, p_target.log().neg().sum(), rtol=1e-4):
                return _fail("你返回的是总和，应当是平均（除以位置数 N）")
            return _fail(f"logits={logits.tolist()}，targets={targets.tolist()}：\n"
                         f"  你的结果 {got.item():.6f}，正确结果是 {want.item():.6f}")
    return _ok()


@exercise
def perplexity(fn) -> bool:
    """练习：``fn(平均损失) -> 困惑度``。"""
    for loss in (0.0, 1.0, math.log(123), 2.408, 5.2):
        got = _got(fn, loss)
        try:
            got = float(got)
        except (TypeError, ValueError):
            return _fail(f"应返回一个数，收到 {got!r}")
        if not math.isclose(got, math.exp(loss), rel_tol=1e-6):
            hint = ("——你用了 2 为底；损失的单位是 nats（自然对数），要用 e 为底"
                    if loss and math.isclose(got, 2 ** loss, rel_tol=1e-6) else
                    "——困惑度是 e 的损失次方，不是损失的对数"
                    if math.isclose(got, math.log(loss) if loss > 0 else -1, rel_tol=1e-6) else "")
            return _fail(f"损失 {loss:.4f} 时你的结果是 {got!r}，"
                         f"应是 e^损失 = {math.exp(loss):.4f}{hint}")
    return _ok()
