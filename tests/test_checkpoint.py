"""gptcourse.checkpoint：往返、原子写入、坏文件的清楚报错、weights_only 读取、中断后续训。"""
from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from gptcourse import checkpoint, cli
from gptcourse.bpe import BPETokenizer
from gptcourse.checkpoint import CheckpointError, UnverifiedCheckpointWarning
from gptcourse.config import preset
from gptcourse.generate import generate
from gptcourse.model import GPT
from gptcourse.optim import make_optimizer
from gptcourse.runtime import ROOT
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


# ---------------------------------------------------------------- 校验和、临时文件、字段类型
# resume 先检查后改动；BPE 检查点能从命令行生成。
def rewrite(path, fn, keep_sha=True):
    """改动检查点；``keep_sha=False`` 时按全部字段重算校验和（谁都能这样做出一个文件），
    测的是校验和后面的检查。"""
    obj = torch.load(path, weights_only=True)
    fn(obj)
    if not keep_sha and all(k in obj for k in checkpoint.CHECKSUM_COVERS):
        obj["sha256"] = checkpoint.payload_sha256(obj)
    torch.save(obj, path)


def snapshot(model, opt=None):
    state = {k: v.clone() for k, v in model.state_dict().items()}
    return state, (repr(opt.state_dict()) if opt is not None else None)


def assert_unchanged(model, opt, snap):
    state, opt_repr = snap
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k
    if opt is not None:
        assert repr(opt.state_dict()) == opt_repr


def test_flipped_byte_in_the_file_is_detected(tmp_path, tok):
    model = tiny(tok)
    path = checkpoint.save(tmp_path / "m.pt", model, tok)
    data = bytearray(path.read_bytes())
    weights = model.tok_emb.weight.detach().numpy().tobytes()
    at = data.find(weights)                                   # 张量数据在 zip 里不压缩
    assert at > 0
    data[at + len(weights) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="m.pt 的校验和不符"):
        checkpoint.load(path)


def test_changed_tensor_is_detected_and_file_without_checksum_needs_consent(tmp_path, tok):
    path = checkpoint.save(tmp_path / "m.pt", tiny(tok), tok)
    rewrite(path, lambda o: o["model"]["norm_f.weight"].mul_(2))
    with pytest.raises(CheckpointError, match="校验和不符"):
        checkpoint.load(path)
    rewrite(path, lambda o: [o.pop("sha256"), o.pop("sha256_covers")])   # 没有校验和的旧格式
    with pytest.raises(CheckpointError, match="m.pt 没有校验和：无法确认配置、词表与 meta"):
        checkpoint.load(path, trust_unverified=False)
    with pytest.warns(checkpoint.UnverifiedCheckpointWarning, match="m.pt 没有校验和"):
        model, _, _ = checkpoint.load(path, trust_unverified=True)     # 明确许可：照常读取
    assert torch.equal(model.norm_f.weight, torch.full_like(model.norm_f.weight, 2.0))


def test_shipped_checkpoint_without_checksum_loads():
    if not checkpoint.SHIPPED.exists():
        pytest.skip("没有随课程发布的检查点")
    model, tok, meta = checkpoint.load()
    assert model.config.vocab_size == tok.vocab_size and meta["step"] > 0


