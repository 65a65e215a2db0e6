"""可靠性第 3 轮（../shared/reviews/reliability.md，issue 31 的 F2–F10）：每个坏结果一个回归测试，
测试名里带探针的用例编号。什么都不丢、什么都有上限：

- F2 尺寸在分配之前检查（max_new_tokens、-n、--batch-size、--grad-accum），KV 缓存按批分配；
- F3 train 不覆盖自己的起点，发散/中断时不拿以前留下的 .best.pt 充数；
- F4 校验和的覆盖范围不由文件自己说了算；
- F5–F10 发布设置与网页范围、seed、双重题目、假值的发布设置、NumPy 的数、batch_size、Ctrl+C。
"""
from __future__ import annotations

import subprocess

import numpy as np
import pytest
import torch

import gptcourse.cli.train as cli_train
import gptcourse.generate as G
from gptcourse import checkpoint, cli, release, runtime
from gptcourse import train as T
from gptcourse.checkpoint import CheckpointError, UnverifiedCheckpointWarning
from gptcourse.config import preset
from gptcourse.errors import UserError
from gptcourse.generate import generate, generate_batch, sample_poems
from gptcourse.model import GPT
from gptcourse.runtime import ROOT
from gptcourse.sampling import SamplingParams
from gptcourse.serve import make_server
from gptcourse.tokenizer import CharTokenizer

TRAIN = ["train", "--corpus", "tang_5jue", "--preset", "mini", "--batch-size", "2",
         "--no-progress", "--no-bf16", "--eval-batches", "2"]


@pytest.fixture
def tok(tiny_corpus_text) -> CharTokenizer:
    return CharTokenizer.from_text(tiny_corpus_text + "《》")


@pytest.fixture
def model(tok) -> GPT:
    torch.manual_seed(0)
    return GPT(preset("mini", vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2,
                      n_embd=16)).eval()


@pytest.fixture
def saved(tmp_path, model, tok):
    return checkpoint.save(tmp_path / "small.pt", model, tok, step=3)


def rewrite(path, fn):
    obj = torch.load(path, weights_only=True)
    fn(obj)
    torch.save(obj, path)


# ================================================================ F2：尺寸在分配之前检查
@pytest.mark.parametrize("case, n", [("N7", 10**12), ("N8", 10**30), ("N9", 2**62)])
def test_N7_N8_N9_huge_max_new_tokens_is_refused_before_allocating(model, tok, case, n):
    with pytest.raises(UserError,
                       match=rf"max_new_tokens 最多 1024（64 × block_size 16；.*收到 {n}"):
        generate(model, tok, "春", max_new_tokens=n, seed=0)
    assert len(generate(model, tok, "春", max_new_tokens=1024, temperature=0)) > 1   # 上限本身能用


@pytest.mark.parametrize("case, value", [("G12", str(10**12)), ("G13", "9" * 25),
                                         ("G40", str(10**9))])
def test_G12_G13_G40_cli_max_new_tokens_bound(saved, case, value, one_line_error):
    one_line_error(["generate", "--checkpoint", str(saved), "--max-new-tokens", value,
                    "-n", "4", "--seed", "0"], "max_new_tokens 最多 1024")


def test_G19_cli_n_is_bounded(saved, one_line_error):
    one_line_error(["generate", "--checkpoint", str(saved), "-n", "20000"],
                   "-n 必须在 [1, 10000] 之内，收到 20000")
    one_line_error(["generate", "--checkpoint", str(saved), "-n", "200000"],
                   "-n 必须在 [1, 10000] 之内")


def test_G19_kv_cache_is_allocated_per_batch_of_rows(model, tok, monkeypatch):
    """行数超过 rows_per_batch 时分批生成：每批一个缓存，批大小不超过上限，结果与逐首相同。"""
    shipped = preset("course", vocab_size=6606)
    assert G.rows_per_batch(GPT(shipped)) == 256             # course：每行 1 MiB 的 KV 缓存
    monkeypatch.setattr(G, "CACHE_BUDGET", 2 * 4 * 2 * 16 * 16)   # 正好两行一批
    assert G.rows_per_batch(model) == 2
    sizes, real = [], model.new_cache

    def new_cache():
        cache = real()
        write = cache.write

        def recording(layer, start, k, v):
            if layer == 0 and start == 0:
                sizes.append(k.shape[0])
            return write(layer, start, k, v)
        cache.write = recording
        return cache
    monkeypatch.setattr(model, "new_cache", new_cache)
    prompts = ["春", "白日", "", "花", "月"]
    batch = generate_batch(model, tok, prompts, max_new_tokens=6, seed=7, temperature=0.9)
    assert sizes == [2, 2, 1]
    assert batch == [generate(model, tok, p, max_new_tokens=6, seed=7 + i, temperature=0.9)
                     for i, p in enumerate(prompts)]


