"""常见错误陈列馆：每个错误都能单独复现，有它的症状，也有抓住它的检查。

这些"故意写错"的变体只住在这里，名字一看就知道是错的（``attention_no_mask``、
``ListBlocksGPT`` ……），正常的 API（``gc.model``、``gc.generate``、``gc.train``）永远不会用到。

``GALLERY`` 按课程顺序列出十二个错误：``m.detect(m.wrong)`` 必须报错，
``m.detect(m.correct)`` 必须通过（tests/test_mistakes.py 逐个验证）。
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..data import get_batch
from ..model import GPT
from .attention import (
    attention_core,
    attention_late_leak,
    attention_no_mask,
    attention_pair_leak,
    attention_scaled_by_n_embd,
    attention_softmax_wrong_dim,
    attention_weights,
    buggy_attention,
    check_attention_scale,
    check_matches_reference,
    check_merge_heads,
    check_no_future_leak,
    check_softmax_rows,
    gallery_model,
    implied_scale,
    leak_test,
    merge_heads,
    merge_heads_no_transpose,
)
from .cache import CatCache, bench_model
from .common import Diagnosis, real_data, tiny_config
from .sampling import (
    check_long_generation,
    check_temperature_zero,
    check_top_k,
    generate_with_crop,
    generate_without_crop,
    sample_naive,
    sample_safe,
    top_k_naive,
    top_k_safe,
)
from .training import (
    ListBlocksGPT,
    ModeRecorder,
    check_eval_mode,
    check_generalisation,
    check_parameters_registered,
    check_targets_shifted,
    check_train_mode,
    estimate_loss_correctly,
    estimate_loss_forgetting_eval,
    hidden_modules,
    repeated_corpus,
    train_correctly,
    train_forgetting_train,
    unshifted_batch,
)


@dataclass(frozen=True)
class Mistake:
    key: str
    title: str
    wrong: object                         # 错误的函数 / 类
    correct: object                       # 正确的对应物
    detect: Callable[[object], Diagnosis]


def _leak(core) -> Diagnosis:
    torch.manual_seed(0)
    return check_no_future_leak(gallery_model(tiny_config(50, block_size=16), core=core))


def _registered(cls) -> Diagnosis:
    torch.manual_seed(0)
    return check_parameters_registered(cls(tiny_config(50)))


def _long(gen_fn) -> Diagnosis:
    torch.manual_seed(0)
    return check_long_generation(gen_fn, GPT(tiny_config(50, block_size=16)))


def _dropout_model() -> GPT:
    torch.manual_seed(0)
    return GPT(tiny_config(50, block_size=16, dropout=0.2, attn_dropout=0.2, resid_dropout=0.2))


def _toy_data() -> torch.Tensor:
    return torch.randint(50, (400,), generator=torch.Generator().manual_seed(0))


def _train_mode(train_fn) -> Diagnosis:
    return check_train_mode(train_fn, _dropout_model(), _toy_data(), get_batch, steps=12)


def _eval_mode(eval_fn) -> Diagnosis:
    return check_eval_mode(eval_fn, _dropout_model(), _toy_data())


def real_training_text() -> str:
    """正确的做法：在真实的、成千上万首诗的训练集上训练。"""
    from ..data import load_corpus
    return load_corpus("tang_5jue").train


def toy_training_text() -> str:
    """错误的做法：一首诗重复 200 遍，然后把接近 0 的训练损失当成"学会了"。"""
    from ..data import poems
    return repeated_corpus(poems(real_training_text())[0])


def _generalises(make_text, steps: int = 80) -> Diagnosis:
    from ..data import load_corpus
    from .common import train_tiny
    tok, _, _ = real_data()
    text = make_text()
    torch.manual_seed(0)
    model = GPT(tiny_config(tok.vocab_size))
    train_tiny(model, torch.tensor(tok.encode(text), dtype=torch.long), steps)
    return check_generalisation(model, tok, text, load_corpus("tang_5jue").val)


GALLERY: list[Mistake] = [
    Mistake("unshifted", "目标没有错位", unshifted_batch, get_batch, check_targets_shifted),
    Mistake("no_mask", "没有因果掩码", attention_no_mask, attention_core, _leak),
    Mistake("softmax_dim", "softmax 维度错了", attention_softmax_wrong_dim, attention_core,
            check_softmax_rows),
    Mistake("scale", "按 √n_embd 缩放", attention_scaled_by_n_embd, attention_core,
            check_attention_scale),
    Mistake("merge", "合并多头前没转置回来", merge_heads_no_transpose, merge_heads,
            check_merge_heads),
    Mistake("list_blocks", "Block 放进了 Python list", ListBlocksGPT, GPT, _registered),
    Mistake("too_long", "输入超过 block_size", generate_without_crop, generate_with_crop, _long),
    Mistake("forget_train", "忘了 model.train()", train_forgetting_train, train_correctly,
            _train_mode),
    Mistake("forget_eval", "忘了 model.eval()", estimate_loss_forgetting_eval,
            estimate_loss_correctly, _eval_mode),
    Mistake("temperature_zero", "温度为 0", sample_naive, sample_safe, check_temperature_zero),
    Mistake("top_k", "top-k 大于词表", top_k_naive, top_k_safe, check_top_k),
    Mistake("tiny_corpus", "小语料上的零损失当成智能", toy_training_text, real_training_text,
            _generalises),
]


def __getattr__(name: str):
    # 症状演示 gc.mistakes.demos.demo_* 要读语料、训练小模型：第一次用到时才导入
    if name == "demos":
        import gptcourse.mistakes.demos as demos  # 不是 from . import：那会先问 __getattr__
        return demos
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