@pytest.mark.parametrize("change, message", [
    (lambda o: o.update(tokenizer=None), "'tokenizer' 应是 dict"),
    (lambda o: o.update(meta=[1, 2]), "'meta' 应是 dict"),
    (lambda o: o.update(config=[1, 2]), "'config' 应是 dict"),
    (lambda o: o.update(model=5), "'model' 应是 dict"),
    (lambda o: o["model"].update(extra="x"), "不是张量"),
    (lambda o: o.update(step="abc"), "step 应是 ≥ 0 的整数"),
    (lambda o: o.update(step=-1), "step 应是 ≥ 0 的整数"),
    (lambda o: o.update(optimizer=[1]), "优化器状态应是 dict"),
    (lambda o: o.update(rng=None), "'rng' 应是 dict"),
    (lambda o: o["tokenizer"].update(unk="false"), "'unk' 应是 bool"),
    (lambda o: o["model"]["norm_f.weight"].fill_(float("nan")), "NaN 或 inf"),
    (lambda o: o["model"].update({"norm_f.weight": o["model"]["norm_f.weight"].long()}),
     "类型不符"),
])
def test_bad_fields_are_checkpoint_errors(tmp_path, tok, change, message):
    path = checkpoint.save(tmp_path / "m.pt", tiny(tok), tok)
    rewrite(path, change, keep_sha=False)
    with pytest.raises(CheckpointError, match=message):
        checkpoint.load(path)


def test_bad_save_targets(tmp_path, tok):
    model = tiny(tok)
    with pytest.raises(CheckpointError, match="是一个目录"):
        checkpoint.save(tmp_path, model, tok)
    with pytest.raises(CheckpointError, match="没有文件名"):
        checkpoint.save("", model, tok)
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="它是一个文件"):
        checkpoint.save(tmp_path / "file" / "m.pt", model, tok)
    with pytest.raises(CheckpointError, match="词表大小 300 与模型 vocab_size"):
        checkpoint.save(tmp_path / "b.pt", model, BPETokenizer({(1, 2): 256} | {
            (3, i): 257 + i - 4 for i in range(4, 47)}))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="这台机器有 CUDA")
def test_cuda_map_location_without_cuda_says_so(tmp_path, tok):
    path = checkpoint.save(tmp_path / "m.pt", tiny(tok), tok)
    with pytest.raises(CheckpointError, match="没有可用的 CUDA"):
        checkpoint.load(path, map_location="cuda")


def test_sigterm_mid_save_removes_the_temp_file(tmp_path):
    """写到一半收到 SIGTERM：临时文件被删掉，原来的检查点不变，进程以 128 + 15 退出。"""
    script = textwrap.dedent(f"""
        import os, signal, torch
        from gptcourse import checkpoint
        target = {str(tmp_path / "m.pt")!r}
        checkpoint.atomic_save({{"v": 1}}, target)
        real = torch.save
        def slow_save(obj, f, *a, **k):
            f.write(b"PK half a file")
            os.kill(os.getpid(), signal.SIGTERM)       # 写到一半被 kill
            real(obj, f, *a, **k)
        torch.save = slow_save
        checkpoint.atomic_save({{"v": 2}}, target)
        print("不应该走到这里")
    """)
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 128 + signal.SIGTERM and "不应该" not in r.stdout, r.stderr
    assert os.listdir(tmp_path) == ["m.pt"]
    assert torch.load(tmp_path / "m.pt", weights_only=True) == {"v": 1}


def test_stale_temps_of_dead_writers_are_removed_on_the_next_save(tmp_path, tok):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = tmp_path / f".m.pt.{dead}.abc123.tmp"             # 被 SIGKILL 杀掉的写入者留下的
    live = tmp_path / f".m.pt.{os.getppid()}.def456.tmp"      # 还活着的进程正在写
    other = tmp_path / f".n.pt.{dead}.xyz.tmp"                # 别的检查点的临时文件：不归我们管
    for p in (stale, live, other):
        p.write_bytes(b"half")
    assert not list(tmp_path.glob("*.pt"))                    # 临时文件不会被当成检查点
    checkpoint.save(tmp_path / "m.pt", tiny(tok), tok)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m.pt", live.name, other.name])


def _trained(tok, tmp_path):
    model = tiny(tok)
    opt = make_optimizer(model, 1e-3)
    ids = torch.tensor(tok.encode("床前明月光，疑是地上霜。\n" * 4))
    model(ids[None, :16], ids[None, 1:17])[1].backward()
    opt.step()
    return checkpoint.save(tmp_path / "m.pt", model, tok, optimizer=opt, step=3)


