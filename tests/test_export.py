"""导出到 Hugging Face：用真的 transformers 加载导出的文件夹；logits、贪心续写、分词
都要和课程的一样。

transformers 是可选依赖（``.[bench]``）；没装时跳过，但 CI=true 时（.ci/run 装了它）缺了就是失败。
"""
from __future__ import annotations

import json
import os

import pytest
import torch

import gptcourse as gc
from gptcourse import cli
from gptcourse.errors import UserError
from gptcourse.export import FILES, architecture, export_hf


def _transformers():
    try:
        import transformers
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("transformers 没有安装（.[bench]）；CI 里导出测试不能跳过")
        pytest.skip("可选依赖 transformers（.[bench]）没有安装")
    return transformers


@pytest.fixture(scope="module")
def shipped_hf(tmp_path_factory):
    tf = _transformers()
    model, tok, meta = gc.checkpoint.load()
    out = export_hf(model, tok, meta, tmp_path_factory.mktemp("hf") / "course")
    hf = tf.AutoModelForCausalLM.from_pretrained(out).eval()
    ht = tf.AutoTokenizer.from_pretrained(out)
    return model, tok, out, hf, ht


def test_the_exported_folder_has_the_ecosystem_files(shipped_hf):
    _, tok, out, hf, _ = shipped_hf
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert type(hf).__name__ == "LlamaForCausalLM"
    gen = json.loads((out / "generation_config.json").read_text(encoding="utf-8"))
    rel = gc.release.settings(gc.checkpoint.load()[2])
    assert gen["temperature"] == rel["temperature"] and gen["eos_token_id"] == tok.eos_id


def test_transformers_gives_the_same_logits_as_the_course_model(shipped_hf):
    model, tok, _, hf, _ = shipped_hf
    val = gc.data.poems(gc.data.load_corpus("tang_jinti").val)[:8]
    x = torch.tensor([[tok.eos_id] + tok.encode(p, errors="unk")[:60] for p in val
                      if len(p) >= 60])                                   # [B, 61]
    with torch.no_grad():
        gap = (hf(x).logits - model(x)[0]).abs().max().item()
    assert gap <= 1e-4, gap


def test_greedy_continuation_is_the_same_character_for_character(shipped_hf):
    model, tok, _, hf, ht = shipped_hf
    for prompt in ("春风", "明月", "白日依山尽，"):
        ours = gc.generate.generate(model, tok, prompt, temperature=0)
        enc = ht(prompt, return_tensors="pt")                            # 开头自动加一个换行
        assert enc.input_ids[0, 0].item() == tok.eos_id
        with torch.no_grad():
            ids = hf.generate(**enc, max_new_tokens=80, do_sample=False)[0]
        assert ht.decode(ids, skip_special_tokens=True) == ours


def test_the_tokenizer_round_trips_the_validation_set(shipped_hf):
    _, tok, _, _, ht = shipped_hf
    val = gc.data.poems(gc.data.load_corpus("tang_jinti").val)
    known = [p for p in val if not tok.unknown_chars(p)]
    assert len(known) > 1000
    for p in known:
        ids = ht(p, add_special_tokens=False).input_ids
        assert ids == tok.encode(p) and ht.decode(ids) == p
    unknown = [p for p in val if tok.unknown_chars(p)]                   # 词表外的字 → <unk>
    assert all(ht(p, add_special_tokens=False).input_ids == tok.encode(p, errors="unk")
               for p in unknown)


def test_a_pipeline_writes_a_poem_from_the_exported_folder(shipped_hf):
    tf = _transformers()
    model, tok, out, _, _ = shipped_hf
    pipe = tf.pipeline("text-generation", model=str(out))
    text = pipe("春风", max_new_tokens=40, do_sample=False)[0]["generated_text"]
    assert text == gc.generate.generate(model, tok, "春风", temperature=0)


def _tiny(tok, **kw):
    torch.manual_seed(0)
    cfg = gc.config.preset(kw.pop("preset"), vocab_size=tok.vocab_size, block_size=32,
                           n_layer=2, n_head=2, n_embd=32, **kw)
    model = gc.model.GPT(cfg).eval()
    with torch.no_grad():                              # 偏置、范数都不是初始值，才测得出摆错了
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


