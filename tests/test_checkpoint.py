"""gptcourse.checkpoint：往返、原子写入、坏文件的清楚报错、weights_only 读取、中断后续训。"""
from __future__ import annotations

import os
import pickle
import shutil

import pytest
import torch

from gptcourse import checkpoint
from gptcourse.checkpoint import CheckpointError
from gptcourse.config import preset
from gptcourse.model import GPT
from gptcourse.optim import make_optimizer
from gptcourse.tokenizer import CharTokenizer
from gptcourse.train import History, TrainConfig, train


@pytest.fixture
def tok(tiny_corpus_text) -> CharTokenizer:
    return CharTokenizer.from_text(tiny_corpus_text)


@pytest.fixture
def ids(tok, tiny_corpus_text) -> torch.Tensor:
    return torch.tensor(tok.encode(tiny_corpus_text * 4), dtype=torch.long)


def tiny(tok, seed=0, **kw) -> GPT:
    torch.manual_seed(seed)
    return GPT(preset("teacher", vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2,
                      n_embd=16, **kw))


def same_weights(a: GPT, b: GPT) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=0, atol=0)


def test_round_trip(tmp_path, tok, ids):
    model = tiny(tok)
    opt = make_optimizer(model, 1e-3)
    model(ids[None, :16], ids[None, 1:17])[1].backward()
    opt.step()
    path = checkpoint.save(tmp_path / "m.pt", model, tok, optimizer=opt, step=7,
                           meta={"val_loss": 1.5})
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    loaded, tok2, meta = checkpoint.load(path)
    same_weights(model, loaded)
    assert not loaded.training                                   # 加载后默认是 eval 模式
    assert tok2.to_dict() == tok.to_dict()
    assert meta["step"] == 7 and meta["val_loss"] == 1.5 and meta["config"] == model.config
    raw = checkpoint.load_raw(path)
    assert set(raw) == {"format", "config", "model", "tokenizer", "step", "optimizer", "rng",
                        "meta", "sha256", "sha256_covers"}
    assert raw["sha256"] == checkpoint.payload_sha256(raw)
    assert raw["sha256"].startswith("v2:") and len(raw["sha256"]) == 3 + 64
    assert raw["optimizer"]["state"]                             # 优化器的动量也在里面
    x = ids[None, :16]
    model.eval()
    torch.testing.assert_close(loaded(x)[0], model(x)[0])


def test_half_storage_restores_fp32(tmp_path, tok):
    model = tiny(tok)
    full = checkpoint.save(tmp_path / "f.pt", model, tok)
    half = checkpoint.save(tmp_path / "h.pt", model, tok, half=True)
    def nbytes(path):                                            # 浮点权重占的字节（不含布尔掩码）
        return sum(v.numel() * v.element_size()
                   for v in checkpoint.load_raw(path)["model"].values() if v.is_floating_point())

    assert nbytes(half) * 2 == nbytes(full)                      # 每个浮点数 4 字节 → 2 字节
    assert half.stat().st_size < full.stat().st_size
    assert checkpoint.load_raw(half)["model"]["tok_emb.weight"].dtype == torch.bfloat16
    loaded, _, _ = checkpoint.load(half)
    assert loaded.tok_emb.weight.dtype == torch.float32
    torch.testing.assert_close(loaded.tok_emb.weight, model.tok_emb.weight, rtol=1e-2, atol=1e-3)


def test_load_uses_weights_only_and_map_location(tmp_path, tok, monkeypatch):
    path = checkpoint.save(tmp_path / "m.pt", tiny(tok), tok)
    calls = []
    real = torch.load

    def spy(*a, **k):
        calls.append(k)
        return real(*a, **k)

    monkeypatch.setattr(torch, "load", spy)
    checkpoint.load(path, map_location="cpu")
    assert calls == [{"map_location": "cpu", "weights_only": True}]


def test_crash_mid_write_keeps_previous_file(tmp_path, tok, monkeypatch):
    path = tmp_path / "m.pt"
    old = tiny(tok, seed=0)
    checkpoint.save(path, old, tok, step=1)
    before = path.read_bytes()

    def broken_save(obj, f, *a, **k):                            # 写了一半就"断电"
        f.write(b"PK\x03\x04 half a zip file")
        raise OSError("磁盘已满（模拟）")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(checkpoint.CheckpointError, match="写不出检查点 .*m.pt.*模拟"):
        checkpoint.save(path, tiny(tok, seed=1), tok, step=2)
    monkeypatch.undo()
    assert path.read_bytes() == before                           # 原文件一字节未变
    assert os.listdir(tmp_path) == ["m.pt"]                      # 临时文件已清理
    loaded, _, meta = checkpoint.load(path)
    same_weights(old, loaded)
    assert meta["step"] == 1