@pytest.mark.parametrize("change, message", [
    (lambda o: o["optimizer"]["param_groups"].pop(), "分组数不同"),
    (lambda o: o["optimizer"]["param_groups"][0]["params"].pop(), "第 0 组的参数个数不同"),
    (lambda o: o["optimizer"]["state"][0].update(exp_avg=torch.zeros(3)), "exp_avg.*形状"),
    (lambda o: o["optimizer"]["state"].update({99: {}}), "不存在的参数编号 99"),
    (lambda o: o["rng"].update(torch=torch.zeros(3, dtype=torch.uint8)), "随机数状态损坏"),
    (lambda o: o["model"]["norm_f.weight"].fill_(float("inf")), "NaN 或 inf"),
])
def test_failed_resume_leaves_model_and_optimizer_unchanged(tmp_path, tok, change, message):
    path = _trained(tok, tmp_path)
    rewrite(path, change, keep_sha=False)
    model = tiny(tok, seed=5)
    opt = make_optimizer(model, 1e-3)
    snap = snapshot(model, opt)
    rng = torch.get_rng_state()
    with pytest.raises(CheckpointError, match=message):
        checkpoint.resume(path, model, opt, tokenizer=tok)
    assert_unchanged(model, opt, snap)
    assert torch.equal(torch.get_rng_state(), rng)


def test_resume_into_a_different_optimizer_is_refused_before_any_change(tmp_path, tok):
    path = _trained(tok, tmp_path)
    model = tiny(tok, seed=5)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)          # 1 组，而检查点里是 2 组
    snap = snapshot(model, sgd)
    with pytest.raises(CheckpointError, match="分组数不同：检查点 2，当前 1"):
        checkpoint.resume(path, model, sgd)
    assert_unchanged(model, sgd, snap)
    opt = make_optimizer(model, 1e-3)                          # 对的优化器：恢复成功
    assert checkpoint.resume(path, model, opt, tokenizer=tok) == 3


