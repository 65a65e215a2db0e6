"""gptcourse.objectives 与 train(objectives=…)：标签落在哪个字上、错一位取出、损失怎么合起来、
头不进模型、裁剪包括头、命令行 --aux。"""
from __future__ import annotations

import json

import pytest
import torch

from gptcourse import checkpoint, cli, objectives
from gptcourse.bpe import BPETokenizer
from gptcourse.config import preset
from gptcourse.errors import UserError
from gptcourse.model import GPT
from gptcourse.objectives import PING_GROUPS, Objective, WithObjectives, rhyme_labels, tone_labels
from gptcourse.tokenizer import CharTokenizer
from gptcourse.train import TrainConfig, _batches, batch_generator, train

DENG = "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。"          # 平声韵：流、楼（下平十一尤）
XIAO = "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。"          # 仄韵：没有平声韵部
TEXT = f"\n{DENG}\n《春晓》{XIAO}\n《登楼》{DENG}\n白日依山\n"


@pytest.fixture(scope="module")
def tok():
    return CharTokenizer.from_text(TEXT)


def ids_of(tok, text=TEXT):
    return torch.tensor(tok.encode(text), dtype=torch.long)


def marked(labels, text=TEXT):
    return {(i, text[i]): v for i, v in enumerate(labels.tolist()) if v >= 0}


def test_rhyme_labels_sit_on_even_line_ends_of_ping_rhyming_poems(tok):
    you = PING_GROUPS.index("下平十一尤")
    second = TEXT.index("《登楼》") + len("《登楼》")
    assert marked(rhyme_labels(ids_of(tok), tok)) == {
        (11, "流"): you, (23, "楼"): you,                       # 首句不入韵（尽）：只有双数句
        (second + 10, "流"): you, (second + 22, "楼"): you}     # 题目之后的正文，下标对回 ids
    # 仄韵的《春晓》、不合诗体的“白日依山”、题目与标点都没有标签


def test_tone_labels_are_the_2nd_and_4th_characters_of_each_line(tok):
    got = marked(tone_labels(ids_of(tok, f"\n{DENG}\n"), tok), f"\n{DENG}\n")
    assert [(c, v) for (_, c), v in got.items()] == [
        ("日", 1), ("山", 0), ("河", 0), ("海", 1), ("穷", 0), ("里", 1), ("上", 1), ("层", 0)]


def test_label_windows_are_shifted_like_targets():
    data = torch.arange(200)
    labels = data * 10
    obj = Objective("x", 8, ("a",), {"train": labels})
    gens = [batch_generator(3, 5) for _ in range(2)]
    (x, y, aux), = _batches(data, "train", gens, 1, 4, 16, None, None, None, (obj,))
    assert torch.equal(y, x + 1) and torch.equal(aux, y * 10)     # 第 t 个位置 ← 第 t + 1 个字


def test_loss_with_nothing_to_predict_is_zero_not_nan():
    obj = Objective("x", 8, ("a", "b"), {})
    assert obj.loss(torch.randn(2, 5, 8), torch.full((2, 5), -1)).item() == 0.0


def test_total_loss_is_lm_loss_plus_weighted_aux():
    torch.manual_seed(0)
    model = GPT(preset("course", vocab_size=30, block_size=16, n_layer=1, n_head=2, n_embd=16))
    model.eval()
    obj = Objective("x", 16, ("a", "b", "c"), {}, weight=0.5)
    x, y = torch.randint(30, (2, 16)), torch.randint(30, (2, 16))
    t = torch.randint(-1, 3, (2, 16))
    parts, total = WithObjectives(model, [obj])(x, y, t)
    assert parts[0].item() == model(x, y)[1].item()               # 同一条前向
    assert parts[1].item() == obj.loss(model.hidden(x), t).item()
    torch.testing.assert_close(total, parts[0] + 0.5 * parts[1])


