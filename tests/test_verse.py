"""gptcourse.verse：汉字与断句、诗体、平水韵查表、押韵、平仄、格律报告与校准。"""
from __future__ import annotations

import json
import math

import pytest

import gptcourse as gc
from gptcourse import verse
from gptcourse.acceptance import REFERENCE_FRACTION, THRESHOLDS
from gptcourse.verse import (
    analyze,
    check_form,
    check_rhyme,
    check_taboos,
    check_tones,
    group_chars,
    group_names,
    is_hanzi,
    poem_form,
    rates,
    resolve_group,
    rhyme_groups,
    shuffle_chars,
    split_lines,
    swap_rhymes,
    tone,
)

JINGYESI = "床前明月光，疑是地上霜。举头望明月，低头思故乡。"      # 李白《静夜思》，古绝
DENGGUAN = "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。"      # 王之涣《登鹳雀楼》
CHUNXIAO = "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。"      # 孟浩然《春晓》，仄韵
CHUNWANG = ("国破山河在，城春草木深。感时花溅泪，恨别鸟惊心。"     # 杜甫《春望》
            "烽火连三月，家书抵万金。白头搔更短，浑欲不胜簪。")
HUANGHELOU = ("昔人已乘黄鹤去，此地空余黄鹤楼。黄鹤一去不复返，白云千载空悠悠。"   # 崔颢，拗律
              "晴川历历汉阳树，芳草萋萋鹦鹉洲。日暮乡关何处是，烟波江上使人愁。")
BAIDI = "朝辞白帝彩云间，千里江陵一日还。两岸猿声啼不住，轻舟已过万重山。"    # 李白《早发白帝城》


# ---------------------------------------------------------------- 汉字、断句、诗体
def test_is_hanzi_ranges():
    assert all(map(is_hanzi, "汉㐀𠀀豈"))                    # 基本区、扩展 A、扩展 B、兼容区
    assert not any(map(is_hanzi, ["あ", "〇", "\ufffd", "A", "，", "春风"]))


@pytest.mark.parametrize("poem,form", [
    (DENGGUAN, "五绝"), (CHUNWANG, "五律"), (BAIDI, "七绝"), (HUANGHELOU, "七律"),
    (DENGGUAN + "\n", "五绝"),
    ("白日依山尽，黄河入海流！欲穷千里目，更上一层楼？", "五绝"),   # ？！可以代替"。"
    ("𠀀日依山尽，黄河入海流。欲穷千里目，更上一层楼。", "五绝"),   # 扩展 B 的字也是汉字
])
def test_poem_form_accepts(poem, form):
    assert poem_form(poem) == form and check_form(poem) and check_form(poem, form)


@pytest.mark.parametrize("poem", [
    "床前明月光，疑是地上霜，举头望明月，低头思故乡。",   # 双数句用了"，"（唐诗三百首里的静夜思）
    "あいうえお，黄河入海流。欲穷千里目，更上一层楼。",   # 假名不是汉字
    "白日依山尽。黄河入海流，欲穷千里目。更上一层楼，",   # 单数句用了"。"
    "白日依山尽；黄河入海流。欲穷千里目，更上一层楼。",   # "；"不是句末
    HUANGHELOU.replace("是，", "是？"),                    # ？ 不能代替单数句末的"，"
    "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。\n\n",
])
def test_poem_form_rejects(poem):
    assert poem_form(poem) is None and not check_form(poem)


def test_check_form_with_form_and_acrostic():
    assert check_form(DENGGUAN, "五绝", "白黄欲更") and not check_form(DENGGUAN, "五绝", "白黄欲")
    assert not check_form(DENGGUAN, "七绝")
    with pytest.raises(ValueError, match="诗体"):
        check_form(DENGGUAN, "六绝")


def test_split_lines_and_spans():
    assert split_lines("春眠不觉晓，处处闻啼鸟") == (["春眠不觉晓", "处处闻啼鸟"], ["，", ""])
    assert verse.line_spans("白日依山尽，黄河") == [(0, 5, "，"), (6, 8, "")]