def test_bpe_checkpoint_trains_saves_and_generates_from_the_cli(tmp_path, tiny_corpus_text):
    tok = BPETokenizer.train(tiny_corpus_text * 5, vocab_size=300)
    torch.manual_seed(0)
    model = GPT(preset("mini", vocab_size=tok.vocab_size, block_size=32, n_layer=1, n_head=2,
                       n_embd=32))
    ids = torch.tensor(tok.encode(tiny_corpus_text * 20), dtype=torch.long)
    cfg = TrainConfig(batch_size=4, lr=3e-3, warmup_steps=1, max_steps=4, eval_interval=4,
                      eval_batches=1, bf16=False, progress=False)
    opt = make_optimizer(model, cfg.lr)
    history = train(model, ids, ids, cfg, optimizer=opt)
    path = checkpoint.save(tmp_path / "bpe.pt", model, tok, optimizer=opt, step=4)
    loaded, tok2, meta = checkpoint.load(path)
    assert tok2 == tok and meta["step"] == 4 and len(history.steps) == 4
    again = GPT(model.config)
    assert checkpoint.resume(path, again, make_optimizer(again, 1e-3), tokenizer=tok) == 4
    r = subprocess.run([sys.executable, "-m", "gptcourse", "generate", "--checkpoint", str(path),
                        "--prompt", "床前", "--seed", "0", "--max-new-tokens", "12", "-n", "2"],
                       cwd=ROOT, capture_output=True, timeout=120,       # 字节：不转换 \r
                       env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"})
    assert r.returncode == 0, r.stderr.decode()
    poems = [generate(loaded, tok2, "床前", max_new_tokens=12, seed=s) for s in (0, 1)]
    assert r.stdout.decode("utf-8") == "".join(p + "\n" for p in poems)
    assert all(p.startswith("床前") and len(p) > 2 for p in poems)


@pytest.fixture
def saved(tmp_path, tok):
    return checkpoint.save(tmp_path / "m.pt", tiny(tok), tok)


@pytest.mark.parametrize("edit, what", [
    (lambda o: o["config"].update(n_head=1), "config"),                  # K4b：形状不变
    (lambda o: o["tokenizer"].update(                                    # K11：换掉词表里的一个字
        chars=o["tokenizer"]["chars"][1:] + "\U0002A6A5"), "tokenizer"),
    (lambda o: o["meta"].update(release={"settings": {"temperature": 0.1}}), "meta"),
    (lambda o: o.update(step=o["step"] + 1), "step"),
])
def test_checksum_covers_config_tokenizer_and_meta(saved, edit, what):
    rewrite(saved, edit)
    with pytest.raises(CheckpointError, match="校验和不符"):
        checkpoint.load(saved)


def test_legacy_checksum_loads_only_with_consent_and_upgrades(saved, tmp_path, monkeypatch):
    def legacy(o):
        o.pop("sha256_covers")
        o["sha256"] = checkpoint.v1_sha256(o, checkpoint.LEGACY_COVERS)
    rewrite(saved, legacy)
    monkeypatch.delenv(checkpoint.TRUST_ENV, raising=False)
    with pytest.raises(CheckpointError, match="只覆盖权重与优化器的旧格式校验和.*"
                                              "GPTCOURSE_TRUST_UNVERIFIED=1"):
        checkpoint.load(saved)
    monkeypatch.setenv(checkpoint.TRUST_ENV, "1")                 # 命令行的明确许可
    with pytest.warns(checkpoint.UnverifiedCheckpointWarning):
        old_model, _, _ = checkpoint.load(saved)
    monkeypatch.delenv(checkpoint.TRUST_ENV)
    new = checkpoint.upgrade(saved, tmp_path / "new.pt")          # 重存为新格式：权重不变
    raw = checkpoint.load_raw(new)
    assert raw["sha256_covers"] == list(checkpoint.CHECKSUM_COVERS)
    model, _, _ = checkpoint.load(new)
    for k, v in old_model.state_dict().items():
        assert torch.equal(v, model.state_dict()[k]), k


def test_config_must_have_every_field(saved):
    rewrite(saved, lambda o: o["config"].pop("n_head"), keep_sha=False)     # K4
    with pytest.raises(CheckpointError, match="缺少字段.*n_head"):
        checkpoint.load(saved)


def test_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "x.pt"
    os.mkfifo(fifo)                                                          # K32
    with pytest.raises(CheckpointError, match="不是普通文件"):
        checkpoint.load(fifo)


def test_compressed_members_are_refused_before_inflating(saved, tmp_path):
    import zipfile
    bomb = tmp_path / "bomb.pt"                                              # K34
    with zipfile.ZipFile(saved) as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
    with pytest.raises(CheckpointError, match="压缩"):
        checkpoint.load(bomb)


# ---------------------------------------------------------------- 校验和的覆盖范围
# 覆盖范围不由文件自己说了算；更早版本的文件只在明确许可时读取。
TRAIN = ["train", "--corpus", "tang_5jue", "--preset", "mini", "--batch-size", "2",
         "--no-progress", "--no-bf16", "--eval-batches", "2"]


def _covers(covers):
    def edit(o):
        o["config"]["n_head"] = 1                                   # 形状不变：权重照样载得进
        o["sha256_covers"] = covers
        o["sha256"] = checkpoint.payload_sha256(o, covers)
    return edit


@pytest.mark.parametrize("case, covers", [("C8", ["model"]), ("C9", []),
                                          ("C8b", ["model", "optimizer"])])
def test_self_declared_partial_coverage_is_refused(small_saved, case, covers, monkeypatch,
                                                   one_line_error):
    rewrite(small_saved, _covers(covers))
    monkeypatch.setenv(checkpoint.TRUST_ENV, "1")                  # 许可也不管用：文件被改过
    with pytest.raises(CheckpointError, match="small.pt 的 sha256_covers 是 .*，不是全部字段"):
        checkpoint.load(small_saved)
    one_line_error(["generate", "--checkpoint", str(small_saved)], "不是全部字段")


def test_init_from_a_partially_covered_file_does_not_train(small_saved, tmp_path, one_line_error):
    rewrite(small_saved, _covers(["model"]))
    one_line_error([*TRAIN, "--steps", "2", "--init", str(small_saved), "--titled",
                    "--corpus", "tang_jinti", "--out", str(tmp_path / "ft.pt")],
                   "不是全部字段")
    assert not (tmp_path / "ft.pt").exists() and not (tmp_path / "ft.last.pt").exists()


def _legacy(o):
    o.pop("sha256_covers")
    o["sha256"] = checkpoint.v1_sha256(o, checkpoint.LEGACY_COVERS)


def _swap_char(o):                                 # 换掉词表里的一个字（换行符不动）
    o["tokenizer"]["chars"] = o["tokenizer"]["chars"].replace("春", "\U0002A6A5")


def _no_sha(o):
    o.pop("sha256_covers")
    o.pop("sha256")


@pytest.mark.parametrize("case, make, what", [
    ("C5", lambda o: (_swap_char(o), _legacy(o)), "只覆盖权重与优化器的旧格式校验和"),
    ("C6", lambda o: (_swap_char(o), _no_sha(o)), "没有校验和"),
    ("C7", lambda o: (o["config"].update(n_head=1), _legacy(o)),
     "只覆盖权重与优化器的旧格式校验和"),
    ("C13", lambda o: (o["meta"].update(release={"settings": {"temperature": 3.0}}), _legacy(o)),
     "只覆盖权重与优化器的旧格式校验和"),
])
def test_unverified_files_load_only_with_consent(capsys, small_saved, tmp_path, monkeypatch, case,
                                                 make, what, one_line_error):
    rewrite(small_saved, make)
    monkeypatch.delenv(checkpoint.TRUST_ENV, raising=False)
    one_line_error(["generate", "--checkpoint", str(small_saved), "--max-new-tokens", "2"],
                   f"small.pt {what}：无法确认配置、词表与 meta（发布设置）没被改过，默认不读取。"
                   "确认文件可信后设环境变量 GPTCOURSE_TRUST_UNVERIFIED=1 再读")
    one_line_error([*TRAIN, "--steps", "2", "--init", str(small_saved),
                    "--out", str(tmp_path / "ft.pt")], what)        # --init 也不训练
    assert not (tmp_path / "ft.pt").exists()
    monkeypatch.setenv(checkpoint.TRUST_ENV, "1")                  # 明确许可：读，并说一行
    if case != "C7":                                              # n_head=1 的配置本身也能用
        assert cli.main(["generate", "--checkpoint", str(small_saved), "--max-new-tokens", "2",
                         "--seed", "0"]) == 0
        err = capsys.readouterr().err
        assert err.startswith(f"警告：small.pt {what}：配置、词表与 meta 不在校验和之内，"
                              "按你的许可照常读取") and err.count("\n") == 1, err


def test_older_shipped_files_are_refused_then_upgraded_without_changing_weights(tmp_path):
    """git 历史里的 course.pt：aaa3f6a 没有校验和，d247cba 是旧格式的校验和。"""
    for commit, what in (("aaa3f6a", "没有校验和"), ("d247cba", "旧格式校验和")):
        old = tmp_path / f"course_{commit}.pt"
        try:
            data = subprocess.run(["git", "show", f"{commit}:data/checkpoints/course.pt"],
                                  cwd=ROOT, capture_output=True, check=True, timeout=120).stdout
        except (OSError, subprocess.SubprocessError):
            pytest.skip("没有 git 历史")
        old.write_bytes(data)
        with pytest.raises(CheckpointError, match=what):
            checkpoint.load(old, trust_unverified=False)
        with pytest.warns(UnverifiedCheckpointWarning):
            m_old, t_old, _ = checkpoint.load(old, trust_unverified=True)
        new = checkpoint.upgrade(old, tmp_path / f"new_{commit}.pt")
        m_new, t_new, _ = checkpoint.load(new, trust_unverified=False)
        assert t_new.to_dict() == t_old.to_dict()
        for k, v in m_old.state_dict().items():
            assert torch.equal(v, m_new.state_dict()[k]), k


@pytest.mark.parametrize("name", ["course.pt"])
def test_shipped_checkpoints_carry_the_full_checksum(name):
    path = ROOT / "data" / "checkpoints" / name
    checkpoint.load_raw(path, trust_unverified=False)                 # 校验通过
    raw = torch.load(path, weights_only=True)       # 文件本身（load_raw 返回的是迁移到 v2 之后的）
    assert raw["sha256_covers"] == list(checkpoint.CHECKSUM_COVERS)
    assert raw["sha256"] == checkpoint.payload_sha256(raw)


def test_the_checksum_covers_every_field_that_is_read():
    assert set(checkpoint.CHECKSUM_COVERS) == set(checkpoint.REQUIRED_KEYS)
    assert set(checkpoint.LEGACY_COVERS) < set(checkpoint.CHECKSUM_COVERS)


@pytest.mark.parametrize("covers", [
    ["model"] * 7,                                              # 个数对，字段不对
    ",".join(checkpoint.CHECKSUM_COVERS),                      # 字符串，不是列表
    [*checkpoint.CHECKSUM_COVERS, "model"],                    # 多出一个重复的
    None,
])
def test_forged_coverage_is_refused_even_with_consent(tmp_path, small_model, small_tok, covers,
                                                      monkeypatch):
    path = checkpoint.save(tmp_path / "m.pt", small_model, small_tok)
    obj = torch.load(path, weights_only=True)
    obj["config"]["n_head"] = 1
    obj["sha256_covers"] = covers
    obj["sha256"] = checkpoint.payload_sha256(obj, ["model"])
    torch.save(obj, path)
    monkeypatch.setenv(checkpoint.TRUST_ENV, "1")
    with pytest.raises(CheckpointError, match="不是全部字段"):
        checkpoint.load(path)


def test_full_coverage_in_another_order_still_loads(tmp_path, small_model, small_tok):
    path = checkpoint.save(tmp_path / "m.pt", small_model, small_tok, step=5)
    obj = torch.load(path, weights_only=True)
    obj["sha256_covers"] = list(reversed(obj["sha256_covers"]))
    torch.save(obj, path)
    assert checkpoint.load(path)[2]["step"] == 5


def test_legacy_checksum_with_an_edited_n_head_does_not_init_a_training(tmp_path, small_model,
                                                                        small_tok, monkeypatch,
                                                                        one_line_error):
    monkeypatch.delenv(checkpoint.TRUST_ENV, raising=False)
    path = checkpoint.save(tmp_path / "m.pt", small_model, small_tok)
    obj = torch.load(path, weights_only=True)
    obj["config"]["n_head"] = 1
    del obj["sha256_covers"]
    obj["sha256"] = checkpoint.v1_sha256(obj, checkpoint.LEGACY_COVERS)
    torch.save(obj, path)
    one_line_error([*TRAIN, "--steps", "1", "--init", str(path),
                    "--out", str(tmp_path / "ft.pt")], "只覆盖权重与优化器的旧格式校验和")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]