def tiny_run(obj_names, tok, steps=4, **kw):
    torch.manual_seed(0)
    model = GPT(preset("course", vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2,
                       n_embd=16))
    ids = ids_of(tok, TEXT * 4)
    objs = objectives.build(obj_names, {"train": ids, "val": ids}, tok, 16)
    cfg = TrainConfig(batch_size=4, lr=3e-3, warmup_steps=1, max_steps=steps, eval_interval=2,
                      eval_batches=2, bf16=False, progress=False, log_interval=1, **kw)
    history = train(model, ids, ids, cfg, objectives=objs)
    return model, objs, history


def test_train_logs_aux_losses_and_leaves_the_model_unchanged_in_shape(tok):
    model, objs, history = tiny_run(["rhyme", "tones"], tok)
    assert set(history.steps[0]["aux"]) == {"rhyme", "tones"}
    assert {"aux_rhyme", "aux_tones", "train", "val"} <= set(history.evals[-1])
    plain = GPT(model.config)
    assert list(model.state_dict()) == list(plain.state_dict())    # 头不在模型里
    assert all(o.head.weight.grad is not None for o in objs)        # 头也训练了


def test_heads_are_added_to_a_given_optimizer_and_clipped(tok):
    torch.manual_seed(0)
    model = GPT(preset("course", vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2,
                       n_embd=16))
    ids = ids_of(tok, TEXT * 4)
    objs = objectives.build(["tones"], {"train": ids}, tok, 16, weight=1e4)   # 很大的梯度
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cfg = TrainConfig(batch_size=4, lr=1e-3, warmup_steps=0, max_steps=1, eval_interval=1,
                      eval_batches=1, bf16=False, progress=False, grad_clip=1.0)
    train(model, ids, None, cfg, optimizer=opt, objectives=objs)
    head = {id(p) for p in objs[0].parameters()}
    assert sum(id(p) in head for g in opt.param_groups for p in g["params"]) == 2
    total = torch.sqrt(sum(p.grad.pow(2).sum() for g in opt.param_groups for p in g["params"]
                           if p.grad is not None))
    assert total.item() == pytest.approx(1.0, rel=1e-4)            # 裁剪后的全局范数 = 1


def test_without_objectives_history_has_no_aux(tok):
    _, _, history = tiny_run([], tok)
    assert "aux" not in history.steps[0] and "aux_rhyme" not in history.evals[-1]


@pytest.mark.parametrize("spec, message", [("rhyme,bogus", "--aux 只能是"),
                                           ("rhyme,rhyme", "不重复"), ("rhyme=0", "权重 > 0"),
                                           ("rhyme=x", "权重 > 0"), ("rhyme=nan", "权重 > 0")])
def test_parse_rejects_unknown_and_repeated(spec, message):
    with pytest.raises(ValueError, match=message):
        objectives.parse(spec)


def test_parse_reads_per_objective_weights():
    assert objectives.parse("rhyme=0.3, norepeat") == {"rhyme": 0.3, "norepeat": None}
    assert objectives.parse("") == {}


def test_used_rhyme_labels_list_earlier_feet_of_the_same_poem(tok):
    text = f"\n{DENG}\n《春晓》{XIAO}\n"
    ids = ids_of(tok, text)
    labels = objectives.used_rhyme_labels(ids, tok)                  # [N, MAX_FEET]
    got = {(i, text[i]): [tok.decode([j]) for j in row if j >= 0]
           for i, row in enumerate(labels.tolist()) if max(row) >= 0}
    assert got == {(23, "楼"): ["流"]}                  # 第 2 个韵脚记第 1 个；仄韵的《春晓》没有


def test_first_line_labels_are_the_first_line_of_titled_poems_only(tok):
    labels = objectives.first_line_labels(ids_of(tok), tok)
    start = TEXT.index("《春晓》") + len("《春晓》")
    second = TEXT.index("《登楼》") + len("《登楼》")
    got = marked(labels)
    assert "".join(c for _, c in got) == "春眠不觉晓白日依山尽"       # 只有带题目的诗、只有第一句
    assert min(got)[0] == start and max(got)[0] == second + 4
    assert all(v == int(ids_of(tok)[i]) for (i, _), v in got.items())   # 标签就是这个字自己