def test_G19_bad_row_is_refused_before_any_batch_is_written(model, tok, monkeypatch):
    monkeypatch.setattr(G, "CACHE_BUDGET", 1)                 # 一行一批
    with pytest.raises(UserError, match="seed 必须是"):
        generate_batch(model, tok, ["春"] * 3, max_new_tokens=2, seed=2**63 - 2)


@pytest.mark.parametrize("case, flag, value, message", [
    ("P9", "--batch-size", str(10**9), "batch_size 最多 65536，收到 1000000000"),
    ("P10", "--grad-accum", str(10**9), "grad_accum 最多 4096，收到 1000000000"),
])
def test_P9_P10_train_sizes_are_bounded(tmp_path, case, flag, value, message, one_line_error):
    one_line_error([*TRAIN, "--steps", "1", "--out", str(tmp_path / "x.pt"), flag, value],
                   message)
    assert not list(tmp_path.iterdir())


def test_P9_batch_that_the_machine_cannot_hold_is_refused(monkeypatch):
    cfg = preset("course", vocab_size=6606)
    monkeypatch.setattr(T, "available_memory", lambda device: 2**30)      # 1 GiB 可用
    big = T.TrainConfig(batch_size=4096, max_steps=1)
    with pytest.raises(UserError, match=r"批次太大：batch_size=4096、grad_accum=1 每步估计要 "
                                        r"[\d.]+ GiB 内存，这台机器现在可用 1.0 GiB；"
                                        r"batch_size 最多约 \d+"):
        T.check_memory(big, cfg, torch.device("cpu"))
    T.check_memory(T.TrainConfig(batch_size=8, max_steps=1), cfg, torch.device("cpu"))
    # 估计的上限本身放得下
    err = pytest.raises(UserError, T.check_memory, big, cfg, torch.device("cpu")).value
    limit = int(str(err).rsplit("最多约 ", 1)[1].split("（")[0])
    T.check_memory(T.TrainConfig(batch_size=limit, max_steps=1), cfg, torch.device("cpu"))


# ================================================================ F6：seed
@pytest.mark.parametrize("case, seed", [("N12", 2**64), ("N13", 1.7), ("N14", "7"),
                                        ("N15", float("nan")), ("N16", "abc"), ("N11", -1)])
def test_N11_N16_seed_is_validated(model, tok, case, seed):
    with pytest.raises(UserError, match=r"seed 必须是 \[0, 2\*\*63 - 1\] 之内的整数或 None"):
        generate(model, tok, "春", seed=seed, max_new_tokens=4)


def test_G17_cli_seed_2_64(saved, one_line_error):
    one_line_error(["generate", "--checkpoint", str(saved), "--seed", str(2**64),
                    "--max-new-tokens", "8"], "seed 必须是")


@pytest.mark.parametrize("case, seed", [("P1", "-1"), ("P2", str(2**40))])
def test_P1_P2_train_seed_is_validated(tmp_path, case, seed, one_line_error):
    one_line_error([*TRAIN, "--steps", "1", "--seed", seed,
                    "--out", str(tmp_path / "x.pt")],
                   f"seed 必须是 [0, 2**32) 之内的整数（NumPy 的种子范围），收到 {seed}")
    with pytest.raises(UserError, match="seed 必须是"):
        runtime.set_seed(int(seed))


# ================================================================ F7：双重题目
@pytest.mark.parametrize("prompt", ["《别题》", " 《别》春"])
def test_T23_G38_Q21_title_plus_a_prompt_starting_with_a_title_is_refused(model, tok, prompt):
    with pytest.raises(UserError, match="给了 title 时提示不能以“《”开头"):
        generate(model, tok, prompt, title="送友人", max_new_tokens=4)
    assert generate(model, tok, "《春》", max_new_tokens=0) == "《春》"    # 没给 title：提示照用


# ================================================================ F8：假值的发布设置
def test_S30_S31_falsy_release_settings_are_errors_not_defaults():
    with pytest.raises(UserError, match="发布设置应是字典，收到 list"):
        release.settings({"release": {"settings": []}})
    with pytest.raises(UserError, match=r"meta\['release'\] 应是字典，收到 int"):
        release.settings({"release": 0})
    for meta in ({}, {"release": None}, {"release": {"settings": None}}, None):   # 真的没有
        assert release.settings(meta) == release.FALLBACK


# ================================================================ F9：NumPy / 张量的数
def test_S11_numpy_numbers_are_numbers(model, tok):
    p = SamplingParams(repetition_penalty=np.float32(1.2), top_k=np.int64(5))
    assert type(p.repetition_penalty) is float and type(p.top_k) is int
    a = generate(model, tok, "春", repetition_penalty=np.float32(1.2), seed=0, max_new_tokens=8)
    b = generate(model, tok, "春", repetition_penalty=float(np.float32(1.2)), seed=0,
                 max_new_tokens=8)
    assert a == b


