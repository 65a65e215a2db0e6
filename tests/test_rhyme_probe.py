"""押韵的领先指标：教师强制下模型放在本诗韵部上的概率（gptcourse.rhyme_probe）。"""
from __future__ import annotations

import pytest
import torch

from gptcourse.rhyme_probe import chance_mass, rhyme_feet, rhyme_group_mass
from gptcourse.tokenizer import CharTokenizer
from gptcourse.verse import ping_groups

DENGGUAN = "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。"      # 尤韵：流、楼
CHUNWANG = ("国破山河在，城春草木深。感时花溅泪，恨别鸟惊心。"     # 侵韵：深、心、金、簪
            "烽火连三月，家书抵万金。白头搔更短，浑欲不胜簪。")
CHUNXIAO = "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。"      # 仄韵：不算


class Always:
    """假模型：每个位置都把全部概率放在同一个词元上。"""

    def __init__(self, token_id: int, vocab_size: int):
        self.token_id, self.V = token_id, vocab_size
        self.training = False
        self.w = torch.nn.Parameter(torch.zeros(1))

    def parameters(self):
        return iter([self.w])

    def eval(self):
        return self

    def train(self, mode=True):
        return self

    def __call__(self, x):
        logits = torch.full((*x.shape, self.V), -1e9)
        logits[..., self.token_id] = 0.0
        return logits, None


def test_rhyme_feet():
    assert rhyme_feet(DENGGUAN) == ("下平十一尤", [10, 22])
    assert rhyme_feet(CHUNWANG)[1] == [10, 22, 34, 46]
    assert rhyme_feet(CHUNXIAO) is None and rhyme_feet("不是诗") is None


def test_chance_is_the_rhyme_position_character_frequency():
    chance = chance_mass(DENGGUAN + "\n" + CHUNWANG + "\n" + CHUNXIAO + "\n")
    # 双数句末字：流 楼 / 深 心 金 簪 / 鸟 少 —— 8 个，尤韵 2 个、侵韵 4 个（鸟、少是仄声）
    assert chance["下平十一尤"] == pytest.approx(2 / 8)
    assert chance["下平十二侵"] == pytest.approx(4 / 8)
    assert len(chance) == 30 and chance["上平一东"] == 0
    with pytest.raises(ValueError, match="合乎诗体"):
        chance_mass("不是诗\n")


def test_mass_is_one_on_the_poems_group_and_zero_elsewhere():
    train = DENGGUAN + "\n" + CHUNWANG + "\n"
    tok = CharTokenizer.from_text(train + CHUNXIAO)
    lou = tok.encode("楼")[0]
    assert "下平十一尤" in ping_groups("楼")
    res = rhyme_group_mass(Always(lou, tok.vocab_size), tok, [DENGGUAN, CHUNWANG, CHUNXIAO], train)
    assert set(res) == {1, 2, 3, 4}
    assert res[1]["n"] == res[2]["n"] == 2 and res[3]["n"] == res[4]["n"] == 1   # 春晓不算
    assert res[1]["mass"] == pytest.approx(0.5) and res[1]["top1"] == 0.5   # 尤韵 1，侵韵 0
    assert res[3]["mass"] == pytest.approx(0.0)
    assert res[2]["chance"] == pytest.approx((2 / 6 + 4 / 6) / 2)
    with pytest.raises(ValueError, match="押韵"):
        rhyme_group_mass(Always(lou, tok.vocab_size), tok, [CHUNXIAO], train)


def test_shipped_model_rhymes_with_its_earlier_feet():
    """course.pt 训练时带韵部头（--aux rhyme）：第 2 个韵脚起，大部分概率在本诗的韵部上。
    （200 首 val：第 1 个韵脚 ≈ 31 %，第 2–4 个 ≈ 85 %，机会 ≈ 6 %；
    只用语言模型损失的旧模型第 2 个 ≈ 13 %。）"""
    import gptcourse as gc

    model, tok, _ = gc.checkpoint.load()
    corpus = gc.data.load_corpus("tang_jinti")
    res = rhyme_group_mass(model, tok, gc.data.poems(corpus.val)[:200], corpus.train)
    for k in (1, 2, 3):
        assert res[k]["chance"] < 0.1 < res[k]["mass"]
    for k in (2, 3):
        assert res[k]["mass"] > 0.6 and res[k]["mass"] > 2 * res[1]["mass"]   # 照着前面的韵脚押