def test_corrupt_and_foreign_files_raise_clear_errors(tmp_path, tok):
    good = checkpoint.save(tmp_path / "good.pt", tiny(tok), tok)
    data = good.read_bytes()
    (tmp_path / "truncated.pt").write_bytes(data[: len(data) // 2])
    (tmp_path / "noise.pt").write_bytes(os.urandom(2048))
    (tmp_path / "empty.pt").write_bytes(b"")
    for name in ("truncated.pt", "noise.pt", "empty.pt"):
        with pytest.raises(CheckpointError, match=f"{name} 不是可读取的 PyTorch 检查点"):
            checkpoint.load(tmp_path / name)
    torch.save({"weights": torch.zeros(3)}, tmp_path / "other.pt")   # 合法的 PyTorch 文件，别的格式
    with pytest.raises(CheckpointError, match="other.pt 不是 gptcourse 检查点"):
        checkpoint.load(tmp_path / "other.pt")
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        checkpoint.load(tmp_path / "missing.pt")


class _Evil:                                                     # 反序列化时会执行代码的 pickle
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_arbitrary_pickle_is_refused_not_executed(tmp_path):
    marker = tmp_path / "pwned.txt"
    with open(tmp_path / "evil.pt", "wb") as f:
        pickle.dump({"format": checkpoint.FORMAT, "x": _Evil(str(marker))}, f, protocol=2)
    with pytest.raises(CheckpointError, match="evil.pt 不是可读取的 PyTorch 检查点"):
        checkpoint.load(tmp_path / "evil.pt")
    assert not marker.exists()                                   # weights_only：代码没有被执行


def _tamper(path, fn):
    """改动检查点的内容，再按全部字段重算校验和（谁都能这样做出一个文件），
    于是测到的是校验和后面的检查（否则先报校验和不符）。"""
    obj = torch.load(path, weights_only=True)
    fn(obj)
    if all(k in obj for k in checkpoint.CHECKSUM_COVERS):
        obj["sha256"] = checkpoint.payload_sha256(obj)
    torch.save(obj, path)


def test_config_vocab_and_structure_mismatch(tmp_path, tok):
    path = checkpoint.save(tmp_path / "m.pt", tiny(tok), tok)
    _tamper(path, lambda o: o["config"].update(vocab_size=tok.vocab_size + 5))
    with pytest.raises(CheckpointError, match=f"词表有 {tok.vocab_size} 个词元.*vocab_size="):
        checkpoint.load(path)

    path = checkpoint.save(tmp_path / "m.pt", tiny(tok), tok)
    _tamper(path, lambda o: o["config"].update(colour="blue"))
    with pytest.raises(CheckpointError, match="配置或词表无法还原.*colour"):
        checkpoint.load(path)

    path = checkpoint.save(tmp_path / "m.pt", tiny(tok), tok)
    _tamper(path, lambda o: o.pop("tokenizer"))
    with pytest.raises(CheckpointError, match=r"缺少字段 \['tokenizer'\]"):
        checkpoint.load(path)

    path = checkpoint.save(tmp_path / "m.pt", tiny(tok), tok)
    _tamper(path, lambda o: o["model"].pop("norm_f.weight"))
    with pytest.raises(CheckpointError, match="结构不匹配.*norm_f.weight"):
        checkpoint.load(path)

    with pytest.raises(CheckpointError, match="词表大小"):        # 保存时就拦住
        checkpoint.save(tmp_path / "x.pt", tiny(tok), CharTokenizer.from_text("春风"))


def test_resume_refuses_mismatches(tmp_path, tok):
    path = checkpoint.save(tmp_path / "m.pt", tiny(tok), tok)     # 只含权重
    with pytest.raises(CheckpointError, match="n_embd 检查点=16 模型=32"):
        checkpoint.resume(path, GPT(preset("teacher", vocab_size=tok.vocab_size, block_size=16,
                                           n_layer=1, n_head=2, n_embd=32)))
    model = tiny(tok)
    other = CharTokenizer(list(tok.itos[2:]) + ["龘"])           # 同样大小、不同的字
    assert other.vocab_size == tok.vocab_size
    with pytest.raises(CheckpointError, match="词表与当前分词器不同"):
        checkpoint.resume(path, model, tokenizer=other)
    with pytest.raises(CheckpointError, match="没有优化器状态"):
        checkpoint.resume(path, model, make_optimizer(model, 1e-3))


@pytest.mark.parametrize("kind", ["adamw", "muon"])
def test_resume_matches_uninterrupted_run(tmp_path, tok, ids, kind):
    """N 步一口气训完  ==  N/2 步 + 存盘 + 读回（新对象）+ N/2 步：权重与损失记录都一样
    （Muon + AdamW 的组合优化器也一样：它的 state_dict 与单个优化器同格式）。"""
    N = 8
    cfg = TrainConfig(batch_size=4, lr=3e-3, warmup_steps=2, max_steps=N, eval_interval=N // 2,
                      eval_batches=2, bf16=False, progress=False, optimizer=kind)
    kw = dict(dropout=0.2, attn_dropout=0.2, resid_dropout=0.2)     # dropout 也要接得上

    full_model = tiny(tok, **kw)
    full = train(full_model, ids, ids, cfg)

    torch.manual_seed(123)                                       # 打乱全局随机数，证明靠的是存档
    half_model = tiny(tok, **kw)
    opt = make_optimizer(half_model, cfg.lr, kind=kind)
    first = train(half_model, ids, ids, cfg, optimizer=opt, stop_step=N // 2)
    path = checkpoint.save(tmp_path / "half.pt", half_model, tok, optimizer=opt, step=N // 2,
                           meta={"history": first.to_dict()})
    del half_model, opt

    torch.manual_seed(999)
    model = tiny(tok, seed=7, **kw)                              # 随便初始化，马上被覆盖
    opt = make_optimizer(model, cfg.lr, kind=kind)
    step = checkpoint.resume(path, model, opt, tokenizer=tok)
    history = History.from_dict(checkpoint.load_raw(path)["meta"]["history"])
    assert step == N // 2 and len(history.steps) == N // 2
    resumed = train(model, ids, ids, cfg, optimizer=opt, start_step=step, history=history)

    same_weights(full_model, model)
    assert [r["loss"] for r in resumed.steps] == [r["loss"] for r in full.steps]
    assert [r["lr"] for r in resumed.steps] == [r["lr"] for r in full.steps]
    assert [(e["step"], e["val"]) for e in resumed.evals] == \
        [(e["step"], e["val"]) for e in full.evals]


def _as_v1(path, mask_value=None):
    """把一个 v2 文件改写成 v1 的样子：每层的因果掩码也在权重里（v1 就是这样存的），校验和照 v1 的
    文件那样覆盖全部字段。``mask_value`` 不是 None 时，存进去的掩码被改坏成全 True/全 False。"""
    obj = torch.load(path, weights_only=True)
    cfg = obj["config"]
    tril = torch.tril(torch.ones(cfg["block_size"], cfg["block_size"], dtype=torch.bool))
    for i in range(cfg["n_layer"]):
        obj["model"][f"blocks.{i}.attn.mask"] = tril if mask_value is None else \
            torch.full_like(tril, mask_value)
    obj["format"] = checkpoint.V1
    obj["sha256"] = checkpoint.payload_sha256(obj)
    torch.save(obj, path)


def test_saves_v2_without_the_mask_and_reads_v1_by_dropping_it(tmp_path, tok, ids):
    model = tiny(tok)
    path = checkpoint.save(tmp_path / "m.pt", model, tok)
    raw = checkpoint.load_raw(path)
    assert raw["format"] == checkpoint.FORMAT == "gptcourse-checkpoint-v2"
    assert not any(k.endswith(".attn.mask") for k in raw["model"])
    _as_v1(path)
    assert torch.load(path, weights_only=True)["format"] == checkpoint.V1
    loaded = checkpoint.load(path)[0]
    same_weights(model, loaded)
    x = ids[None, :16]
    torch.testing.assert_close(loaded(x)[0], model.eval()(x)[0], rtol=0, atol=0)


@pytest.mark.parametrize("value", [True, False])
def test_a_tampered_v1_mask_is_never_used(tmp_path, tok, value):
    """v1 文件里的掩码被改成全 True（看得见未来）或全 False：读进来的模型照样是因果的。"""
    model = tiny(tok)
    path = checkpoint.save(tmp_path / "m.pt", model, tok)
    _as_v1(path, mask_value=value)
    loaded = checkpoint.load(path)[0]
    for blk in loaded.blocks:
        assert torch.equal(blk.attn.mask, torch.tril(torch.ones(16, 16, dtype=torch.bool)))


def test_the_shipped_checkpoint_is_v2_and_a_v1_copy_upgrades_to_it(tmp_path):
    """course.pt 由现在的 save 写出（v2：一种校验和、权重里没有掩码）；把它改写成 v1 的样子，
    upgrade 重存成 v2，权重不变。"""
    raw = checkpoint.load_raw(checkpoint.SHIPPED)
    assert raw["format"] == checkpoint.FORMAT and "blocks.0.attn.mask" not in raw["model"]
    model = checkpoint.load()[0]
    old = tmp_path / "course_v1.pt"
    shutil.copyfile(checkpoint.SHIPPED, old)
    _as_v1(old)
    new = checkpoint.upgrade(old, tmp_path / "course_v2.pt")
    assert checkpoint.load_raw(new)["format"] == checkpoint.FORMAT
    same_weights(model, checkpoint.load(new)[0])


def test_the_shipped_checkpoint_verifies_and_a_changed_weight_in_it_is_refused(tmp_path):
    """course.pt 带的是写入时唯一的那种校验和（v2，全部字段）：不需要许可就核对通过；
    权重里改动一个数，核对就不通过（许可也不管用）。"""
    raw = torch.load(checkpoint.SHIPPED, weights_only=True)
    assert raw["sha256"].startswith("v2:") and raw["sha256"] == checkpoint.payload_sha256(raw)
    checkpoint.load_raw(checkpoint.SHIPPED, trust_unverified=False)
    name = next(k for k, v in raw["model"].items() if v.is_floating_point())
    raw["model"][name].view(-1)[0] += 1
    torch.save(raw, tmp_path / "course.pt")
    with pytest.raises(checkpoint.CheckpointError, match="course.pt 的校验和不符"):
        checkpoint.load_raw(tmp_path / "course.pt", trust_unverified=True)


@pytest.mark.parametrize("error, reason", [
    (OSError(28, "No space left on device"), "磁盘已满"),
    (OSError(30, "Read-only file system"), "只读文件系统"),
    (OSError(27, "File too large"), "文件太大"),
    (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 37760 vs 37654"),
     "unexpected pos"),
])
def test_a_failed_write_is_one_sentence_that_names_the_file_and_the_reason(
        tmp_path, tok, monkeypatch, error, reason):
    """R6（F01、F03、F12）：磁盘满、文件太大、只读——CheckpointError 说出文件与原因，不是堆栈；
    torch 丢了 errno 的 RuntimeError 也说出文件名。"""
    def broken_save(obj, f, *a, **k):
        raise error
    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.save(tmp_path / "m.pt", tiny(tok), tok)
    assert "m.pt" in str(e.value) and reason in str(e.value) and "\n" not in str(e.value)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("change, message", [
    ({"n_layer": 2048, "n_embd": 4096, "n_head": 32}, "n_layer=2048"),
    ({"n_embd": 4096, "n_head": 32}, "形状不符"),
])
def test_a_config_that_does_not_match_its_weights_is_refused_before_building(
        tmp_path, change, message):
    """R7（K11、K12）：校验和有效、配置却与权重不符的文件——在建模型、分配内存之前就拒绝。"""
    obj = checkpoint.load_raw()
    obj["config"].update(change)
    obj["sha256"] = checkpoint.payload_sha256(obj)          # 谁都能重算校验和
    torch.save(obj, tmp_path / "bomb.pt")
    with pytest.raises(checkpoint.CheckpointError, match=f"配置与权重不符.*{message}"):
        checkpoint.load(tmp_path / "bomb.pt")


def test_a_live_run_holds_the_lock_and_a_dead_runs_lock_is_taken_over(tmp_path):
    """R5（F11）：同一个 --out 上另一个还活着的训练 → 拒绝；被杀掉的训练留下的锁 → 接过来。"""
    out = tmp_path / "m.pt"
    (tmp_path / "m.pt.lock").write_text(str(os.getppid()), encoding="ascii")   # 活着的进程
    with pytest.raises(checkpoint.UserError, match="另一个训练"):
        with checkpoint.run_lock(out):
            pass
    (tmp_path / "m.pt.lock").write_text("999999999", encoding="ascii")          # 不存在的进程
    with checkpoint.run_lock(out) as lock:
        assert lock.read_text(encoding="ascii") == str(os.getpid())
    assert not lock.exists()