@pytest.mark.parametrize("poem", ["春风、花红。秋月、夜空。",                      # V21
                                  "白日依山尽；黄河入海流。欲穷千里目：更上一层楼。"])  # V22
def test_form_and_rhyme_split_lines_the_same_way(poem):
    """"；：、"不断句：诗体、押韵、平仄看到的是同样的句子，韵脚只会是真正的句末字。"""
    spans = verse.line_spans(poem)
    assert all(m in verse.LINE_ENDS for _, _, m in spans)
    ends = {b - 1 for _, b, _ in spans}
    a = analyze(poem)
    assert a.form is None and check_tones(poem) == {}
    assert set(a.rhyme_positions) <= ends
    assert "、" in split_lines(poem)[0][0] or "；" in split_lines(poem)[0][0]


# ---------------------------------------------------------------- 平水韵查表
def test_rhyme_table():
    assert len(group_names()) == 106 and len(group_names("平")) == 30
    assert len(group_names("仄")) == 76
    assert rhyme_groups("东") == ("上平一东",) and rhyme_groups("霜") == ("下平七阳",)
    assert rhyme_groups("干") == ("上平十四寒", "下平一先", "去声十五翰")   # 干、乾、幹 合并
    assert rhyme_groups("啼") == rhyme_groups("蹄") == ("上平八齐",)      # 旧表里没有"啼"
    assert rhyme_groups("東") == ("上平一东",) and rhyme_groups("，") == ()
    assert rhyme_groups("疎") == ("上平六鱼",)                           # 异体字：由广韵补上
    assert (tone("霜"), tone("晓"), tone("看"), tone("啼"), tone("，"), tone("A")) == \
        ("平", "仄", "中", "平", None, None)
    assert resolve_group("阳") == resolve_group("下平七阳") == "下平七阳"
    assert "霜" in group_chars("阳") and "东" not in group_chars("阳")
    with pytest.raises(ValueError, match="平声韵部"):
        resolve_group("上声一董")


def test_table_covers_the_corpus():
    train = gc.data.load_corpus("tang_jinti").train
    chars = [c for c in train if is_hanzi(c)]
    covered = sum(bool(rhyme_groups(c)) for c in chars)
    assert covered / len(chars) >= 0.999                                # 按字次计 99.92 %


# ---------------------------------------------------------------- 押韵
@pytest.mark.parametrize("poem,group,positions,first", [
    (JINGYESI, "下平七阳", [4, 10, 22], True),          # 霜/乡 押阳韵，首句"光"也入韵
    (DENGGUAN, "下平十一尤", [10, 22], False),
    (CHUNWANG, "下平十二侵", [10, 22, 34, 46], False),
    (HUANGHELOU, "下平十一尤", [14, 30, 46, 62], False),
    (BAIDI, "上平十五删", [6, 14, 30], True),
])
def test_worked_rhymes(poem, group, positions, first):
    r = check_rhyme(poem)
    assert (r.rhymes, r.group, r.positions, r.first_line) == (True, group, positions, first)
    assert all(group in rhyme_groups(poem[i]) for i in positions)


def test_non_rhymes():
    assert not check_rhyme(CHUNXIAO).rhymes                             # 晓/鸟/少：上声筿，仄韵
    assert check_rhyme(CHUNXIAO).group is None
    assert not check_rhyme(DENGGUAN[:-2] + "天。").rhymes                # 流（尤）/ 天（先）
    assert not check_rhyme("白日依山尽，").rhymes and not check_rhyme("").rhymes


def test_repeated_rhyme_characters():
    r = check_rhyme(DENGGUAN)
    assert r.repeated == [] and check_rhyme(DENGGUAN, strict=True).rhymes
    twice = DENGGUAN.replace("流", "楼")                                # 楼…楼
    loose, strict = check_rhyme(twice), check_rhyme(twice, strict=True)
    assert loose.rhymes and loose.repeated == ["楼"] and loose.group == "下平十一尤"
    assert not strict.rhymes and strict.repeated == ["楼"] and strict.positions == [10, 22]
    first = "江上起秋风，城头见白虹。夜半闻清笛，山前有古风。"           # 首句入韵的"风"又做韵脚
    assert check_rhyme(first).first_line and check_rhyme(first).repeated == ["风"]
    assert check_rhyme(first).positions == [4, 10, 22]
    # 第 3、5、7 句不入韵：它们的末字重复不算重韵
    assert check_rhyme("白日依山尽，黄河入海流。欲穷千里尽，更上一层楼。").repeated == []
    a = analyze(twice)
    assert a.rhymes and a.repeated_rhymes == ["楼"] and not analyze(twice, strict=True).rhymes
    assert analyze(DENGGUAN).to_dict()["repeated_rhymes"] == []
    assert verse.repeated_rhyme_rate([DENGGUAN, twice, "不是诗"]) == pytest.approx(1 / 3)


