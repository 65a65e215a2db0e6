"""笔记本 02 的教师版：学员写的每个零件都真的被学员的 GPT 用上，而且整个模型等于包里的模型。

从笔记本里取出定义模型的那些单元格（练习的答案与给定的接线），在一个干净的命名空间里执行；
给每个练习函数 / 每个类的 ``forward`` 装上计数器，跑一次前向，确认每一个都被调用过，
再确认装上训练好的检查点后 logits 与 ``gc.model.GPT`` 相同、贪心续写逐字相同。
"""
from __future__ import annotations

import functools

import nbformat
import pytest
import torch

import gptcourse as gc
from gptcourse.check import nb02
from gptcourse.config import preset
from gptcourse.runtime import ROOT

NOTEBOOK = ROOT / "notebooks" / "02_attention_mask.ipynb"
EXERCISE_CELLS = {f"nb02-{n}" for n in ("scaled_attention", "causal_mask", "split_merge_heads",
                                        "rope_pair", "rope_rotate", "mlp", "layernorm", "rmsnorm",
                                        "attention_module", "gpt_block", "gpt_model")}
GIVEN_CELLS = ("def rope_tables(", "class LayerNorm(")            # 给定的角度表与接线
FUNCTIONS = ("attention", "causal_mask", "split_heads", "merge_heads", "rope_pair", "rotate",
             "layernorm")
CLASSES = ("RMSNorm", "MLP", "CausalSelfAttention", "Block", "GPT")


def _model_cells() -> list[str]:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and (
        c.metadata.get("nbgrader", {}).get("grade_id") in EXERCISE_CELLS
        or any(g in c.source for g in GIVEN_CELLS))]
    assert len(cells) == len(EXERCISE_CELLS) + len(GIVEN_CELLS)        # 每个练习一格
    return cells


