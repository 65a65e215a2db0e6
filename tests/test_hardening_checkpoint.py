"""检查点的加固：校验和、临时文件、字段类型、resume 先检查后改动、BPE 检查点能从命令行生成。"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from gptcourse import checkpoint
from gptcourse.bpe import BPETokenizer
from gptcourse.checkpoint import CheckpointError
from gptcourse.config import preset
from gptcourse.model import GPT
from gptcourse.optim import make_optimizer
from gptcourse.runtime import ROOT
from gptcourse.tokenizer import CharTokenizer
from gptcourse.train import TrainConfig, train


@pytest.fixture
def tok(tiny_corpus_text) -> CharTokenizer:
    return CharTokenizer.from_text(tiny_corpus_text)


def tiny(tok, seed=0) -> GPT:
    torch.manual_seed(seed)
    return GPT(preset("teacher", vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2,
                      n_embd=16))


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


# ---------------------------------------------------------------- 校验和
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


# ---------------------------------------------------------------- 字段类型与权重内容
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


# ---------------------------------------------------------------- 临时文件
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


# ---------------------------------------------------------------- resume：先检查，后改动
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


# ------------------------------------------------------- BPE 检查点：训练、保存、命令行生成
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
    from gptcourse.generate import generate
    poems = [generate(loaded, tok2, "床前", max_new_tokens=12, seed=s) for s in (0, 1)]
    assert r.stdout.decode("utf-8") == "".join(p + "\n" for p in poems)
    assert all(p.startswith("床前") and len(p) > 2 for p in poems)


def test_bpe_streaming_waits_for_whole_characters(tiny_corpus_text):
    """BPE 的词元可能是半个汉字：流式片段只含完整的字，拼起来等于 generate() 的续写。"""
    from gptcourse.generate import generate, stream_tokens

    tok = BPETokenizer()                                          # 没有合并：一个汉字 = 3 个词元
    torch.manual_seed(0)
    model = GPT(preset("mini", vocab_size=256, block_size=32, n_layer=1, n_head=2, n_embd=16))
    for seed in range(3):
        pieces = list(stream_tokens(model, tok, "春", max_new_tokens=20, seed=seed))
        assert "春" + "".join(pieces) == generate(model, tok, "春", max_new_tokens=20, seed=seed)
        assert all(p and not p.endswith("\ufffd") for p in pieces[:-1])    # 不切开一个字


# ---------------------------------------------------------------- 本轮的探测（K4、K4b、K11、K32、K34）  # noqa: E501
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