def test_polyphonic_and_neighbour_rhymes():
    poem = "春风入故宫，江上起秋西。夜半闻清笛，花间落小梨。"          # 梨：支/齐；西：齐
    assert check_rhyme(poem).group == "上平八齐"
    borrow = "江上起秋风，城头见白龙。夜半闻清笛，山前有古松。"        # 风（东）借给 龙/松（冬）
    strict, loose = check_rhyme(borrow), check_rhyme(borrow, neighbours=True)
    assert strict.group == loose.group == "上平二冬"
    assert not strict.first_line and strict.positions == [10, 22]
    assert loose.first_line and loose.positions == [4, 10, 22]


# ---------------------------------------------------------------- 平仄
def test_tone_rules():
    rules = check_tones(DENGGUAN)
    assert len(rules) == 9 and all(rules.values())                    # 4 分明 + 4 对 + 1 粘
    assert len(check_tones(HUANGHELOU)) == 31
    assert check_tones(HUANGHELOU)["第3句第2、4字分明"] is False        # 黄鹤一去：拗
    jys = check_tones(JINGYESI)                                        # 古绝，不讲平仄
    assert sum(v is False for v in jys.values()) == 5 and jys["第1、2联相粘"] is False
    assert check_tones(CHUNXIAO)["第2句第2、4字分明"] is True          # 处（仄）/ 啼（平）
    assert check_tones(CHUNXIAO.replace("啼", "髪"))["第2句第2、4字分明"] is None  # 表外
    assert check_tones("白日依山尽") == {}


XIANYANG = ("一上高城万里愁，蒹葭杨柳似汀洲。溪云初起日沉阁，山雨欲来风满楼。"   # 许浑，咸阳城东楼
            "鸟下绿芜秦苑夕，蝉鸣黄叶汉宫秋。行人莫问当年事，故国东来渭水流。")
ZHONGNAN = "终南阴岭秀，积雪浮云端。林表明霁色，城中增暮寒。"       # 祖咏《终南望余雪》


def test_gu_ping_with_its_famous_rescue():
    # "山雨欲来风满楼"：最后五字 欲来风满楼 = 仄平平仄平。第三字"欲"（入声）本该平而用了仄，
    # 第五字"风"用平声来救（孤平拗救），不算孤平
    assert [tone(c) for c in "欲来风满楼"] == ["仄", "平", "平", "仄", "平"]
    taboos = check_taboos(XIANYANG)
    assert taboos["第4句不犯孤平"] is True and len(taboos) == 16
    broken = XIANYANG.replace("风满楼", "雨满楼")                   # 不救：仄平仄仄平 → 孤平
    assert check_taboos(broken)["第4句不犯孤平"] is False
    assert check_taboos(DENGGUAN.replace("黄河", "白河"))["第2句不犯孤平"] is False   # 五言
    assert check_taboos(DENGGUAN)["第2句不犯孤平"] is True                          # 平平仄仄平
    assert check_taboos(DENGGUAN)["第4句不犯孤平"] is True        # 仄仄仄平平：正格，不是孤平
    front = XIANYANG.replace("山雨欲来风满楼", "春山欲来雨满楼")    # 七言前两字不论：平声救不了
    assert check_taboos(front)["第4句不犯孤平"] is False