@pytest.mark.parametrize("value, kind", [(torch.tensor(1.2), "Tensor"), ("1.2", "str"),
                                         (True, "bool")])
def test_S12_a_value_that_is_not_a_number_gets_a_type_message(value, kind):
    with pytest.raises(UserError,
                       match=f"repetition_penalty 必须是数（int 或 float），收到 {kind}"):
        SamplingParams(repetition_penalty=value)


# ================================================================ F10：batch_size 与 Ctrl+C
@pytest.mark.parametrize("case, bs", [("N19", 0), ("N20", -1), ("N19b", 1.5)])
def test_N19_N20_sample_poems_batch_size(model, tok, case, bs):
    with pytest.raises(UserError, match=f"batch_size 必须是 ≥ 1 的整数，收到 {bs}"):
        sample_poems(model, tok, 3, batch_size=bs)
    assert len(sample_poems(model, tok, 3, batch_size=2, max_new_tokens=3)) == 3


def interrupt_after(monkeypatch, evals: int):
    """让 cli.train 里的训练在第 evals 次评估之后收到 Ctrl+C（KeyboardInterrupt）；
    evals=0：训练开始之前。"""
    real = cli_train.train

    def fake(*a, **kw):
        if evals == 0:
            raise KeyboardInterrupt
        seen = []

        def ctrl_c(step, model_, history):
            seen.append(step)
            if len(seen) == evals:
                raise KeyboardInterrupt
        kw["callbacks"] = [*kw.get("callbacks", []), ctrl_c]
        return real(*a, **kw)
    monkeypatch.setattr(cli_train, "train", fake)