def test_moving_a_key_between_nesting_levels_breaks_the_checksum(tmp_path, small_model, small_tok):
    path = checkpoint.save(tmp_path / "m.pt", small_model, small_tok, meta={
        "release": {"settings": {"rhyme": True, "top_p": 0.95}, "val_loss": 3.0}})
    obj = torch.load(path, weights_only=True)
    rel = obj["meta"]["release"]
    rel["top_p"] = rel["settings"].pop("top_p")          # 发布设置少了 top_p，校验和不变
    torch.save(obj, path)
    with pytest.raises(CheckpointError, match="校验和不符"):
        checkpoint.load(path)


@pytest.mark.parametrize("case, edit", [
    ("split-string", lambda m: m.update(a="ab", b="c")),
    ("list-to-tuple", lambda m: m.update(lst=tuple(m["lst"]))),
    ("int-to-str", lambda m: m.update(n="1")),
    ("bool-to-int", lambda m: m.update(flag=1)),
    ("float-to-int", lambda m: m.update(x=1)),
    ("flatten-list", lambda m: m.update(lst=[1, 2, 3])),
    ("key-into-sibling", lambda m: m["inner"].update(b=m.pop("b"))),
])
def test_every_structural_edit_breaks_the_checksum(tmp_path, small_model, small_tok, case, edit):
    meta = {"a": "a", "b": "bc", "lst": [[1, 2], 3], "n": 1, "flag": True, "x": 1.0,
            "inner": {"c": None}}
    path = checkpoint.save(tmp_path / "m.pt", small_model, small_tok, meta=meta)
    obj = torch.load(path, weights_only=True)
    edit(obj["meta"])
    assert repr(obj["meta"]) != repr(meta)
    torch.save(obj, path)
    with pytest.raises(CheckpointError, match="校验和不符"):
        checkpoint.load(path)