def test_first_line_boost_is_the_lm_loss_on_those_positions(tok):
    torch.manual_seed(0)
    ids = ids_of(tok)
    labels = objectives.first_line_labels(ids, tok)
    x, y, aux = ids[None, :-1], ids[None, 1:], labels[None, 1:]
    model = GPT(preset("teacher", vocab_size=tok.vocab_size, block_size=128, n_layer=1,
                       n_head=2, n_embd=16)).eval()          # eval：两次前向没有 dropout 的差别
    boost = objectives.FirstLine({}, weight=0.5)
    parts, total = WithObjectives(model, [boost])(x, y, aux)
    logits = model(x)[0]
    keep = aux >= 0
    want = torch.nn.functional.cross_entropy(logits[keep], y[keep])
    torch.testing.assert_close(parts[1], want.detach())
    torch.testing.assert_close(total, parts[0] + 0.5 * parts[1])
    (built,) = objectives.build(["firstline"], {"train": ids}, tok, 16, weight=0.2)
    assert isinstance(built, objectives.FirstLine) and built.weight == 0.2
    with pytest.raises(objectives.UserError, match="带《题》的诗"):
        objectives.build(["firstline"], {"train": ids_of(tok, f"\n{DENG}\n")}, tok, 16)


def test_repeat_penalty_lowers_the_probability_of_used_rhymes():
    torch.manual_seed(0)
    logits = torch.zeros(1, 3, 5, requires_grad=True)                 # 均匀：每个字 0.2
    used = torch.full((1, 3, objectives.MAX_FEET), -1)
    used[0, 1, :2] = torch.tensor([2, 4])                             # 第 1 个位置用过 2 与 4
    pen = objectives.RepeatPenalty({}, weight=1.0)
    loss = pen.loss(logits, used)
    assert loss.item() == pytest.approx(-torch.log1p(torch.tensor(-0.4)).item())
    loss.backward()
    g = logits.grad[0]
    assert (g[0] == 0).all() and (g[2] == 0).all()                    # 没有标签的位置不受影响
    assert g[1, 2] > 0 and g[1, 4] > 0 and g[1, 0] < 0                # 往下压用过的字
    none = torch.full_like(used, -1)
    assert pen.loss(logits, none).item() == 0.0                       # 没有可算的位置：0 而不是 NaN


def test_cli_aux_trains_and_records_it(tmp_path, capsys):
    out = tmp_path / "t.pt"
    argv = ["train", "--corpus", "tang_5jue", "--preset", "mini", "--batch-size", "4",
            "--block-size", "32", "--warmup", "1", "--no-bf16", "--no-progress", "--steps", "2",
            "--aux", "rhyme,tones=0.2,norepeat", "--aux-weight", "0.5", "--out", str(out)]
    assert cli.main(argv) == 0
    json.loads(capsys.readouterr().out.split("训练完成：", 1)[1])
    model, _, meta = checkpoint.load(out)
    assert meta["aux"] == {"rhyme": 0.5, "tones": 0.2, "norepeat": 0.5}
    assert set(meta["history"]["steps"][0]["aux"]) == {"rhyme", "tones", "norepeat"}
    assert "--aux rhyme,tones=0.2,norepeat" in meta["command"]


@pytest.mark.parametrize("extra, message", [(["--aux", "rime"], "--aux 只能是"),
                                            (["--aux", "rhyme", "--aux-weight", "0"],
                                             "--aux-weight 必须")])
def test_cli_bad_aux_is_one_line_exit_2(tmp_path, capsys, extra, message):
    argv = ["train", "--corpus", "tang_5jue", "--preset", "mini", "--steps", "2", "--no-progress",
            "--out", str(tmp_path / "x.pt"), *extra]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("错误：") and message in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())