def test_san_ping_wei():
    assert check_taboos(ZHONGNAN)["第2句不犯三平尾"] is False        # 积雪浮云端：仄仄平平平
    assert check_taboos(ZHONGNAN)["第4句不犯三平尾"] is True         # 城中增暮寒
    assert check_taboos(HUANGHELOU)["第4句不犯三平尾"] is None       # 空悠悠："空"可平可仄
    assert check_taboos(HUANGHELOU.replace("空悠悠", "春悠悠"))["第4句不犯三平尾"] is False
    assert check_taboos("白日依山尽") == {}                           # 不合诗体：不检查


def test_taboos_are_reported_not_counted():
    a = analyze(ZHONGNAN)
    assert a.taboos == check_taboos(ZHONGNAN) and a.taboos["第2句不犯三平尾"] is False
    assert not set(a.rules) & set(a.taboos) and a.checkable == sum(
        v is not None for v in check_tones(ZHONGNAN).values())
    assert json.loads(json.dumps(a.to_dict(), ensure_ascii=False))["taboos"] == a.taboos


def test_analyze_report():
    a = analyze(JINGYESI)
    assert (a.form, a.valid_form, a.rhymes, a.rhyme_group) == ("五绝", True, True, "下平七阳")
    assert (a.held, a.checkable) == (4, 9) and a.tonal_share == pytest.approx(4 / 9)
    assert len(a.tones) == len(JINGYESI) and a.tones[:5] == ["平", "平", "平", "仄", "平"]
    assert a.tones[5] is None                                          # 标点
    d = json.loads(json.dumps(a.to_dict(), ensure_ascii=False))
    assert d["rhyme_positions"] == [4, 10, 22] and d["rules"]["第1、2联相粘"] is False
    b = analyze("不是诗")
    assert (b.form, b.rhymes, b.rules, b.tonal_share) == (None, False, {}, None)
    with pytest.raises(TypeError, match="字符串"):
        analyze(None)


# ---------------------------------------------------------------- 校准与对照组
def test_controls_keep_characters():
    poems = [DENGGUAN, CHUNWANG, BAIDI]
    swapped = swap_rhymes(poems, seed=1)
    ends = lambda ps: sorted(p[b - 1] for p in ps for _, b, _ in verse.line_spans(p)[1::2])  # noqa: E731
    assert ends(swapped) == ends(poems) and swapped != poems
    shuffled = shuffle_chars(poems, seed=1)
    assert [sorted(p) for p in shuffled] == [sorted(p) for p in poems]
    assert all(poem_form(p) == poem_form(q) for p, q in zip(shuffled, poems))


def test_calibration_on_real_val_poems_sets_the_thresholds():
    val = gc.data.poems(gc.data.load_corpus("tang_jinti").val)
    table = verse.calibration(val, seed=0)
    (r, t), (r_swap, t_swap), (r_shuf, t_shuf) = table["真实"], table["韵脚互换"], table["字序打乱"]
    assert round(r * len(val)) == 1603 and len(val) == 1774            # 90.4 % 押韵
    assert 0.93 < t < 0.94 and t_swap == t                             # 换韵脚不动第 2、4、6 字
    assert r_swap < 0.05 and r_shuf < 0.05 and 0.45 < t_shuf < 0.56
    for key, real in (("rhyme_rate", r), ("tonal_share", t)):          # 门槛 = 真实值 × 0.9
        assert THRESHOLDS[key] == math.floor(real * REFERENCE_FRACTION * 100) / 100, key
    repeated = verse.repeated_rhyme_rate(val)                          # 重韵：门槛 = 真实值 ÷ 0.9
    assert round(repeated * len(val)) == 7
    assert THRESHOLDS["repeated_rhymes"] == math.ceil(repeated / REFERENCE_FRACTION * 100) / 100
    with pytest.raises(ValueError, match="为空"):
        rates([])


def test_one_definition_of_what_ends_a_line():
    """近似重复（data）与注意力头分析（viz.heads）按 verse 的 LINE_ENDS 断句："；"不断句。"""
    import gptcourse as gc
    assert gc.viz.heads.PUNCT == frozenset(gc.verse.LINE_ENDS) == frozenset("，。？！")
    assert gc.data._lines("春眠不觉晓；处处闻啼鸟。") == ["春眠不觉晓；处处闻啼鸟"]
