"""随课程发布的检查点：能加载、配置就是 course 预设、词表与语料一致。"""
import torch

import gptcourse as gc


def test_shipped_checkpoint_matches_course_preset_and_corpus():
    model, tok, meta = gc.checkpoint.load()
    assert model.config == gc.config.preset("course")
    corpus = gc.data.load_corpus("tang_jinti")
    assert tok == gc.tokenizer.CharTokenizer.from_text(gc.data.vocabulary_text(corpus))
    assert meta["windows"] == "poem" and meta["corpus"] == "tang_jinti"
    assert meta["command"].startswith("python -m gptcourse train ")
    assert not model.training
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_shipped_model_beats_bigram_on_a_val_prefix():
    model, tok, _ = gc.checkpoint.load()
    corpus = gc.data.load_corpus("tang_jinti")
    val = "".join(gc.data.poems(corpus.val)[:100][i] + "\n" for i in range(100))
    loss = gc.evaluate.split_loss(model, tok, val)
    assert 3.0 < loss < 5.0                      # 二元基线约 5.7，均匀分布 ln V ≈ 8.77


def test_shipped_checkpoint_carries_its_release_settings_and_training_curve():
    _, _, meta = gc.checkpoint.load()
    release = meta["release"]
    assert release["settings"] is not None and release["confirmed"]["passed"]
    assert release["chosen"]["seeds"] != release["confirmed"]["seeds"]     # 换一组种子确认
    s = gc.release.settings(meta)
    assert set(gc.release.FALLBACK) <= set(s)
    probes = meta["probe"]                                   # 训练曲线：每次评估都采样量了一次
    assert len(probes) >= 4 and probes[-1]["tokens"] == meta["tokens"]
    assert all(0 <= p["rhyme_rate"] <= 1 and 0 <= p["form_rate"] <= 1 for p in probes)


def test_the_shipped_release_was_confirmed_on_a_block_nobody_had_looked_at():
    """issue 48：确认放行的那块种子，在确认之前没有被任何一次“看”（试验、挑选、失败的确认）碰过；
    确认之后的看（报告）可以有，但这一块不会再被确认第二次。"""
    _, _, meta = gc.checkpoint.load()
    looks = gc.release.looks(meta)
    block = gc.release.gate_seeds(meta)
    confirms = [i for i, look in enumerate(looks) if look["purpose"].startswith(gc.release.CONFIRM)
                and tuple(look["seeds"]) == block]
    assert len(confirms) == 1, looks
    earlier = looks[:confirms[0]]
    gc.release.require_unseen(earlier, block)                  # 之前谁都没看过：不抛出
    assert tuple(meta["release"]["confirmed"]["seeds"]) == block