def test_rhyme_set_labels_carry_the_group_and_the_used_feet(tok):
    text = f"\n{DENG}\n《春晓》{XIAO}\n"
    labels = objectives.rhyme_set_labels(ids_of(tok, text), tok)       # [N, 1 + MAX_FEET]
    got = {(i, text[i]): (PING_GROUPS[row[0]], [tok.decode([j]) for j in row[1:] if j >= 0])
           for i, row in enumerate(labels.tolist()) if row[0] >= 0}
    assert got == {(23, "楼"): ("下平十一尤", ["流"])}   # 第 2 个韵脚：韵部与用过的字；仄韵的没有
    repeated = "白日依山尽，黄河入海流。欲穷千里目，更上一层流。"           # 重韵的诗不教
    tok2 = CharTokenizer.from_text(f"\n{repeated}\n")
    assert (objectives.rhyme_set_labels(ids_of(tok2, f"\n{repeated}\n"), tok2) < 0).all()


def test_rhyme_set_loss_is_minus_log_mass_on_unused_chars_of_the_group():
    members = torch.tensor([[False, True, True, True, False]])       # 韵部 0 = 字 1、2、3
    labels = torch.full((1, 3, 1 + objectives.MAX_FEET), -1)
    labels[0, 1, 0], labels[0, 1, 1] = 0, 2                          # 第 1 个位置：韵部 0，用过 2
    logits = torch.zeros(1, 3, 5, requires_grad=True)                 # 均匀：每个字 0.2
    rs = objectives.RhymeSet({}, weight=1.0, members=members)
    loss = rs.loss(logits, labels)
    assert loss.item() == pytest.approx(-torch.log(torch.tensor(0.4)).item())   # 字 1 与 3
    loss.backward()
    g = logits.grad[0]
    assert (g[0] == 0).all() and (g[2] == 0).all()                    # 没有标签的位置不受影响
    assert g[1, 1] < 0 and g[1, 3] < 0                                # 往上抬可用的字
    assert g[1, 2] > 0 and g[1, 0] > 0                                # 用过的字与韵外的字往下压
    empty = torch.full_like(labels, -1)
    assert rs.loss(logits, empty).item() == 0.0                       # 没有可算的位置：0 而不是 NaN


def test_rhyme_set_is_built_with_the_vocabulary_groups(tok):
    (rs,) = objectives.build({"rhymeset": 0.5}, {"train": ids_of(tok)}, tok, 16)
    assert isinstance(rs, objectives.RhymeSet) and rs.weight == 0.5
    you = PING_GROUPS.index("下平十一尤")
    assert {tok.decode([i]) for i in rs.members[you].nonzero().flatten().tolist()} >= {"流", "楼"}
    assert not rs.members[:, tok.encode("尽")[0]].any()             # 仄声字不在任何平声韵部


# ---------------------------------------------------------------- 坏输入
# 权重有上限；没有标签的语料或分词器被拒绝；标签缺了划分或长度不对。
TRAIN = ["train", "--corpus", "tang_5jue", "--preset", "mini", "--batch-size", "2",
         "--no-progress", "--no-bf16", "--eval-batches", "1", "--steps", "1"]


PROSE = "我家门前有两株树，一株是枣树，还有一株也是枣树。\n这上面的夜的天空，奇怪而高。\n"


@pytest.fixture
def small_ids(small_tok, tiny_corpus_text) -> torch.Tensor:
    return torch.tensor(small_tok.encode(tiny_corpus_text), dtype=torch.long)


@pytest.mark.parametrize("spec", ["rhyme=1e300", "rhyme=1e30", "rhyme=10001"])
def test_parse_refuses_weights_above_the_cap(spec):
    with pytest.raises(UserError, match="权重 > 0 且 ≤ 10000"):
        objectives.parse(spec)
    assert objectives.parse("rhyme=10000") == {"rhyme": objectives.MAX_WEIGHT}