@pytest.fixture()
def learner(capsys):
    """执行笔记本里的模型单元格 → 命名空间；每个练习都带上计数器。"""
    ns = {"math": __import__("math"), "torch": torch, "nn": torch.nn,
          "F": torch.nn.functional, "gc": gc}
    for src in _model_cells():
        exec(compile(src, str(NOTEBOOK), "exec"), ns)              # noqa: S102 - 课程自己的笔记本
    capsys.readouterr()
    calls = dict.fromkeys(FUNCTIONS + CLASSES, 0)

    def counted(name, fn):
        @functools.wraps(fn)
        def spy(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return spy

    for name in FUNCTIONS:
        assert not gc.check.is_stub(ns[name]), name                 # 教师版：都是学员写好的
        ns[name] = counted(name, ns[name])                          # 模型按名字在这里查找它们
    for name in CLASSES:
        cls = ns[name]
        cls.forward = counted(name, cls.forward)
    return ns, calls


def _greedy(model, ids: list[int], n: int) -> list[int]:
    ids = list(ids)
    with torch.no_grad():
        for _ in range(n):
            out = model(torch.tensor([ids]))
            logits = out[0] if isinstance(out, tuple) else out
            ids.append(int(logits[0, -1].argmax()))
    return ids


def test_the_learners_gpt_calls_every_piece_and_equals_the_shipped_model(learner):
    ns, calls = learner
    shipped, tok, _ = gc.checkpoint.load()
    mine = ns["GPT"](shipped.config).eval()
    assert calls["causal_mask"] == shipped.config.n_layer           # 每层的掩码 buffer 都由它建
    assert all(torch.equal(a.attn.mask, b.attn.mask) for a, b in zip(mine.blocks, shipped.blocks))
    mine.load_state_dict(shipped.state_dict())
    val = torch.tensor(tok.encode(gc.data.load_corpus("tang_jinti").val, errors="unk"))
    x = val[: 2 * 64].view(2, 64)
    with torch.no_grad():
        torch.testing.assert_close(mine(x), shipped(x)[0], atol=1e-4, rtol=1e-4)   # 手写 vs SDPA
    used = {k for k, v in calls.items() if v} | {"layernorm"}       # layernorm：课程模型用 RMSNorm
    assert used == set(calls), f"学员的 GPT 没有调用：{set(calls) - used}"
    assert calls["rotate"] == 2 * shipped.config.n_layer            # 每层转 Q、K 各一次
    assert calls["rope_pair"] == calls["rotate"]                    # rotate 用 rope_pair 转
    prompt = tok.encode("春风")
    assert _greedy(mine, prompt, 10) == _greedy(shipped, prompt, 10)


def test_the_mini_design_runs_through_the_learners_layernorm(learner):
    ns, calls = learner
    torch.manual_seed(0)
    ref = gc.model.GPT(preset("mini", vocab_size=60, n_layer=2)).eval()
    mine = ns["GPT"](ref.config).eval()
    mine.load_state_dict(ref.state_dict())
    idx = torch.randint(60, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(mine(idx), ref(idx)[0])
    assert calls["layernorm"] == 2 * 2 + 1                          # 每块两个 + 最终归一化
    assert calls["rotate"] == 0                                     # 学习式位置：没有 RoPE


def test_the_spies_notice_a_module_that_inlines_the_pieces(learner):
    """对照：注意力模块若把各步写在自己身上（评审里的旧写法），计数器看得出来。"""
    ns, calls = learner
    def inlined(self, x, rope=None):                                # 各步都写在模块自己身上
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in self.qkv(x).split(C, dim=-1))
        if rope is not None:
            q, k = gc.rope.apply_rope(q, *rope), gc.rope.apply_rope(k, *rope)
        y = gc.model.causal_attention(q, k, v, self.mask[:T, :T])[0]
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))

    ns["CausalSelfAttention"].forward = inlined
    shipped, _, _ = gc.checkpoint.load()
    mine = ns["GPT"](shipped.config).eval()
    mine.load_state_dict(shipped.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(mine(torch.arange(20)[None]), shipped(torch.arange(20)[None])[0],
                                   atol=1e-4, rtol=1e-4)
    assert calls["attention"] == calls["split_heads"] == calls["rotate"] == 0


# ------------------------------------------------------- gc.viz.heads（第 10 节的分析代码）
def _tiny_model_and_poems():
    wu = "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。"
    qi = "朝辞白帝彩云间，千里江陵一日还。两岸猿声啼不住，轻舟已过万重山。"
    tok = gc.tokenizer.CharTokenizer.from_text(wu + qi)
    torch.manual_seed(0)
    model = gc.model.GPT(preset("teacher", vocab_size=tok.vocab_size, n_layer=2, n_head=2,
                                n_embd=16, block_size=64)).eval()
    return model, tok.encode, wu, qi


def test_rhyme_attention_reads_the_second_line_foot_from_the_fourth():
    model, encode, wu, qi = _tiny_model_and_poems()
    heads = gc.viz.heads
    assert (heads.line_tokens(wu), heads.line_tokens(qi)) == (6, 8)
    for poem, offset in ((wu, 11), (qi, 15)):
        r = heads.rhyme_attention(model, encode, [poem])
        assert r["offset"] == offset and r["n"] == 1 and r["weight"].shape == (4,)
        t, foot2 = 4 * heads.line_tokens(poem) - 3, 2 * heads.line_tokens(poem) - 2
        assert (poem[t + 1], poem[foot2]) in (("楼", "流"), ("山", "还"))   # 第 4、2 句的韵脚
        want = torch.stack(model.attention_maps(torch.tensor([encode(poem)])))[:, 0, :, t, foot2]
        torch.testing.assert_close(r["weight"], want.flatten())
    with pytest.raises(gc.errors.UserError, match="同一种诗体"):
        heads.rhyme_attention(model, encode, [wu, qi])


def test_offset_profiles_and_ablation():
    model, encode, wu, qi = _tiny_model_and_poems()
    heads = gc.viz.heads
    prof = heads.offset_profiles(model, encode, [wu], max_off=23)
    assert prof["profile"].shape == (4, 24) and len(prof["names"]) == 4
    # 每个位置的权重总和为 1：按偏移求和再乘每个偏移的位置数，正好是 T
    counts = torch.tensor([24 - o for o in range(24)], dtype=torch.float)
    torch.testing.assert_close((prof["profile"] * counts).sum(1), torch.full((4,), 24.0))
    cut = heads.ablate_head(model, 1, 0)
    assert cut.blocks[1].attn.proj.weight[:, :8].abs().sum() == 0
    assert model.blocks[1].attn.proj.weight[:, :8].abs().sum() > 0          # 原模型不变
    assert heads.poem_loss(cut, encode, [wu]) != heads.poem_loss(model, encode, [wu])


def test_exercises_appear_in_the_notebook_in_the_order_of_EXERCISES():
    """练习的编号（小结里的“练习 N”）取自 EXERCISES 的顺序：它必须与笔记本里答案单元格的顺序一致，
    而且每个练习都有一个检查单元格。"""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id", "") for c in nb.cells]
    answers = [g.removeprefix("nb02-") for g in ids if g.startswith("nb02-")
               and not g.endswith("-check")]
    assert answers == list(nb02.EXERCISES)
    assert [g.removeprefix("nb02-").removesuffix("-check") for g in ids
            if g.endswith("-check")] == list(nb02.EXERCISES)
    for i, name in enumerate(nb02.EXERCISES, 1):
        heading = [c.source for c in nb.cells if c.cell_type == "markdown"
                   and (f"### 练习 {i}：" in c.source or f"### 练习 {i}（" in c.source)]
        assert heading, f"没有“练习 {i}”（{name}）的题目"