def _v1_full(obj):
    obj["sha256"] = checkpoint.v1_sha256(obj)     # 更早版本写的全字段校验和


def test_v1_full_checksum_is_unverified_refused_by_default_then_upgraded(tmp_path, small_model,
                                                                         small_tok, monkeypatch):
    monkeypatch.delenv(checkpoint.TRUST_ENV, raising=False)
    path = checkpoint.save(tmp_path / "m.pt", small_model, small_tok, step=3,
                           meta={"release": {"settings": {"top_p": 0.95}}})
    obj = torch.load(path, weights_only=True)
    _v1_full(obj)
    torch.save(obj, path)
    with pytest.raises(CheckpointError, match="m.pt 是更早版本的 v1 校验和.*默认不读取.*upgrade"):
        checkpoint.load(path)
    with pytest.warns(checkpoint.UnverifiedCheckpointWarning, match="v1 校验和"):
        checkpoint.load(path, trust_unverified=True)
    rel = obj["meta"]["release"]                                   # v1 看不出的挪动
    rel["top_p"] = rel["settings"].pop("top_p")
    assert checkpoint.v1_sha256(obj) == obj["sha256"]
    rel["settings"]["top_p"] = rel.pop("top_p")
    new = checkpoint.upgrade(path, tmp_path / "new.pt")
    raw = checkpoint.load_raw(new, trust_unverified=False)
    assert raw["sha256"] == checkpoint.payload_sha256(raw) and raw["sha256"].startswith("v2:")
    assert raw["meta"] == obj["meta"] and raw["step"] == 3
    for k, v in obj["model"].items():
        assert torch.equal(v, raw["model"][k]), k


def test_an_edited_v1_full_checksum_is_corrupt_even_with_consent(tmp_path, small_model, small_tok):
    path = checkpoint.save(tmp_path / "m.pt", small_model, small_tok)
    obj = torch.load(path, weights_only=True)
    _v1_full(obj)
    obj["config"]["n_head"] = 1
    torch.save(obj, path)
    with pytest.raises(CheckpointError, match="校验和不符"):
        checkpoint.load(path, trust_unverified=True)


@pytest.mark.parametrize("digest", ["v3:" + "0" * 64, "sha512:abc", ":", "V2:" + "0" * 64])
def test_an_unknown_checksum_scheme_is_refused_even_with_consent(tmp_path, small_model, small_tok,
                                                                 digest):
    path = checkpoint.save(tmp_path / "m.pt", small_model, small_tok)
    obj = torch.load(path, weights_only=True)
    obj["sha256"] = digest
    torch.save(obj, path)
    with pytest.raises(CheckpointError, match="校验和编码 .* 不认识"):
        checkpoint.load(path, trust_unverified=True)