def test_S1_ctrl_c_during_train_writes_the_best_so_far_and_says_one_line(capsys, tmp_path,
                                                                          monkeypatch):
    interrupt_after(monkeypatch, 1)
    out = tmp_path / "ft.pt"
    assert cli.main([*TRAIN, "--steps", "40", "--eval-interval", "2", "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"已中断（Ctrl+C）。已把中断之前验证损失最好的检查点写到 {out}（第 2 步）："), err
    _, _, meta = checkpoint.load(out)
    assert meta["interrupted"] is True and meta["history"]["evals"][-1]["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ft.best.pt", "ft.last.pt", "ft.pt"]


def test_S1_ctrl_c_before_the_first_evaluation_writes_nothing(capsys, tmp_path, monkeypatch):
    interrupt_after(monkeypatch, 0)
    out = tmp_path / "ft.pt"
    assert cli.main([*TRAIN, "--steps", "4", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert err == f"已中断（Ctrl+C）。还没有评估过一次，所以没有写出检查点 {out}\n"
    assert not list(tmp_path.iterdir())


def test_S1_ctrl_c_in_any_command_is_one_line_and_exit_130(capsys, saved, monkeypatch):
    import gptcourse.cli.generate as cg

    def ctrl_c(*a, **kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(cg, "generate_batch", ctrl_c)
    assert cli.main(["generate", "--checkpoint", str(saved)]) == 130
    assert capsys.readouterr().err == "已中断（Ctrl+C）\n"


# ================================================================ F3：train 的数据安全
@pytest.mark.parametrize("case, init_name", [("I12", "run.best.pt"), ("I13", "run.pt"),
                                             ("I12b", "run.last.pt")])
def test_I12_I13_init_that_train_would_overwrite_is_refused(tmp_path, model, tok, case,
                                                            init_name, one_line_error, file_sha):
    init = checkpoint.save(tmp_path / init_name, model, tok)
    before = file_sha(init)
    one_line_error([*TRAIN, "--steps", "2", "--init", str(init),
                    "--out", str(tmp_path / "run.pt")],
                   f"--init {init} 正是这次训练要写的 {init_name}：训练会覆盖它的起点。"
                   "请换一个 --out")
    assert file_sha(init) == before and sorted(p.name for p in tmp_path.iterdir()) == [init_name]


def test_I12_init_reached_through_a_link_is_refused(tmp_path, model, tok, one_line_error):
    init = checkpoint.save(tmp_path / "run.best.pt", model, tok)
    (tmp_path / "other.pt").symlink_to(init)
    one_line_error([*TRAIN, "--steps", "2", "--init", str(tmp_path / "other.pt"),
                    "--out", str(tmp_path / "run.pt")], "正是这次训练要写的 run.best.pt")


def test_I14_divergence_before_the_first_evaluation_never_ships_a_stale_best(capsys, tmp_path,
                                                                             model, tok, file_sha):
    """以前的训练留下了 m.pt 与 m.best.pt；这一次在第一次评估之前就发散：两者都不动，说真话。"""
    out, best = tmp_path / "m.pt", tmp_path / "m.best.pt"
    checkpoint.save(out, model, tok, step=1, meta={"run": "A"})
    checkpoint.save(best, model, tok, step=1, meta={"run": "A"})
    before = file_sha(out), file_sha(best)
    rc = cli.main([*TRAIN, "--steps", "3", "--eval-interval", "3", "--lr", "1e30", "--warmup", "0",
                   "--out", str(out)])
    assert rc == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("错误：训练在第 ") and err[0].endswith(
        f"在那之前没有一次有限的验证损失，所以没有写出检查点 {out}"
        "（m.best.pt 是以前的训练留下的，没有动它）"), err
    assert (file_sha(out), file_sha(best)) == before


# ================================================================ F4：校验和的覆盖范围
def _covers(covers):
    def edit(o):
        o["config"]["n_head"] = 1                                   # 形状不变：权重照样载得进
        o["sha256_covers"] = covers
        o["sha256"] = checkpoint.payload_sha256(o, covers)
    return edit


@pytest.mark.parametrize("case, covers", [("C8", ["model"]), ("C9", []),
                                          ("C8b", ["model", "optimizer"])])
def test_C8_C9_self_declared_partial_coverage_is_refused(saved, case, covers,
                                                         monkeypatch, one_line_error):
    rewrite(saved, _covers(covers))
    monkeypatch.setenv(checkpoint.TRUST_ENV, "1")                  # 许可也不管用：文件被改过
    with pytest.raises(CheckpointError, match="small.pt 的 sha256_covers 是 .*，不是全部字段"):
        checkpoint.load(saved)
    one_line_error(["generate", "--checkpoint", str(saved)], "不是全部字段")


def test_I15_init_from_a_partially_covered_file_does_not_train(saved, tmp_path, one_line_error):
    rewrite(saved, _covers(["model"]))
    one_line_error([*TRAIN, "--steps", "2", "--init", str(saved), "--titled",
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
def test_C5_C6_C7_C13_unverified_files_load_only_with_consent(capsys, saved, tmp_path,
                                                              monkeypatch, case, make, what,
                                                              one_line_error):
    rewrite(saved, make)
    monkeypatch.delenv(checkpoint.TRUST_ENV, raising=False)
    one_line_error(["generate", "--checkpoint", str(saved), "--max-new-tokens", "2"],
                   f"small.pt {what}：无法确认配置、词表与 meta（发布设置）没被改过，默认不读取。"
                   "确认文件可信后设环境变量 GPTCOURSE_TRUST_UNVERIFIED=1 再读")
    one_line_error([*TRAIN, "--steps", "2", "--init", str(saved),
                    "--out", str(tmp_path / "ft.pt")], what)        # --init 也不训练
    assert not (tmp_path / "ft.pt").exists()
    monkeypatch.setenv(checkpoint.TRUST_ENV, "1")                  # 明确许可：读，并说一行
    if case != "C7":                                              # n_head=1 的配置本身也能用
        assert cli.main(["generate", "--checkpoint", str(saved), "--max-new-tokens", "2",
                         "--seed", "0"]) == 0
        err = capsys.readouterr().err
        assert err.startswith(f"警告：small.pt {what}：配置、词表与 meta 不在校验和之内，"
                              "按你的许可照常读取") and err.count("\n") == 1, err


def test_C1_C3_older_shipped_files_are_refused_then_upgraded_without_changing_weights(tmp_path):
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


# ================================================================ F5：发布设置与网页的范围
@pytest.mark.parametrize("case, key, value, message", [
    ("C17", "temperature", 50.0, "temperature 必须在 [0.01, 3.0] 之内（或正好是 0），收到 50.0"),
    ("C18", "repetition_penalty", 5.0, "repetition_penalty 必须在 [0.1, 3.0] 之内，收到 5.0"),
    ("C19", "top_k", 10**6, "top_k 必须在 [0, 61] 之内，收到 1000000"),
])
def test_C17_C18_C19_release_outside_the_server_ranges_is_refused_at_start(
        tmp_path, model, tok, case, key, value, message, one_line_error):
    assert tok.vocab_size == 61
    defaults = release.validate_settings({key: value})              # 库的范围：合法
    with pytest.raises(UserError, match="检查点的发布设置超出网页服务的范围"):
        make_server(model, tok, port=0, defaults=defaults)
    path = checkpoint.save(tmp_path / "rel.pt", model, tok,
                           meta={"release": {"settings": {key: value}}})
    one_line_error(["serve", "--checkpoint", str(path), "--port", "0"],
                   f"检查点的发布设置超出网页服务的范围：{message}")
    server = make_server(model, tok, port=0, defaults=release.validate_settings({}))
    server.server_close()                                            # 范围之内：照常启动