@pytest.mark.parametrize("preset,kw,cls", [
    ("gpt2", {}, "GPT2LMHeadModel"),                                  # 分开的 q/k/v，tanh GELU
    ("mini", {}, "GPT2LMHeadModel"),                                  # 融合 qkv 带偏置，精确 GELU
    ("gpt2", {"tie_weights": False, "bias": False}, "GPT2LMHeadModel"),   # 没有偏置：补 0
    ("course", {"tie_weights": False}, "LlamaForCausalLM"),
    ("course", {"bias": True, "qkv": "separate"}, "LlamaForCausalLM"),
])
def test_each_layout_loads_into_its_transformers_class(tmp_path, preset, kw, cls):
    tf = _transformers()
    corpus = gc.data.load_corpus("tang_5jue")
    tok = gc.tokenizer.CharTokenizer.from_text(corpus.train)
    model = _tiny(tok, preset=preset, **kw)
    out = export_hf(model, tok, {}, tmp_path / "m")
    hf = tf.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(hf).__name__ == cls
    x = torch.tensor([[tok.eos_id] + tok.encode(gc.data.poems(corpus.val)[0])[:31]])
    with torch.no_grad():
        gap = (hf(x).logits - model(x)[0]).abs().max().item()
    assert gap <= 1e-4, gap


def test_unsupported_layouts_and_tokenizers_are_refused_before_writing(tmp_path):
    cfg = gc.config.preset("course", vocab_size=10, n_layer=1, n_embd=32, n_head=2)
    with pytest.raises(UserError, match="pos=rope、norm=layernorm"):
        architecture(gc.config.preset("course", norm="layernorm"))
    bpe = gc.bpe.BPETokenizer.train("春风春风春风" * 20, vocab_size=260)
    with pytest.raises(UserError, match="只能导出字符级分词器"):
        export_hf(gc.model.GPT(cfg), bpe, {}, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_the_command_refuses_a_non_empty_folder_without_force(tmp_path, capsys):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "mine.txt").write_text("别删我", encoding="utf-8")
    assert cli.main(["export", "--hf", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "不是空目录" in err and "--force" in err
    assert (out / "mine.txt").read_text(encoding="utf-8") == "别删我"
    (tmp_path / "f").write_text("x", encoding="utf-8")
    assert cli.main(["export", "--hf", str(tmp_path / "f")]) == 2
    assert "是文件" in capsys.readouterr().err


def test_force_replaces_the_folder_and_leaves_no_temporary_files(tmp_path, capsys):
    pytest.importorskip("safetensors")
    out = tmp_path / "hf"
    out.mkdir()
    (out / "config.json").write_text("{}", encoding="utf-8")          # 以前导出的、过时的文件夹
    assert cli.main(["export", "--hf", str(out), "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_force_never_replaces_a_folder_holding_anything_but_an_export(tmp_path, capsys):
    """--force 落在仓库、家目录或检查点所在的目录上：拒绝，一个文件也不动（以前整个目录被删掉）。"""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "a.py").write_text("code", encoding="utf-8")
    ckpt_dir = tmp_path / "ck"
    ckpt_dir.mkdir()
    ckpt = ckpt_dir / "model.pt"
    ckpt.write_bytes(gc.checkpoint.SHIPPED.read_bytes())
    for out, extra in ((repo, []), (ckpt_dir, ["--checkpoint", str(ckpt)])):
        before = sorted(p.name for p in out.iterdir())
        assert cli.main(["export", "--hf", str(out), "--force", *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "只覆盖以前导出的文件夹" in err
        assert sorted(p.name for p in out.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "repo"]


def test_links_empty_names_and_file_parents_are_refused_in_one_line(tmp_path, capsys):
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    for hf, words in (("link", "符号链接"), ("dangling", "符号链接"), ("afile/sub", "是文件")):
        assert cli.main(["export", "--hf", str(tmp_path / hf)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err
    assert cli.main(["export", "--hf", ""]) == 2
    assert "是空的" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "dangling", "link", "target"]
    assert (tmp_path / "link").is_symlink() and not any(target.iterdir())


def test_a_failed_write_is_one_line_exit_1_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    """磁盘满、只读：机器的问题，一行、退出码 1，临时目录删掉。"""
    pytest.importorskip("safetensors")
    import gptcourse.export as ex

    def full(tmp, *a):
        (tmp / "config.json").write_text("{}", encoding="utf-8")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(ex, "_write_folder", full)
    assert cli.main(["export", "--hf", str(tmp_path / "hf")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "磁盘已满" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