def test_spaces_around_name_and_weight_are_ignored():
    assert objectives.parse(" rhyme = 0.5 , tones ") == {"rhyme": 0.5, "tones": None}


def test_a_spec_that_is_not_a_string_is_a_user_error():
    with pytest.raises(UserError, match="--aux 应是字符串"):
        objectives.parse(5)


@pytest.mark.parametrize("weight", [float("inf"), 1e300, "1", True, None, 0, -1.0,
                                    float("nan")])
def test_build_checks_every_weight(small_tok, small_ids, weight):
    with pytest.raises(UserError, match=r"权重必须是 \(0, 10000\] 之内的数"):
        objectives.build(["rhyme"] if weight is not None else {"rhyme": "x"},
                         {"train": small_ids}, small_tok, 16, 1.0 if weight is None else weight)


@pytest.mark.parametrize("name", ["rhyme", "tones", "norepeat"])
def test_a_corpus_without_poems_gives_no_labels_and_is_refused(name):
    ptok = CharTokenizer.from_text(PROSE)
    pids = torch.tensor(ptok.encode(PROSE), dtype=torch.long)
    with pytest.raises(UserError, match=f"辅助目标 {name} 在 train 里一个标签也没有"):
        objectives.build([name], {"train": pids}, ptok, 16)


def test_a_bpe_tokenizer_gives_no_labels_and_is_refused(tiny_corpus_text):
    bpe = BPETokenizer.train(tiny_corpus_text * 3, vocab_size=300)
    bids = torch.tensor(bpe.encode(tiny_corpus_text), dtype=torch.long)
    with pytest.raises(UserError, match="一个词元一个字（BPETokenizer）"):
        objectives.build(["rhyme"], {"train": bids}, bpe, 16)


def test_real_poems_still_give_labels_for_all_three(small_tok, small_ids):
    built = objectives.build(["rhyme", "tones", "norepeat"], {"train": small_ids}, small_tok, 16)
    assert [o.name for o in built] == ["rhyme", "tones", "norepeat"]
    assert all(bool((o.labels["train"] >= 0).any()) for o in built)


def test_labels_must_cover_every_split_with_the_right_length(small_gpt, small_tok, small_ids):
    objs = objectives.build(["rhyme"], {"train": small_ids}, small_tok, 16)
    cfg = TrainConfig(batch_size=2, max_steps=1, eval_interval=1, eval_batches=1,
                      progress=False, bf16=False)
    with pytest.raises(UserError, match="没有 val 划分的标签"):
        train(small_gpt(), small_ids, small_ids, cfg, objectives=objs)    # 以前：KeyError 'val'
    n = len(small_ids)
    with pytest.raises(UserError, match=f"train 标签有 {n} 个，数据有 {2 * n} 个"):
        train(small_gpt(), torch.cat([small_ids, small_ids]), None, cfg, objectives=objs)


@pytest.mark.parametrize("argv, message", [
    (["--aux", "rhyme=1e300"], "--aux 只能是"),                       # 以前：退出码 1“发散”
    (["--aux", "rhyme", "--aux-weight", "1e300"], "--aux-weight 必须在 (0, 10000] 之内"),
])
def test_cli_refuses_huge_weights_before_training(tmp_path, one_line_error, argv, message):
    one_line_error([*TRAIN, *argv, "--out", str(tmp_path / "a.pt")], message)
    assert not list(tmp_path.iterdir())


def test_cli_aux_on_a_corpus_without_rhyming_poems_exits_2(tmp_path, one_line_error):
    argv = [*TRAIN, "--aux", "rhyme", "--out", str(tmp_path / "a.pt")]
    argv[argv.index("tang_5jue")] = "luxun_nahan"             # 以前：退出码 0，辅助损失恒为 0
    one_line_error(argv, "辅助目标 rhyme 在 train 里一个标签也没有")
    assert not list(tmp_path.iterdir())
