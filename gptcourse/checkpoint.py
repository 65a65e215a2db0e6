"""检查点：模型权重、优化器状态、步数、随机数状态、配置和词表都在一个文件里。

只凭一个检查点就能继续训练或生成文字。写入是原子的（先写临时文件再 ``os.replace``），
写到一半崩溃也不会留下损坏的文件；读取用 ``torch.load(weights_only=True)``。
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from .config import GPTConfig
from .model import GPT
from .runtime import DATA_DIR
from .tokenizer import tokenizer_from_dict

FORMAT = "gptcourse-checkpoint-v1"
REQUIRED_KEYS = ("config", "model", "tokenizer", "step", "optimizer", "rng", "meta")
SHIPPED = DATA_DIR / "checkpoints" / "course.pt"     # 随课程发布的预训练模型


class CheckpointError(ValueError):
    """检查点文件损坏、格式不对，或与当前模型/词表不匹配。"""


def atomic_save(obj, path: str | Path) -> Path:
    """把对象保存到 path：先写同目录的临时文件，再原子替换。"""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)                          # mkstemp 建的是 0600，发布文件应可读
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def save(path: str | Path, model: GPT, tokenizer, *, optimizer=None, step: int = 0,
         meta: dict | None = None, half: bool = False) -> Path:
    """保存检查点。``half=True`` 时权重以 bf16 存储（文件减半，加载时还原为 fp32）。"""
    state = model.state_dict()
    if half:
        state = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in state.items()}
    tok = tokenizer.to_dict()
    if tok.get("type") == "char" and tokenizer.vocab_size != model.config.vocab_size:
        raise CheckpointError(f"词表大小 {tokenizer.vocab_size} 与模型 vocab_size "
                              f"{model.config.vocab_size} 不一致")
    obj = {
        "format": FORMAT,
        "config": model.config.to_dict(),
        "model": state,
        "tokenizer": tok,
        "step": int(step),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "rng": {"torch": torch.get_rng_state(),
                **({"cuda": torch.cuda.get_rng_state_all()} if torch.cuda.is_available() else {})},
        "meta": dict(meta or {}),
    }
    return atomic_save(obj, path)


def load_raw(path: str | Path | None = None, map_location="cpu") -> dict:
    """读取检查点字典并检查格式；错误时抛出 :class:`CheckpointError`，说明问题所在。"""
    path = Path(path) if path is not None else SHIPPED
    if not path.exists():
        raise FileNotFoundError(f"找不到检查点文件 {path}")
    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # 损坏的 zip、不安全的 pickle、根本不是 PyTorch 文件……
        first = (str(e).strip().splitlines() or [""])[0][:120]
        raise CheckpointError(f"{path.name} 不是可读取的 PyTorch 检查点（{type(e).__name__}: "
                              f"{first}）") from e
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise CheckpointError(f"{path.name} 不是 gptcourse 检查点（缺少 format={FORMAT!r}）")
    missing = [k for k in REQUIRED_KEYS if k not in obj]
    if missing:
        raise CheckpointError(f"{path.name} 缺少字段 {missing}，文件不完整")
    return obj


def _config_and_tokenizer(obj: dict, name: str):
    """从检查点字典还原 (GPTConfig, 分词器)，并检查两者一致。"""
    try:
        cfg = GPTConfig.from_dict(obj["config"])
        tok = tokenizer_from_dict(obj["tokenizer"])
    except (ValueError, TypeError, KeyError) as e:
        raise CheckpointError(f"{name} 里的配置或词表无法还原：{e}") from e
    if tok.vocab_size != cfg.vocab_size:
        raise CheckpointError(f"{name} 里的词表有 {tok.vocab_size} 个词元，但模型配置是 "
                              f"vocab_size={cfg.vocab_size}")
    return cfg, tok


def load(path: str | Path | None = None, map_location="cpu", eval_mode: bool = True):
    """加载检查点 → (model, tokenizer, meta)。``path=None`` 加载随课程发布的模型。

    meta 里有 step、config 以及训练时记录的指标。
    """
    obj = load_raw(path, map_location)
    cfg, tok = _config_and_tokenizer(obj, Path(path).name if path is not None else SHIPPED.name)
    model = GPT(cfg)
    load_weights(model, obj["model"])
    model.to(map_location if isinstance(map_location, (str, torch.device)) else "cpu")
    if eval_mode:
        model.eval()
    meta = {"step": obj["step"], "config": cfg, **obj.get("meta", {})}
    return model, tok, meta


def load_weights(model: GPT, state: dict) -> None:
    """把 state 载入 model（bf16 存储会还原为 fp32），形状或键不符时给出清楚的错误。"""
    own = model.state_dict()
    missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or extra:
        raise CheckpointError(f"检查点与模型结构不匹配：缺少 {missing[:5]}，多出 {extra[:5]}")
    for k, v in state.items():
        if v.shape != own[k].shape:
            raise CheckpointError(f"参数 {k} 形状不符：检查点 {tuple(v.shape)}，"
                                  f"模型 {tuple(own[k].shape)}")
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()})


def resume(path: str | Path, model: GPT, optimizer=None, tokenizer=None) -> int:
    """把检查点里的权重、优化器与随机数状态恢复到已建好的对象上，返回步数。

    批次由 (seed, step) 决定（见 ``train.batch_generator``），dropout 用全局随机数，
    这里一并恢复，所以接着训练与不中断地训练完全一样。
    """
    obj = load_raw(path)
    cfg, tok = _config_and_tokenizer(obj, Path(path).name)
    if cfg != model.config:
        diff = {k: (v, getattr(model.config, k)) for k, v in cfg.to_dict().items()
                if getattr(model.config, k) != v}
        shown = "，".join(f"{k} 检查点={a!r} 模型={b!r}" for k, (a, b) in diff.items())
        raise CheckpointError(f"检查点的配置与当前模型不同，不能接着训练：{shown}")
    if tokenizer is not None and tok.to_dict() != tokenizer.to_dict():
        raise CheckpointError("检查点的词表与当前分词器不同，不能接着训练")
    load_weights(model, obj["model"])
    if optimizer is not None:
        if obj["optimizer"] is None:
            raise CheckpointError("检查点里没有优化器状态（可能是只含权重的发布版）")
        optimizer.load_state_dict(obj["optimizer"])
    torch.set_rng_state(obj["rng"]["torch"])
    if torch.cuda.is_available() and "cuda" in obj["rng"]:
        torch.cuda.set_rng_state_all(obj["rng"]["cuda"])
    return obj["step"]
